package batch_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/batch"
	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

var _ batch.Store = (*store.Store)(nil)

type bundle struct {
	st         *store.Store
	svc        *batch.Service
	app        row.App
	resultsDir string
	now        time.Time
}

func setup(t *testing.T, limits batch.Limits) *bundle {
	t.Helper()
	st := storetest.New(t)
	dir := t.TempDir()
	b := &bundle{st: st, resultsDir: filepath.Join(dir, "results"), now: time.Unix(1_700_000_000, 0)}
	b.app = storetest.App(t, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1})
	b.svc = batch.New(batch.Options{Store: st, DownloadDir: filepath.Join(dir, "download"), Fanout: 8,
		ResultsDir: b.resultsDir, Limits: limits, Now: func() time.Time { return b.now }})
	return b
}

// spec is a valid submission of n jobs named j0, j1, ...
func spec(name string, n int) batch.Spec {
	s := batch.Spec{App: "demo", Name: name, Params: jobs.DefaultParams()}
	for i := range n {
		s.Jobs = append(s.Jobs, batch.Job{Name: "j" + string(rune('0'+i)), Input: []byte("input " + string(rune('0'+i)))})
	}
	return s
}

func (b *bundle) submit(t *testing.T, s batch.Spec) row.Batch {
	t.Helper()
	got, created, err := b.svc.Submit(context.Background(), s)
	if err != nil || !created {
		t.Fatalf("Submit(%s) = %+v, %v, %v; want created", s.Name, got, created, err)
	}
	return got
}

