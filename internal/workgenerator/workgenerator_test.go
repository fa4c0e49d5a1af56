package workgenerator_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
	"github.com/taskserver/taskserver/internal/workgenerator"
)

const fan = 16

type bundle struct {
	st          *store.Store
	appID       int64
	projectDir  string
	downloadDir string
	now         time.Time
}

func setup(t *testing.T) *bundle {
	t.Helper()
	st := storetest.New(t)
	appID := storetest.App(t, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
	dir := t.TempDir()
	return &bundle{st: st, appID: appID, projectDir: dir, downloadDir: filepath.Join(dir, "download"),
		now: time.Unix(1_700_000_000, 0)}
}

// service builds a fresh generator, as a restarted process would.
func (b *bundle) service(t *testing.T, mutate func(*workgenerator.Config)) *workgenerator.Service {
	t.Helper()
	clock := func() time.Time { return b.now }
	cfg := workgenerator.Config{
		App:          "demo",
		UnsentTarget: 10,
		Mod:          1,
		Batch:        3,
		CounterFile:  workgenerator.CounterPath(b.projectDir, "demo"),
		Params:       jobs.DefaultParams(),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := workgenerator.New(cfg, workgenerator.Deps{Store: b.st, Creator: jobs.NewCreator(b.st, b.downloadDir, fan, clock),
		Log: log, Now: clock})
	if err != nil {
		t.Fatalf("workgenerator.New: %v", err)
	}
	return svc
}

func (b *bundle) workunits(t *testing.T) []row.Workunit {
	t.Helper()
	var wus []row.Workunit
	if err := b.st.DB().Select(&wus, `SELECT `+store.WorkunitColumns+` FROM workunit ORDER BY id`); err != nil {
		t.Fatalf("select workunits: %v", err)
	}
	return wus
}

func runOnce(t *testing.T, svc *workgenerator.Service) int {
	t.Helper()
	n, err := svc.RunOnce(context.Background())
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	return n
}

// passes runs RunOnce until it returns 0 and reports each pass's count.
func passes(t *testing.T, svc *workgenerator.Service) []int {
	t.Helper()
	var out []int
	for i := 0; i < 100; i++ {
		n := runOnce(t, svc)
		out = append(out, n)
		if n == 0 {
			return out
		}
	}
	t.Fatalf("RunOnce never returned 0: %v", out)
	return nil
}

func TestCreatesUpToTargetAndNoMore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc := b.service(t, nil)
	// Target 10 instances at 2 per job: 5 jobs, in batches of at most 3.
	if got := passes(t, svc); len(got) != 3 || got[0] != 3 || got[1] != 2 || got[2] != 0 {
		t.Fatalf("RunOnce counts = %v, want [3 2 0]", got)
	}
	wus := b.workunits(t)
	if len(wus) != 5 {
		t.Fatalf("workunits after filling = %d, want 5", len(wus))
	}
	// The transitioner gives one job its two instances: the backlog is the
	// same, so nothing new.
	for i := 0; i < 2; i++ {
		storetest.Instance(t, b.st, storetest.InstanceOptions{CreateTime: 1, Job: wus[0].ID,
			ServerState: state.ServerUnsent, Name: wus[0].Name + "_" + string(rune('0'+i))})
	}
	if n := runOnce(t, svc); n != 0 {
		t.Fatalf("RunOnce with full backlog (results created) = %d, want 0", n)
	}
	// Both instances are sent: two instances short, one job more.
	if _, err := b.st.DB().Exec(`UPDATE result SET server_state = ?`, state.ServerInProgress); err != nil {
		t.Fatal(err)
	}
	if got := passes(t, svc); len(got) != 2 || got[0] != 1 {
		t.Fatalf("RunOnce counts after 2 instances were sent = %v, want [1 0]", got)
	}
	// A job whose instances are all sent is not awaiting the transitioner
	// any more, even if its transition_time is due; results of another app
	// do not count.
	other := storetest.App(t, b.st, storetest.AppOptions{CreateTime: 1, Name: "other", UserFriendlyName: "O", Weight: 1}).ID
	owu := storetest.Job(t, b.st, storetest.JobOptions{CreateTime: 1, App: other, Name: "o1", TargetNResults: 50, TransitionTime: 1}).ID
	storetest.Instance(t, b.st, storetest.InstanceOptions{CreateTime: 1, Job: owu, ServerState: state.ServerUnsent, Name: "o1_0"})
	if n := runOnce(t, svc); n != 0 {
		t.Fatalf("RunOnce after another app's work appeared = %d, want 0", n)
	}
	if got := len(b.workunits(t)); got != 7 {
		t.Fatalf("workunits = %d, want 7 (6 demo + 1 other)", got)
	}
}

func TestStagesInputWhereJobXMLSays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc := b.service(t, func(c *workgenerator.Config) {
		c.UnsentTarget = 4
		c.Params.DelayBound = 90 * time.Minute
		c.Params.RscFpopsEst = 5e11
	})
	passes(t, svc)
	wus := b.workunits(t)
	if len(wus) != 2 {
		t.Fatalf("workunits = %d, want 2", len(wus))
	}
	for _, wu := range wus {
		if wu.TransitionTime != b.now.Unix() || wu.CreateTime != b.now.Unix() || wu.DelayBound != 5400 ||
			wu.RscFpopsEst != 5e11 || wu.RscFpopsBound != 5e12 || wu.RscMemoryBound != 1e8 || wu.RscDiskBound != 1e9 ||
			wu.MinQuorum != 2 || wu.TargetNResults != 2 || wu.MaxErrorResults != 3 || wu.MaxTotalResults != 6 ||
			wu.MaxSuccessResults != 3 || wu.AppID != b.appID {
			t.Errorf("workunit %s = %+v; want job parameters of the config and transition_time = now", wu.Name, wu)
		}
		doc, err := jobxml.ParseWorkunit(wu.XMLDoc)
		if err != nil || len(doc.Inputs) != 3 || doc.CommandLine != demoapp.CommandLine(demoapp.Rounds) {
			t.Fatalf("ParseWorkunit(%q) = %+v, %v; want three inputs and the demo command line", wu.XMLDoc, doc, err)
		}
		in, model, params := doc.Inputs[0], doc.Inputs[1], doc.Inputs[2]
		if in.Name != wu.Name+"_in" || in.OpenName != demoapp.InName {
			t.Errorf("input of %s = %+v, want name %s_in, open_name in", wu.Name, in, wu.Name)
		}
		if model.Name != jobs.SharedName(demoapp.ModelFile, md5hex(demoapp.Model())) || model.OpenName != demoapp.ModelName || !model.Sticky {
			t.Errorf("model of %s = %+v, want the shared model, sticky", wu.Name, model)
		}
		if params.Name != jobs.SharedName(demoapp.ParamsFile, md5hex(demoapp.Params())) || params.OpenName != demoapp.ParamsName || params.GzippedNbytes <= 0 {
			t.Errorf("params of %s = %+v", wu.Name, params)
		}
		for _, f := range []struct {
			in   jobxml.InputFile
			want []byte
		}{{in, demoapp.Input(wu.Name)}, {model, demoapp.Model()}, {params, demoapp.Params()}} {
			path, err := fanout.Path(b.downloadDir, f.in.Name, fan)
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read staged input: %v", err)
			}
			if !bytes.Equal(data, f.want) || f.in.MD5 != md5hex(data) || f.in.Nbytes != float64(len(data)) {
				t.Errorf("staged %s: %d bytes md5 %s; xml says %g bytes md5 %s; want demoapp's and matching xml",
					path, len(data), md5hex(data), f.in.Nbytes, f.in.MD5)
			}
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
				t.Errorf("staged file mode = %v, %v; want 0644", fi.Mode(), err)
			}
		}
		if fi, err := os.Stat(mustPath(t, b.downloadDir, params.Name) + ".gz"); err != nil || float64(fi.Size()) != params.GzippedNbytes {
			t.Errorf("gzip'd copy of %s: %v, %v; want %g bytes", params.Name, fi, err, params.GzippedNbytes)
		}
		tmpl, err := b.st.JobTemplateGet(context.Background(), wu.OutputTemplateID)
		if err != nil || tmpl.Body != demoapp.OutputTemplate {
			t.Errorf("output template of %s = %+v, %v; want the demo's", wu.Name, tmpl, err)
		}
	}
	var refs int
	if err := b.st.DB().Get(&refs, `SELECT COUNT(*) FROM workunit_shared_file`); err != nil || refs != 2*len(wus) {
		t.Errorf("shared file references = %d, %v; want two per job (%d jobs)", refs, err, len(wus))
	}
	// No temporary files are left behind.
	err := filepath.WalkDir(b.downloadDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Ext(p) == ".tmp" {
			t.Errorf("temporary file left: %s", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestTotalJobsAcrossRestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	limit := func(c *workgenerator.Config) { c.UnsentTarget = 1000; c.TotalJobs = 7 }
	if got := passes(t, b.service(t, limit)); len(got) != 4 || got[0]+got[1]+got[2] != 7 {
		t.Fatalf("RunOnce counts = %v, want 3,3,1,0", got)
	}
	// Restart: the counter file says 7; nothing more.
	svc := b.service(t, limit)
	if n := runOnce(t, svc); n != 0 || svc.Created() != 7 {
		t.Fatalf("after restart RunOnce = %d, Created = %d; want 0, 7", n, svc.Created())
	}
	// Purge three jobs: the count must not go down.
	if _, err := b.st.DB().Exec(`DELETE FROM workunit ORDER BY id LIMIT 3`); err != nil {
		t.Fatal(err)
	}
	svc = b.service(t, limit)
	if n := runOnce(t, svc); n != 0 {
		t.Fatalf("after purge and restart RunOnce = %d, want 0", n)
	}
	// A raised limit continues from the count.
	svc = b.service(t, func(c *workgenerator.Config) { c.UnsentTarget = 1000; c.TotalJobs = 9 })
	if got := passes(t, svc); len(got) != 2 || got[0] != 2 || svc.Created() != 9 {
		t.Fatalf("with limit 9: RunOnce counts = %v, Created = %d; want [2 0], 9", got, svc.Created())
	}
	if got := len(b.workunits(t)); got != 6 {
		t.Fatalf("workunits = %d, want 6 (9 created, 3 purged)", got)
	}
}

func TestPendingBatchResolvedOnRestart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		committed bool
		want      int64
	}{
		{"batch that committed counts", true, 4 + 3},
		{"batch that did not commit does not", false, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			path := workgenerator.CounterPath(b.projectDir, "demo")
			first := "batch_first"
			if tc.committed {
				storetest.Job(t, b.st, storetest.JobOptions{CreateTime: 1, App: b.appID, Name: first})
			}
			// What the generator writes before a batch's transaction, and
			// the inputs it staged before the insert.
			names := []string{first, "batch_second", "batch_third"}
			var inputs []string
			for _, n := range names {
				in, err := fanout.Path(b.downloadDir, jobs.InputName(n), fan)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Dir(in), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(in, []byte("input"), 0o644); err != nil {
					t.Fatal(err)
				}
				inputs = append(inputs, in)
			}
			// The write of the last job's gzip'd copy was cut short by the
			// crash: its temporary file goes with the batch too.
			cut := filepath.Join(filepath.Dir(inputs[2]), "."+jobs.InputName(names[2])+".gz.tmp")
			if !tc.committed {
				if err := os.WriteFile(cut, []byte("inp"), 0o644); err != nil {
					t.Fatal(err)
				}
				inputs = append(inputs, cut)
			}
			body := `{"app":"demo","created":4,"pending":{"jobs":3,"first_name":"` + first +
				`","names":["` + strings.Join(names, `","`) + `"]}}`
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			svc := b.service(t, func(c *workgenerator.Config) { c.TotalJobs = 7; c.UnsentTarget = 1000 })
			n := runOnce(t, svc)
			if svc.Created() != 7 || int64(n) != 7-tc.want {
				t.Fatalf("after restart with pending batch: RunOnce = %d, Created = %d; want %d, 7", n, svc.Created(), 7-tc.want)
			}
			b2, err := os.ReadFile(path)
			if err != nil || bytes.Contains(b2, []byte("pending")) {
				t.Fatalf("counter file after pass = %q, %v; want no pending batch", b2, err)
			}
			// A batch that did not commit leaves no input behind; one that
			// did keeps its inputs.
			for _, in := range inputs {
				_, err := os.Stat(in)
				if tc.committed && err != nil {
					t.Errorf("input %s of a committed batch: %v", in, err)
				}
				if !tc.committed && !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("input %s of a batch that did not commit is still there (%v)", in, err)
				}
			}
		})
	}
}

func TestLostCounterFileFallsBackToDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	limit := func(c *workgenerator.Config) { c.UnsentTarget = 1000; c.TotalJobs = 5 }
	passes(t, b.service(t, limit))
	if err := os.Remove(workgenerator.CounterPath(b.projectDir, "demo")); err != nil {
		t.Fatal(err)
	}
	svc := b.service(t, limit)
	if n := runOnce(t, svc); n != 0 || svc.Created() != 5 {
		t.Fatalf("after losing the counter file: RunOnce = %d, Created = %d; want 0, 5", n, svc.Created())
	}
}

func TestLostCounterFileDoesNotCountKnownAnswerJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// Every job brings a known-answer job named like it (same prefix):
	// they are not the generator's jobs and must not count toward
	// --total-jobs.
	storetest.Exec(t, b.st, `UPDATE app SET known_answer_fraction = 1 WHERE id = ?`, b.appID)
	if _, err := b.st.KnownAnswerInsert(ctx, row.KnownAnswer{CreateTime: 1, AppID: b.appID, Name: "k",
		Input: []byte("in"), Output: []byte("out")}); err != nil {
		t.Fatal(err)
	}
	limit := func(c *workgenerator.Config) { c.UnsentTarget = 1000; c.TotalJobs = 5 }
	passes(t, b.service(t, limit))
	if err := os.Remove(workgenerator.CounterPath(b.projectDir, "demo")); err != nil {
		t.Fatal(err)
	}
	svc := b.service(t, limit)
	if n := runOnce(t, svc); n != 0 || svc.Created() != 5 {
		t.Fatalf("after losing the counter file: RunOnce = %d, Created = %d; want 0, 5 (known-answer jobs not counted)", n, svc.Created())
	}
}

