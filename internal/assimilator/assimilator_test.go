package assimilator

import (
	"cmp"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

const (
	t0      = 1_700_000_000
	fanoutN = 8
)

type bundle struct {
	st      *store.Store
	upload  string
	results string
	appID   int64
	m       *Metrics
	// now is the services' clock, in Unix seconds.
	now atomic.Int64
}

func setup(t *testing.T) *bundle {
	t.Helper()
	dir := t.TempDir()
	b := &bundle{st: storetest.New(t), upload: filepath.Join(dir, "upload"), results: filepath.Join(dir, "results"),
		m: NewMetrics(prometheus.NewRegistry())}
	id := storetest.App(t, b.st, storetest.AppOptions{CreateTime: t0, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
	b.appID = id
	b.now.Store(t0)
	return b
}

func (b *bundle) service(mod, index int) *Service {
	return b.serviceWith(&FileHandler{Dir: b.results, UploadDir: b.upload, Fanout: fanoutN}, b.st,
		Config{Mod: mod, ModIndex: index})
}

// serviceWith returns an assimilator of app demo with handler h over st,
// reading 10 jobs at a time, on the bundle's clock, without jitter.
func (b *bundle) serviceWith(h Handler, st Store, cfg Config) *Service {
	cfg.App = "demo"
	cfg.Mod = cmp.Or(cfg.Mod, 1)
	cfg.Batch = cmp.Or(cfg.Batch, 10)
	return mustNew(New(cfg, Deps{Store: st, Handler: h, Metrics: b.m,
		Now: func() time.Time { return time.Unix(b.now.Load(), 0) }, Rand: func() float64 { return 0 }}))
}

// mustNew returns the Service New made, and panics with New's error for a
// test's invalid Config.
func mustNew(s *Service, err error) *Service {
	if err != nil {
		panic(fmt.Sprintf("assimilator.New: %v", err))
	}
	return s
}

// advance moves the clock on by d.
func (b *bundle) advance(d time.Duration) { b.now.Add(int64(d / time.Second)) }

// addJob inserts a job ready for assimilation. With outputs it has a
// canonical result whose output files hold them (nil: file not uploaded),
// opened as "out", "out1", "out2", ...; without, it failed with error mask
// mask.
func (b *bundle) addJob(t *testing.T, name string, mask state.ErrorMask, outputs ...[]byte) int64 {
	t.Helper()
	wuID := storetest.Job(t, b.st, storetest.JobOptions{CreateTime: t0, App: b.appID, Name: name, MinQuorum: 1,
		TargetNResults: 1, MaxErrorResults: 3, MaxTotalResults: 6, MaxSuccessResults: 3, ErrorMask: mask,
		AssimilateState: state.AssimilateReady, TransitionTime: state.NoTransition}).ID
	if len(outputs) == 0 {
		return wuID
	}
	rname := name + "_0"
	opens := make([]string, len(outputs))
	opens[0] = "out"
	for i := 1; i < len(opens); i++ {
		opens[i] = "out" + strconv.Itoa(i)
	}
	doc, err := jobxml.FormatResult(storetest.Outputs(rname, opens, 1e6))
	if err != nil {
		t.Fatal(err)
	}
	rid := storetest.Instance(t, b.st, storetest.InstanceOptions{CreateTime: t0, Job: wuID, Name: rname,
		ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ValidateState: state.ValidateValid, XMLDocIn: doc}).ID
	if _, err := b.st.DB().Exec(`UPDATE workunit SET canonical_resultid = ? WHERE id = ?`, rid, wuID); err != nil {
		t.Fatal(err)
	}
	for i, out := range outputs {
		if out != nil {
			b.upload1(t, jobxml.OutputName(rname, i), out)
		}
	}
	return wuID
}

func (b *bundle) upload1(t *testing.T, name string, body []byte) {
	t.Helper()
	path, err := fanout.Path(b.upload, name, fanoutN)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, body, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, outputfile.FinishedMode); err != nil { // as the data server marks it
		t.Fatal(err)
	}
}

func (b *bundle) job(t *testing.T, id int64) row.Workunit {
	t.Helper()
	return storetest.Workunit(t, b.st, id)
}

// files lists the results directory, sub-directories included: each file
// by its path ("job/out"), each empty directory with a slash ("job/").
func (b *bundle) files(t *testing.T) []string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(b.results, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == b.results {
			return err
		}
		rel := filepath.ToSlash(path[len(b.results)+1:])
		if !d.IsDir() {
			names = append(names, rel)
			return nil
		}
		entries, err := os.ReadDir(path)
		if err == nil && len(entries) == 0 {
			names = append(names, rel+"/")
		}
		return err
	})
	if err != nil {
		t.Fatalf("read results dir: %v", err)
	}
	return names
}

func (b *bundle) read(t *testing.T, name string) string {
	t.Helper()
	body, err := os.ReadFile(filepath.Join(b.results, name))
	if err != nil {
		t.Fatalf("read result file %s: %v", name, err)
	}
	return string(body)
}

func runOnce(t *testing.T, s *Service) int {
	t.Helper()
	n, err := s.RunOnce(context.Background())
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	return n
}

