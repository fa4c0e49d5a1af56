package jobs_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
	"github.com/taskserver/taskserver/internal/transition"
)

func TestParamsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*jobs.Params)
		ok     bool
	}{
		{"defaults are valid", func(*jobs.Params) {}, true},
		{"single instance jobs are valid", func(p *jobs.Params) { p.MinQuorum, p.TargetNResults, p.MaxSuccessResults = 1, 1, 1 }, true},
		{"zero fpops estimate", func(p *jobs.Params) { p.RscFpopsEst = 0 }, false},
		{"fpops bound below estimate", func(p *jobs.Params) { p.RscFpopsBound = 1 }, false},
		{"delay bound under a second", func(p *jobs.Params) { p.DelayBound = time.Millisecond }, false},
		{"zero quorum", func(p *jobs.Params) { p.MinQuorum = 0 }, false},
		{"target below quorum", func(p *jobs.Params) { p.TargetNResults = 1 }, false},
		{"max total below target", func(p *jobs.Params) { p.MaxTotalResults = 1 }, false},
		{"max success below quorum", func(p *jobs.Params) { p.MaxSuccessResults = 1 }, false},
		{"no error results allowed", func(p *jobs.Params) { p.MaxErrorResults = 0 }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := jobs.DefaultParams()
			tc.mutate(&p)
			if err := p.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate(%+v) = %v, want ok=%v", p, err, tc.ok)
			}
		})
	}
}

func TestNewNameIsUniqueAndValid(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	a, b := jobs.NewName("demo", now), jobs.NewName("demo", now)
	if a == b || !strings.HasPrefix(a, "demo_1700000000_") || len(a) != len("demo_1700000000_")+16 {
		t.Fatalf("NewName twice = %q, %q; want distinct demo_<unix>_<16 hex>", a, b)
	}
	if err := fanout.ValidName(jobs.InputName(a)); err != nil {
		t.Fatalf("input name of %q is not a valid file name: %v", a, err)
	}
}

func TestSubmitRefusesExistingNameWithoutTouchingItsFile(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	app := storetest.App(t, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1})
	dir := filepath.Join(t.TempDir(), "download")
	c := jobs.NewCreator(st, dir, 8, nil)
	if err := c.Submit(ctx, app, jobs.Job{Name: "j1", Inputs: []jobs.Input{{Data: []byte("first")}}}, jobs.DefaultParams()); err != nil {
		t.Fatalf("Submit j1: %v", err)
	}
	err := c.Submit(ctx, app, jobs.Job{Name: "j1", Inputs: []jobs.Input{{Data: []byte("second")}}}, jobs.DefaultParams())
	if !errors.Is(err, jobs.ErrJobExists) {
		t.Fatalf("second Submit j1 = %v, want ErrJobExists", err)
	}
	path, _ := fanout.Path(dir, "j1_in", 8)
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, []byte("first")) {
		t.Fatalf("input of j1 after refused resubmit = %q, %v; want \"first\"", got, err)
	}
	if err := c.Submit(ctx, app, jobs.Job{Name: "bad/name", Inputs: []jobs.Input{{Data: nil}}}, jobs.DefaultParams()); err == nil {
		t.Fatal("Submit with a slash in the name succeeded, want an error")
	}
}

type creatorFixture struct {
	st  *store.Store
	dir string
	c   *jobs.Creator
	now time.Time
}

func newCreatorFixture(t *testing.T) *creatorFixture {
	t.Helper()
	st := storetest.New(t)
	f := &creatorFixture{st: st, dir: filepath.Join(t.TempDir(), "download"), now: time.Unix(1_700_000_000, 0)}
	f.c = jobs.NewCreator(st, f.dir, 8, func() time.Time { return f.now })
	return f
}

// app inserts an app with the given policies.
func (f *creatorFixture) app(t *testing.T, a storetest.AppOptions) row.App {
	t.Helper()
	a.CreateTime, a.UserFriendlyName, a.Weight = 1, a.Name, 1
	return storetest.App(t, f.st, a)
}