func md5hex(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

func mustPath(t *testing.T, dir, name string) string {
	t.Helper()
	p, err := fanout.Path(dir, name, fan)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSharedModelStagedAgainAfterDeletion: the generator stages its shared
// files when it loads, and again after a failed pass, so jobs never refer
// to a model the file deleter removed.
func TestSharedModelStagedAgainAfterDeletion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	svc := b.service(t, func(c *workgenerator.Config) { c.UnsentTarget = 2 })
	passes(t, svc)
	sf, err := b.st.SharedFileLatest(ctx, demoapp.ModelFile)
	if err != nil || sf.State != row.SharedFileLive {
		t.Fatalf("model after the first jobs: %+v, %v; want it staged and live", sf, err)
	}
	// The file deleter removed it (no job needs it any more).
	storetest.Exec(t, b.st, `UPDATE shared_file SET state = ? WHERE id = ?`, row.SharedFileDeleted, sf.ID)
	path := mustPath(t, b.downloadDir, sf.Name)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	storetest.Exec(t, b.st, `UPDATE result SET server_state = ?`, state.ServerInProgress)
	storetest.Exec(t, b.st, `UPDATE workunit SET target_nresults = 0`)
	// The first pass fails on the deleted model; the next stages it again.
	if _, err := svc.RunOnce(ctx); err == nil {
		t.Fatal("a job referred to a deleted shared file")
	}
	if n := runOnce(t, svc); n == 0 {
		t.Fatal("no job created after the model was staged again")
	}
	if again, err := b.st.SharedFileGet(ctx, sf.Name); err != nil || again.State != row.SharedFileLive {
		t.Errorf("model = %+v, %v; want live again", again, err)
	}
	if data, err := os.ReadFile(path); err != nil || !bytes.Equal(data, demoapp.Model()) {
		t.Errorf("model on disk: %d bytes, %v; want it staged again", len(data), err)
	}
}

// TestInputJobs: a maker of one input per job gives jobs of the app's
// templates, as a project's InputMaker does.
func TestInputJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	clock := func() time.Time { return b.now }
	cfg := workgenerator.Config{App: "demo", UnsentTarget: 2, Mod: 1, Batch: 3,
		CounterFile: workgenerator.CounterPath(b.projectDir, "demo"), Params: jobs.DefaultParams()}
	maker := workgenerator.InputJobs(func(_ context.Context, job string) ([]byte, error) { return []byte("input of " + job), nil })
	svc, err := workgenerator.New(cfg, workgenerator.Deps{Store: b.st, Creator: jobs.NewCreator(b.st, b.downloadDir, fan, clock), Jobs: maker, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	passes(t, svc)
	wus := b.workunits(t)
	if len(wus) != 1 {
		t.Fatalf("jobs = %d, want 1", len(wus))
	}
	doc, err := jobxml.ParseWorkunit(wus[0].XMLDoc)
	if err != nil || len(doc.Inputs) != 1 || doc.Inputs[0].OpenName != "in" || doc.CommandLine != "" || wus[0].OutputTemplateID != 0 {
		t.Fatalf("job %+v, %v: want one input \"in\", no command line, the built-in output template", doc, err)
	}
	if data, err := os.ReadFile(mustPath(t, b.downloadDir, doc.Inputs[0].Name)); err != nil || string(data) != "input of "+wus[0].Name {
		t.Errorf("staged input %q, %v", data, err)
	}
}

func TestMissingAppIsAnError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc := b.service(t, func(c *workgenerator.Config) { c.App = "nosuch" })
	if _, err := svc.RunOnce(context.Background()); err == nil {
		t.Fatal("RunOnce for a missing app succeeded, want an error")
	}
}