func TestSuccessWritesOutputOnceAndMarksDone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wuID := b.addJob(t, "job", 0, []byte("digest 42\n"))
	s := b.service(1, 0)
	if n := runOnce(t, s); n != 1 {
		t.Fatalf("RunOnce = %d jobs, want 1", n)
	}
	if got := b.read(t, "job/out"); got != "digest 42\n" {
		t.Errorf("results/job/out = %q, want the canonical output", got)
	}
	if wu := b.job(t, wuID); wu.AssimilateState != state.AssimilateDone || wu.TransitionTime != t0 || wu.ModTime != t0 {
		t.Errorf("job = assimilate %v transition_time %d mod_time %d; want done, %d, %d",
			wu.AssimilateState, wu.TransitionTime, wu.ModTime, t0, t0)
	}
	if n := runOnce(t, s); n != 0 {
		t.Errorf("second RunOnce = %d jobs, want 0", n)
	}
	// As if the process died after writing but before marking: the job is
	// handled again and its output still exists exactly once.
	if _, err := b.st.DB().Exec(`UPDATE workunit SET assimilate_state = ? WHERE id = ?`, state.AssimilateReady, wuID); err != nil {
		t.Fatal(err)
	}
	runOnce(t, s)
	if got := b.files(t); !slices.Equal(got, []string{"job/out"}) {
		t.Errorf("results dir after a rerun = %v, want [job/out] only", got)
	}
	if got := b.read(t, "job/out"); got != "digest 42\n" {
		t.Errorf("results/job/out after a rerun = %q, want the same bytes", got)
	}
	if got := testutil.ToFloat64(b.m.jobs.WithLabelValues("success")); got != 2 {
		t.Errorf(`jobs_assimilated_total{kind="success"} = %v, want 2`, got)
	}
}

func TestFailedJobWritesErrorFile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wuID := b.addJob(t, "bad", state.ErrTooManyErrorResults|state.ErrTooManyTotalResults)
	runOnce(t, b.service(1, 0))
	if got, want := b.read(t, "bad.error"), "too_many_error_results|too_many_total_results\n"; got != want {
		t.Errorf("results/bad.error = %q, want %q", got, want)
	}
	if wu := b.job(t, wuID); wu.AssimilateState != state.AssimilateDone {
		t.Errorf("failed job assimilate_state = %v, want done", wu.AssimilateState)
	}
	if got := testutil.ToFloat64(b.m.jobs.WithLabelValues("error")); got != 1 {
		t.Errorf(`jobs_assimilated_total{kind="error"} = %v, want 1`, got)
	}
}

func TestSeveralOutputFiles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.addJob(t, "multi", 0, []byte("zero"), []byte("one"))
	runOnce(t, b.service(1, 0))
	if got0, got1 := b.read(t, "multi/out"), b.read(t, "multi/out1"); got0 != "zero" || got1 != "one" {
		t.Errorf("results multi/out, multi/out1 = %q, %q; want zero, one", got0, got1)
	}
}

func TestOnlyOwnReplica(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []int64
	for _, name := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		ids = append(ids, b.addJob(t, name, state.ErrCancelled))
	}
	mustSplit(t, ids, 2)
	runOnce(t, b.service(2, 0))
	for _, id := range ids {
		want := state.AssimilateReady
		if store.Partition(id, 2) == 0 {
			want = state.AssimilateDone
		}
		if wu := b.job(t, id); wu.AssimilateState != want {
			t.Errorf("replica 0 of 2: job %d = %v, want %v", id, wu.AssimilateState, want)
		}
	}
}

// markedMeanwhile is a handler during whose call someone else marks the
// job named name assimilated: an operator, or a replica started with the
// wrong --mod.
type markedMeanwhile struct {
	st   *store.Store
	name string
	now  int64
}

func (h markedMeanwhile) Handle(ctx context.Context, wu row.Workunit, _ *row.Result) error {
	if wu.Name != h.name {
		return nil
	}
	_, err := h.st.WorkunitMarkAssimilatedBatch(ctx, []int64{wu.ID}, h.now)
	return err
}

// TestMarkAssimilatedTwiceConflicts: a job marked by someone else while it
// was being handled is a conflict when the assimilator marks its page: not
// counted as assimilated again, the other mark left as it is, and the rest
// of the page marked.
func TestMarkAssimilatedTwiceConflicts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	x := b.addJob(t, "x", state.ErrCancelled)
	y := b.addJob(t, "y", state.ErrCancelled)
	s := b.serviceWith(markedMeanwhile{st: b.st, name: "x", now: t0 - 100}, b.st, Config{})
	if n := runOnce(t, s); n != 2 {
		t.Fatalf("RunOnce = %d jobs, want 2", n)
	}
	if got := testutil.ToFloat64(b.m.conflicts); got != 1 {
		t.Errorf("conflicts_total = %v, want 1 (job x)", got)
	}
	if got := testutil.ToFloat64(b.m.jobs.WithLabelValues("error")); got != 1 {
		t.Errorf(`jobs_assimilated_total{kind="error"} = %v, want 1 (job y only)`, got)
	}
	if wu := b.job(t, x); wu.AssimilateState != state.AssimilateDone || wu.ModTime != t0-100 {
		t.Errorf("job x = %v mod_time %d, want done by the other mark (%d)", wu.AssimilateState, wu.ModTime, t0-100)
	}
	if wu := b.job(t, y); wu.AssimilateState != state.AssimilateDone || wu.ModTime != t0 {
		t.Errorf("job y = %v mod_time %d, want done, %d", wu.AssimilateState, wu.ModTime, t0)
	}
	if n := runOnce(t, s); n != 0 {
		t.Errorf("second RunOnce = %d jobs, want 0", n)
	}
}

// mustSplit fails the test unless ids fall in more than one of mod
// partitions: a test of replicas sharing work needs work on both sides.
func mustSplit(t *testing.T, ids []int64, mod int) {
	t.Helper()
	seen := map[int]bool{}
	for _, id := range ids {
		seen[store.Partition(id, mod)] = true
	}
	if len(seen) < 2 {
		t.Fatalf("ids %v all hash to one partition of %d", ids, mod)
	}
}