func (b *bundle) jobs(t *testing.T, id int64) []row.Workunit {
	t.Helper()
	wus, err := b.st.WorkunitListByBatch(context.Background(), id, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return wus
}

func TestSubmit(t *testing.T) {
	t.Parallel()
	b := setup(t, batch.Limits{})
	ctx := context.Background()
	s := spec("b1", 3)
	s.UserID, s.IdempotencyKey, s.Description = 4, "key-1", "three jobs"
	s.Params.Priority = 9
	got := b.submit(t, s)
	if got.Name != "b1" || got.UserID != 4 || got.NJobs != 3 || got.AppID != b.app.ID || got.Description != "three jobs" ||
		got.CreateTime != b.now.Unix() || got.State != row.BatchInProgress {
		t.Fatalf("submitted batch = %+v", got)
	}
	wus := b.jobs(t, got.ID)
	var names []string
	for _, wu := range wus {
		names = append(names, wu.Name)
		if wu.Priority != 9 {
			t.Errorf("job %s priority %d, want 9", wu.Name, wu.Priority)
		}
	}
	if want := []string{"b1_j0", "b1_j1", "b1_j2"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("job names = %v, want %v", names, want)
	}

	// A retry with the same key: the same batch, nothing new.
	again, created, err := b.svc.Submit(ctx, s)
	if err != nil || created || again != got {
		t.Fatalf("retried Submit = %+v, %v, %v; want the first batch, not created", again, created, err)
	}
	// The key used for another batch.
	other := spec("b2", 1)
	other.UserID, other.IdempotencyKey = 4, "key-1"
	if _, _, err := b.svc.Submit(ctx, other); !errors.Is(err, batch.ErrKeyReused) {
		t.Fatalf("Submit(b2 with b1's key) = %v, want ErrKeyReused", err)
	}
	// Another user's key space is separate.
	other.UserID = 5
	b.submit(t, other)
	// A taken name without a key.
	if _, _, err := b.svc.Submit(ctx, spec("b1", 1)); !errors.Is(err, batch.ErrExists) {
		t.Fatalf("Submit(b1 again, no key) = %v, want ErrExists", err)
	}
	// A job name taken outside any batch.
	if err := jobs.NewCreator(b.st, t.TempDir(), 8, nil).CreateForApp(ctx, b.app,
		[]jobs.Job{{Name: "b3_j0", Inputs: []jobs.Input{{}}}}, jobs.DefaultParams()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.svc.Submit(ctx, spec("b3", 1)); !errors.Is(err, batch.ErrExists) {
		t.Fatalf("Submit(b3 whose job name is taken) = %v, want ErrExists", err)
	}
	if _, err := b.st.BatchGetByName(ctx, "b3"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("batch b3 after the failed submit: %v, want none", err)
	}
}

func TestSubmitRefuses(t *testing.T) {
	t.Parallel()
	b := setup(t, batch.Limits{MaxJobs: 3, MaxInputBytes: 10, MaxTotalBytes: 25})
	ctx := context.Background()
	storetest.App(t, b.st, storetest.AppOptions{CreateTime: 1, Name: "old", UserFriendlyName: "Old", Weight: 1, Deprecated: true})
	tests := []struct {
		name   string
		mutate func(*batch.Spec)
		want   error
	}{
		{"no jobs", func(s *batch.Spec) { s.Jobs = nil }, batch.ErrInvalid},
		{"empty name", func(s *batch.Spec) { s.Name = "" }, batch.ErrInvalid},
		{"name with a slash", func(s *batch.Spec) { s.Name = "a/b" }, batch.ErrInvalid},
		{"name starting with a dot", func(s *batch.Spec) { s.Name = ".hidden" }, batch.ErrInvalid},
		{"long name", func(s *batch.Spec) { s.Name = strings.Repeat("n", batch.MaxBatchNameLen+1) }, batch.ErrInvalid},
		{"job name with a space", func(s *batch.Spec) { s.Jobs[0].Name = "a b" }, batch.ErrInvalid},
		{"job named twice", func(s *batch.Spec) { s.Jobs[1].Name = s.Jobs[0].Name }, batch.ErrInvalid},
		{"long description", func(s *batch.Spec) { s.Description = strings.Repeat("d", 1025) }, batch.ErrInvalid},
		{"bad parameters", func(s *batch.Spec) { s.Params.MinQuorum = 0 }, batch.ErrInvalid},
		{"missing app", func(s *batch.Spec) { s.App = "nosuch" }, store.ErrNotFound},
		{"deprecated app", func(s *batch.Spec) { s.App = "old" }, batch.ErrInvalid},
		{"too many jobs", func(s *batch.Spec) { s.Jobs = append(s.Jobs, batch.Job{Name: "x"}, batch.Job{Name: "y"}) }, batch.ErrTooLarge},
		{"input too large", func(s *batch.Spec) { s.Jobs[0].Input = make([]byte, 11) }, batch.ErrTooLarge},
		{"inputs too large together", func(s *batch.Spec) {
			s.Jobs = []batch.Job{{Name: "a", Input: make([]byte, 9)}, {Name: "b", Input: make([]byte, 9)}, {Name: "c", Input: make([]byte, 9)}}
		}, batch.ErrTooLarge},
	}
	for _, tc := range tests {
		s := spec("b", 2)
		tc.mutate(&s)
		if _, _, err := b.svc.Submit(ctx, s); !errors.Is(err, tc.want) {
			t.Errorf("Submit with %s = %v, want %v", tc.name, err, tc.want)
		}
	}
	var n int
	if err := b.st.DB().Get(&n, `SELECT COUNT(*) FROM workunit`); err != nil || n != 0 {
		t.Fatalf("%d jobs after refused submissions, %v; want 0", n, err)
	}
}

func TestStatusListCancelRequeue(t *testing.T) {
	t.Parallel()
	b := setup(t, batch.Limits{})
	ctx := context.Background()
	b1 := b.submit(t, spec("b1", 4))
	s2 := spec("b2", 1)
	s2.UserID = 7
	b2 := b.submit(t, s2)
	wus := b.jobs(t, b1.ID)
	if _, err := b.st.DB().Exec(`UPDATE workunit SET hold_reason = ?, transition_time = ? WHERE id IN (?, ?)`,
		state.ErrTooManyErrorResults, state.NoTransition, wus[0].ID, wus[1].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.DB().Exec(`UPDATE workunit SET canonical_resultid = 1, canonical_credit = 3 WHERE id = ?`, wus[2].ID); err != nil {
		t.Fatal(err)
	}

	st, err := b.svc.Status(ctx, b1)
	if err != nil {
		t.Fatal(err)
	}
	want := batch.Counts{Jobs: 4, Done: 1, Held: 2, Pending: 1, Credit: 3}
	if st.Counts != want || st.App != "demo" || st.State != "in_progress" || st.Name != "b1" {
		t.Fatalf("Status(b1) = %+v, want counts %+v", st, want)
	}
	list, err := b.svc.List(ctx, batch.ListParams{UserID: 7})
	if err != nil || len(list) != 1 || list[0].ID != b2.ID || list[0].Counts.Jobs != 1 {
		t.Fatalf("List(user 7) = %+v, %v; want b2 only", list, err)
	}
	if found, err := b.svc.Find(ctx, "b2"); err != nil || found.ID != b2.ID {
		t.Fatalf("Find(b2) = %+v, %v", found, err)
	}
	if found, err := b.svc.Find(ctx, strconv.FormatInt(b1.ID, 10)); err != nil || found.ID != b1.ID {
		t.Fatalf("Find(id of b1) = %+v, %v", found, err)
	}
	if _, err := b.svc.Find(ctx, "nosuch"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Find(nosuch) = %v, want ErrNotFound", err)
	}

	if err := b.svc.RequeueJob(ctx, wus[0]); err != nil {
		t.Fatalf("RequeueJob(held): %v", err)
	}
	if err := b.svc.RequeueJob(ctx, wus[3]); !errors.Is(err, batch.ErrNotCancellable) {
		t.Fatalf("RequeueJob(not held) = %v, want ErrNotCancellable", err)
	}
	if n, err := b.svc.RequeueBatch(ctx, b1, state.ErrTooManyErrorResults); err != nil || n != 1 {
		t.Fatalf("RequeueBatch = %d, %v; want 1", n, err)
	}
	if _, err := b.svc.RequeueReason(ctx, 0); !errors.Is(err, batch.ErrInvalid) {
		t.Fatalf("RequeueReason(0) = %v, want ErrInvalid", err)
	}

	if err := b.svc.CancelJob(ctx, wus[2]); !errors.Is(err, batch.ErrNotCancellable) {
		t.Fatalf("CancelJob(done job) = %v, want ErrNotCancellable", err)
	}
	if err := b.svc.CancelJob(ctx, wus[3]); err != nil {
		t.Fatalf("CancelJob(pending job): %v", err)
	}
	if n, err := b.svc.Cancel(ctx, b1); err != nil || n != 2 {
		t.Fatalf("Cancel(b1) = %d, %v; want the 2 jobs left", n, err)
	}
	b1, _ = b.svc.Get(ctx, b1.ID)
	st, _ = b.svc.Status(ctx, b1)
	if st.State != "cancelled" || st.CancelTime != b.now.Unix() || st.Counts.Cancelled != 3 || st.Counts.Errored != 3 {
		t.Fatalf("Status after cancel = %+v", st)
	}
	if _, err := b.st.DB().Exec(`UPDATE batch SET state = ? WHERE id = ?`, row.BatchDone, b2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.Cancel(ctx, b2); !errors.Is(err, batch.ErrNotCancellable) {
		t.Fatalf("Cancel(done batch) = %v, want ErrNotCancellable", err)
	}
}

func TestParseReason(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want state.ErrorMask
		ok   bool
	}{
		{"too_many_error_results", state.ErrTooManyErrorResults, true},
		{"too_many_total_results", state.ErrTooManyTotalResults, true},
		{"too_many_success_results", state.ErrTooManySuccessResult, true},
		{"couldnt_send_result", state.ErrCouldntSendResult, true},
		{"8", state.ErrTooManyTotalResults, true},
		{"", 0, false},
		{"0", 0, false},
		{"too_many", 0, false},
	}
	for _, tc := range tests {
		got, err := batch.ParseReason(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseReason(%q) = %v, %v; want %v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestOutputs(t *testing.T) {
	t.Parallel()
	b := setup(t, batch.Limits{})
	ctx := context.Background()
	bt := b.submit(t, spec("out", 3))
	wus := b.jobs(t, bt.ID)
	// j0: assimilated with two outputs; j1: failed and assimilated; j2:
	// not assimilated yet (a stale file must not be listed).
	if _, err := b.st.DB().Exec(`UPDATE workunit SET assimilate_state = ? WHERE id IN (?, ?)`,
		state.AssimilateDone, wus[0].ID, wus[1].ID); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		if err := os.MkdirAll(b.resultsDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(b.resultsDir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("out_j0", "first")
	write("out_j0.1", "second")
	write("out_j1.error", "too_many_error_results\n")
	write("out_j2", "stale")
	want := map[string]string{"out_j0": "first", "out_j0.1": "second", "out_j1.error": "too_many_error_results\n"}

	var buf bytes.Buffer
	n, err := b.svc.WriteTarGz(ctx, bt, &buf)
	if err != nil || n != 3 {
		t.Fatalf("WriteTarGz = %d, %v; want 3 files", n, err)
	}
	zr, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	got := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		got[strings.TrimPrefix(h.Name, "out/")] = string(body)
		if !strings.HasPrefix(h.Name, "out/") {
			t.Errorf("tar entry %q not under out/", h.Name)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("tar contents = %v, want %v", got, want)
	}

	dest := filepath.Join(t.TempDir(), "dest")
	if n, err := b.svc.CopyOutputs(ctx, bt, dest); err != nil || n != 3 {
		t.Fatalf("CopyOutputs = %d, %v; want 3", n, err)
	}
	entries, _ := os.ReadDir(dest)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		body, _ := os.ReadFile(filepath.Join(dest, e.Name()))
		if want[e.Name()] != string(body) {
			t.Errorf("copied %s = %q, want %q", e.Name(), body, want[e.Name()])
		}
	}
	sort.Strings(names)
	if !reflect.DeepEqual(names, []string{"out_j0", "out_j0.1", "out_j1.error"}) {
		t.Fatalf("copied files = %v", names)
	}

	noDir := batch.New(batch.Options{Store: b.st})
	if _, err := noDir.Outputs(ctx, bt); !errors.Is(err, batch.ErrNoResultsDir) {
		t.Fatalf("Outputs without a results directory = %v, want ErrNoResultsDir", err)
	}
}