func (f *creatorFixture) all(t *testing.T) []row.Workunit {
	t.Helper()
	var wus []row.Workunit
	if err := f.st.DB().Select(&wus, `SELECT `+store.WorkunitColumns+` FROM workunit ORDER BY id`); err != nil {
		t.Fatal(err)
	}
	return wus
}

// input reads the staged input file of wu, named in its xml_doc.
func (f *creatorFixture) input(t *testing.T, wu row.Workunit) []byte {
	t.Helper()
	doc, err := jobxml.ParseWorkunit(wu.XMLDoc)
	if err != nil || len(doc.Inputs) != 1 {
		t.Fatalf("xml_doc of %s = %q, %v; want one input", wu.Name, wu.XMLDoc, err)
	}
	path, _ := fanout.Path(f.dir, doc.Inputs[0].Name, 8)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("input of %s: %v", wu.Name, err)
	}
	return b
}

func TestCreatePolicies(t *testing.T) {
	t.Parallel()
	p := jobs.DefaultParams()
	p.MinQuorum, p.TargetNResults, p.FixedCredit = 3, 4, 12.5
	single := p
	single.MinQuorum, single.TargetNResults = 1, 1
	tests := []struct {
		name       string
		app        storetest.AppOptions
		p          jobs.Params
		wantQuorum int
		wantTarget int
		wantRepl   int
	}{
		{"plain app keeps the asked redundancy", storetest.AppOptions{Name: "plain"}, p, 3, 4, 0},
		{"adaptive app starts with one instance", storetest.AppOptions{Name: "ar", AdaptiveReplication: true}, p, 1, 1, 3},
		{"adaptive app with a quorum of one is plain", storetest.AppOptions{Name: "ar1", AdaptiveReplication: true}, single, 1, 1, 0},
	}
	f := newCreatorFixture(t)
	ctx := context.Background()
	for _, tc := range tests {
		app := f.app(t, tc.app)
		if err := f.c.CreateForApp(ctx, app, []jobs.Job{{Name: tc.app.Name + "_j", Inputs: []jobs.Input{{Data: []byte("x")}}}}, tc.p); err != nil {
			t.Fatalf("%s: CreateForApp: %v", tc.name, err)
		}
		wu, err := f.st.WorkunitGetByName(ctx, tc.app.Name+"_j")
		if err != nil || wu.MinQuorum != tc.wantQuorum || wu.TargetNResults != tc.wantTarget ||
			wu.ReplicationQuorum != tc.wantRepl || wu.FixedCredit != 12.5 || wu.Batch != 0 {
			t.Errorf("%s: job = quorum %d target %d replication %d fixed credit %g, %v; want %d %d %d 12.5",
				tc.name, wu.MinQuorum, wu.TargetNResults, wu.ReplicationQuorum, wu.FixedCredit, err,
				tc.wantQuorum, tc.wantTarget, tc.wantRepl)
		}
	}
	// Create by app id reads the app, policies included.
	ar, err := f.st.AppGetByName(ctx, "ar")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.c.Create(ctx, ar.ID, []jobs.Job{{Name: "by_id", Inputs: []jobs.Input{{Data: nil}}}}, p); err != nil {
		t.Fatal(err)
	}
	if wu, _ := f.st.WorkunitGetByName(ctx, "by_id"); wu.ReplicationQuorum != 3 {
		t.Errorf("job created by app id has replication_quorum %d, want 3", wu.ReplicationQuorum)
	}
	if err := f.c.Create(ctx, ar.ID+100, []jobs.Job{{Name: "nope"}}, p); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Create for a missing app = %v, want ErrNotFound", err)
	}
	bad := p
	bad.FixedCredit = -1
	if err := f.c.CreateForApp(ctx, ar, []jobs.Job{{Name: "neg"}}, bad); err == nil {
		t.Error("CreateForApp with negative fixed credit succeeded, want an error")
	}
}

