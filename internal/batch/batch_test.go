package batch_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/batch"
	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

var _ batch.Store = (*store.Store)(nil)

type bundle struct {
	st          *store.Store
	svc         *batch.Service
	app         row.App
	resultsDir  string
	downloadDir string
	now         time.Time
}

func setup(t *testing.T, limits batch.Limits) *bundle {
	t.Helper()
	st := storetest.New(t)
	dir := t.TempDir()
	b := &bundle{st: st, resultsDir: filepath.Join(dir, "results"), downloadDir: filepath.Join(dir, "download"),
		now: time.Unix(1_700_000_000, 0)}
	b.app = storetest.App(t, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1})
	b.svc = batch.New(batch.Options{Store: st, DownloadDir: b.downloadDir, Fanout: 8,
		ResultsDir: b.resultsDir, Limits: limits, Now: func() time.Time { return b.now }})
	return b
}

// spec is a valid submission of n jobs named j0, j1, ...
func spec(name string, n int) batch.Spec {
	s := batch.Spec{App: "demo", Name: name, Params: jobs.DefaultParams()}
	for i := range n {
		s.Jobs = append(s.Jobs, batch.Job{Name: "j" + string(rune('0'+i)), Inputs: []jobs.Input{{Data: []byte("input " + string(rune('0'+i)))}}})
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
		{"input too large", func(s *batch.Spec) { s.Jobs[0].Inputs[0].Data = make([]byte, 11) }, batch.ErrTooLarge},
		{"second input too large", func(s *batch.Spec) {
			s.Jobs[0].Inputs = append(s.Jobs[0].Inputs, jobs.Input{Data: make([]byte, 11)})
		}, batch.ErrTooLarge},
		// The job description against its templates: checked before
		// anything is staged.
		{"more inputs than the template takes", func(s *batch.Spec) {
			s.Jobs[1].Inputs = append(s.Jobs[1].Inputs, jobs.Input{Data: []byte("x")})
		}, batch.ErrInvalid},
		{"a template naming a file not given", func(s *batch.Spec) { s.InputTemplate = twoInputs }, batch.ErrInvalid},
		{"a template naming a shared file not staged", func(s *batch.Spec) { s.InputTemplate = sharedInput }, batch.ErrInvalid},
		{"a shared input not staged", func(s *batch.Spec) { s.Jobs[1].Inputs[0] = jobs.Input{Shared: "nosuch"} }, batch.ErrInvalid},
		{"a remote input without md5", func(s *batch.Spec) {
			s.Jobs[1].Inputs[0] = jobs.Input{URL: "https://example.org/f", Nbytes: 3}
		}, batch.ErrInvalid},
		{"an output without a size limit", func(s *batch.Spec) { s.OutputTemplate = noLimitOutput }, batch.ErrInvalid},
		{"a bad input template", func(s *batch.Spec) { s.InputTemplate = "<input_template>" }, batch.ErrInvalid},
		{"an open name with ..", func(s *batch.Spec) { s.InputTemplate = dotDotInput }, batch.ErrInvalid},
		{"inputs too large together", func(s *batch.Spec) {
			s.Jobs = []batch.Job{{Name: "a", Inputs: []jobs.Input{{Data: make([]byte, 9)}}}, {Name: "b", Inputs: []jobs.Input{{Data: make([]byte, 9)}}}, {Name: "c", Inputs: []jobs.Input{{Data: make([]byte, 9)}}}}
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
	if err := b.st.DB().Get(&n, `SELECT COUNT(*) FROM job_template`); err != nil || n != 0 {
		t.Errorf("%d templates stored by refused submissions, %v; want 0", n, err)
	}
	if files := filesUnder(t, b.downloadDir); len(files) != 0 {
		t.Errorf("refused submissions staged %v", files)
	}
}

// Templates for refused submissions.
const (
	twoInputs = `<input_template>
<file_info><number>0</number></file_info><file_info><number>1</number></file_info>
<workunit><file_ref><file_number>0</file_number><open_name>a</open_name></file_ref>
<file_ref><file_number>1</file_number><open_name>b</open_name></file_ref></workunit></input_template>`
	sharedInput = `<input_template>
<file_info><number>0</number></file_info><file_info><physical_name>model_0123</physical_name></file_info>
<workunit><file_ref><open_name>a</open_name></file_ref><file_ref><open_name>model</open_name></file_ref></workunit></input_template>`
	dotDotInput = `<input_template><file_info><number>0</number></file_info>
<workunit><file_ref><open_name>../a</open_name></file_ref></workunit></input_template>`
	noLimitOutput = `<output_template><file_info><name><OUTFILE_0/></name></file_info>
<result><file_ref><file_name><OUTFILE_0/></file_name><open_name>out</open_name></file_ref></result></output_template>`
)

// filesUnder lists the regular files under dir (none if it is missing).
func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if errors.Is(err, os.ErrNotExist) {
			return filepath.SkipDir
		}
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
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
		if err := os.MkdirAll(filepath.Dir(filepath.Join(b.resultsDir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(b.resultsDir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("out_j0/out", "first")
	write("out_j0/log", "second")
	write("out_j1.error", "too_many_error_results\n")
	write("out_j2/out", "stale")
	want := map[string]string{"out_j0/out": "first", "out_j0/log": "second", "out_j1.error": "too_many_error_results\n"}

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
	var names []string
	_ = filepath.WalkDir(dest, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := filepath.ToSlash(path[len(dest)+1:])
		names = append(names, name)
		body, _ := os.ReadFile(path)
		if want[name] != string(body) {
			t.Errorf("copied %s = %q, want %q", name, body, want[name])
		}
		return nil
	})
	sort.Strings(names)
	if !reflect.DeepEqual(names, []string{"out_j0/log", "out_j0/out", "out_j1.error"}) {
		t.Fatalf("copied files = %v", names)
	}

	noDir := batch.New(batch.Options{Store: b.st})
	if _, err := noDir.Outputs(ctx, bt); !errors.Is(err, batch.ErrNoResultsDir) {
		t.Fatalf("Outputs without a results directory = %v, want ErrNoResultsDir", err)
	}
}

// threeInputs takes a file given to the job (gzip'd too), a shared file
// and a remote file, with a default command line.
const threeInputs = `<input_template>
<file_info><number>0</number><gzip/></file_info>
<file_info><number>1</number></file_info>
<file_info><number>2</number></file_info>
<workunit>
<file_ref><file_number>0</file_number><open_name>data</open_name></file_ref>
<file_ref><file_number>1</file_number><open_name>model</open_name></file_ref>
<file_ref><file_number>2</file_number><open_name>table</open_name></file_ref>
<command_line>--default</command_line>
<rsc_fpops_est>2e12</rsc_fpops_est>
</workunit></input_template>`

const twoOutputs = `<output_template>
<file_info><name><OUTFILE_0/></name><max_nbytes>1000</max_nbytes></file_info>
<file_info><name><OUTFILE_1/></name><max_nbytes>2000</max_nbytes></file_info>
<result>
<file_ref><file_name><OUTFILE_0/></file_name><open_name>result.txt</open_name></file_ref>
<file_ref><file_name><OUTFILE_1/></file_name><open_name>log.txt</open_name></file_ref>
</result></output_template>`

func TestSubmitSeveralInputs(t *testing.T) {
	t.Parallel()
	b := setup(t, batch.Limits{})
	ctx := context.Background()
	model, err := b.svc.StageShared(ctx, "model", []byte("the model"), false)
	if err != nil {
		t.Fatal(err)
	}
	md5 := "0123456789abcdef0123456789abcdef"
	s := batch.Spec{App: "demo", Name: "multi", Params: jobs.DefaultParams(), InputTemplate: threeInputs, OutputTemplate: twoOutputs}
	for i, cl := range []string{"--x 1", ""} {
		s.Jobs = append(s.Jobs, batch.Job{Name: "j" + strconv.Itoa(i), CommandLine: cl, Inputs: []jobs.Input{
			{Data: []byte("data " + strconv.Itoa(i))},
			{Shared: "model"},
			{URL: "https://files.example.org/table", MD5: md5, Nbytes: 1234},
		}})
	}
	bt := b.submit(t, s)
	for i, wantCL := range []string{"--x 1", "--default"} {
		wu, err := b.st.WorkunitGetByName(ctx, batch.JobName("multi", "j"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jobxml.ParseWorkunit(wu.XMLDoc)
		if err != nil {
			t.Fatal(err)
		}
		if wu.Batch != bt.ID || doc.CommandLine != wantCL || len(doc.Inputs) != 3 || wu.RscFpopsEst != 2e12 {
			t.Fatalf("job %d = %+v with %+v; want in batch %d, command line %q, 3 inputs, the template's fpops", i, wu, doc, bt.ID, wantCL)
		}
		data, shared, remote := doc.Inputs[0], doc.Inputs[1], doc.Inputs[2]
		if data.OpenName != "data" || data.Nbytes != 6 || !(data.GzippedNbytes > 0) {
			t.Errorf("job %d first input = %+v; want opened as data, 6 bytes, gzip'd", i, data)
		}
		path, _ := fanout.Path(b.downloadDir, data.Name, 8)
		if got, err := os.ReadFile(path); err != nil || string(got) != "data "+strconv.Itoa(i) {
			t.Errorf("job %d staged input %s = %q, %v", i, data.Name, got, err)
		}
		if _, err := os.Stat(path + ".gz"); err != nil {
			t.Errorf("job %d gzip'd input: %v", i, err)
		}
		if shared.Name != model.Name || shared.OpenName != "model" || !shared.NoDelete {
			t.Errorf("job %d shared input = %+v; want %s opened as model, no_delete", i, shared, model.Name)
		}
		if remote.Name != "jf_"+md5 || len(remote.URLs) != 1 || remote.URLs[0] != "https://files.example.org/table" ||
			remote.Nbytes != 1234 || remote.OpenName != "table" {
			t.Errorf("job %d remote input = %+v", i, remote)
		}
		out, err := b.st.JobTemplateGet(ctx, wu.OutputTemplateID)
		if err != nil || out.Body != twoOutputs {
			t.Errorf("job %d output template = %+v, %v; want the batch's", i, out, err)
		}
	}
	var refs int
	if err := b.st.DB().Get(&refs, `SELECT COUNT(*) FROM workunit_shared_file WHERE shared_file_id = ?`, model.ID); err != nil || refs != 2 {
		t.Errorf("%d jobs refer to the shared model, %v; want 2", refs, err)
	}
}