func TestCreateMixesKnownAnswerJobs(t *testing.T) {
	t.Parallel()
	f := newCreatorFixture(t)
	ctx := context.Background()
	always := f.app(t, storetest.AppOptions{Name: "always", KnownAnswerFraction: 1, AdaptiveReplication: true})
	never := f.app(t, storetest.AppOptions{Name: "never"})
	empty := f.app(t, storetest.AppOptions{Name: "empty", KnownAnswerFraction: 1})
	kaID, err := f.st.KnownAnswerInsert(ctx, row.KnownAnswer{CreateTime: 1, AppID: always.ID, Name: "k",
		Input: []byte("known input"), Output: []byte("known output")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.KnownAnswerInsert(ctx, row.KnownAnswer{CreateTime: 1, AppID: never.ID, Name: "k",
		Input: []byte("x"), Output: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	p := jobs.DefaultParams()
	p.Priority = 7
	for _, app := range []row.App{always, never, empty} {
		batch := []jobs.Job{{Name: app.Name + "_1", Inputs: []jobs.Input{{Data: []byte("a")}}}, {Name: app.Name + "_2", Inputs: []jobs.Input{{Data: []byte("b")}}}}
		if err := f.c.CreateForApp(ctx, app, batch, p); err != nil {
			t.Fatalf("CreateForApp(%s): %v", app.Name, err)
		}
	}
	count := map[int64]int{}
	for _, wu := range f.all(t) {
		if wu.KnownAnswerID == 0 {
			count[wu.AppID]++
			continue
		}
		if wu.AppID != always.ID || wu.KnownAnswerID != kaID || wu.MinQuorum != 1 || wu.TargetNResults != 1 ||
			wu.ReplicationQuorum != 0 || wu.Batch != 0 || wu.Priority != 7 {
			t.Errorf("known-answer job = %+v; want app always, known answer %d, one instance, the batch's priority", wu, kaID)
		}
		if got := f.input(t, wu); string(got) != "known input" {
			t.Errorf("input of known-answer job %s = %q, want the known input", wu.Name, got)
		}
		count[-1]++
	}
	if count[-1] != 2 || count[always.ID] != 2 || count[never.ID] != 2 || count[empty.ID] != 2 {
		t.Fatalf("jobs per app = %v; want 2 each and 2 known-answer jobs (fraction 1, 2 jobs)", count)
	}
}

// hostView is what a host is sent of a job and its first instance: the
// job's name, its input files' names, the instance's name and its output
// file's name; each with every run of hex digits and every digit replaced
// by a placeholder, so that two jobs made the same way have the same view.
func hostView(t *testing.T, wu row.Workunit) string {
	t.Helper()
	doc, err := jobxml.ParseWorkunit(wu.XMLDoc)
	if err != nil {
		t.Fatalf("ParseWorkunit(%s): %v", wu.Name, err)
	}
	result := transition.ResultName(wu.Name, 0)
	parts := []string{wu.Name, result, jobxml.OutputName(result, 0)}
	for _, in := range doc.Inputs {
		parts = append(parts, in.Name, in.OpenName, strconv.Itoa(len(in.MD5)))
	}
	return shapeRE.ReplaceAllString(strings.Join(parts, " "), "#")
}

var shapeRE = regexp.MustCompile(`[0-9a-f]{16}|[0-9a-f]{8}|[0-9]+`)

func TestKnownAnswerJobsLookLikeOtherJobs(t *testing.T) {
	t.Parallel()
	f := newCreatorFixture(t)
	ctx := context.Background()
	app := f.app(t, storetest.AppOptions{Name: "demo", KnownAnswerFraction: 1})
	kaID, err := f.st.KnownAnswerInsert(ctx, row.KnownAnswer{CreateTime: 1, AppID: app.ID, Name: "known",
		Input: []byte("known input"), Output: []byte("known output")})
	if err != nil {
		t.Fatal(err)
	}
	// The work generator's names, and a batch's (whose input files carry
	// a random part).
	gen := []jobs.Job{{Name: jobs.NewName("demo", f.now), Inputs: []jobs.Input{{Data: []byte("a")}}}, {Name: jobs.NewName("demo", f.now), Inputs: []jobs.Input{{Data: []byte("b")}}}}
	if err := f.c.CreateForApp(ctx, app, gen, jobs.DefaultParams()); err != nil {
		t.Fatalf("CreateForApp: %v", err)
	}
	batch := []jobs.Job{{Name: "run1_" + strings.Repeat("c", 16), Inputs: []jobs.Input{{Data: []byte("c")}}}}
	if _, _, err := f.c.CreateBatch(ctx, app, row.Batch{UserID: 2, Name: "run1"}, batch, jobs.DefaultParams()); err != nil {
		t.Fatalf("CreateBatch: %v", err)
	}
	views := map[string]map[bool]int{} // view -> known answer? -> jobs
	for _, wu := range f.all(t) {
		v := hostView(t, wu)
		if views[v] == nil {
			views[v] = map[bool]int{}
		}
		views[v][wu.KnownAnswerID != 0]++
		ka := wu.KnownAnswerID != 0
		if ka && wu.KnownAnswerID != kaID {
			t.Errorf("job %s: known_answer_id %d, want %d (the marker is in the database)", wu.Name, wu.KnownAnswerID, kaID)
		}
		if ka && (strings.HasPrefix(wu.Name, "ka_") || strings.Contains(wu.XMLDoc, "ka_") || strings.Contains(wu.XMLDoc, "known")) {
			t.Errorf("known-answer job %s (xml_doc %s) carries a marker a host can see", wu.Name, wu.XMLDoc)
		}
	}
	if len(views) != 2 {
		t.Errorf("host views of jobs = %v; want 2 (the generator's and the batch's), each shared by normal and known-answer jobs", views)
	}
	for v, n := range views {
		if n[true] == 0 || n[false] == 0 {
			t.Errorf("host view %q: %d normal and %d known-answer jobs; a host must not tell them apart", v, n[false], n[true])
		}
	}
}

func TestCreateBatch(t *testing.T) {
	t.Parallel()
	f := newCreatorFixture(t)
	ctx := context.Background()
	app := f.app(t, storetest.AppOptions{Name: "demo"})
	batch := []jobs.Job{{Name: "b_x", Inputs: []jobs.Input{{Data: []byte("x")}}}, {Name: "b_y", Inputs: []jobs.Input{{Data: []byte("y")}}}}
	b, created, err := f.c.CreateBatch(ctx, app, row.Batch{UserID: 2, Name: "b", IdempotencyKey: "k"}, batch, jobs.DefaultParams())
	if err != nil || !created || b.NJobs != 2 || b.AppID != app.ID || b.CreateTime != f.now.Unix() {
		t.Fatalf("CreateBatch = %+v, %v, %v", b, created, err)
	}
	wus := f.all(t)
	for i, wu := range wus {
		if wu.Batch != b.ID || string(f.input(t, wu)) != string(batch[i].Inputs[0].Data) {
			t.Errorf("job %s: batch %d, input %q; want batch %d, input %q", wu.Name, wu.Batch, f.input(t, wu), b.ID, batch[i].Inputs[0].Data)
		}
		doc, _ := jobxml.ParseWorkunit(wu.XMLDoc)
		if doc.Inputs[0].Name == jobs.InputName(wu.Name) {
			t.Errorf("input file of batch job %s has the plain name %s, want a random part", wu.Name, doc.Inputs[0].Name)
		}
	}
	again, created, err := f.c.CreateBatch(ctx, app, row.Batch{UserID: 2, Name: "b2", IdempotencyKey: "k"},
		[]jobs.Job{{Name: "b2_x", Inputs: []jobs.Input{{}}}}, jobs.DefaultParams())
	if err != nil || created || again.ID != b.ID {
		t.Fatalf("CreateBatch with the same key = %+v, %v, %v; want the first batch back", again, created, err)
	}
	for _, bad := range [][]jobs.Job{
		{{Name: "dup"}, {Name: "dup"}},
		{{Name: "a/b"}},
		{{Name: strings.Repeat("n", jobs.MaxNameLen+1)}},
	} {
		if _, _, err := f.c.CreateBatch(ctx, app, row.Batch{Name: "bad"}, bad, jobs.DefaultParams()); err == nil {
			t.Errorf("CreateBatch(%.20v) succeeded, want an error", bad)
		}
	}
	if n := len(f.all(t)); n != 2 {
		t.Fatalf("%d jobs after the refused batches, want 2", n)
	}
}
