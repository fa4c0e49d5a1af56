package taskctl_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// threeInputs takes a file given to the job (gzip'd too), a shared file
// and a remote file.
const threeInputs = `<input_template>
<file_info><number>0</number><gzip/></file_info>
<file_info><number>1</number></file_info>
<file_info><number>2</number></file_info>
<workunit>
<file_ref><file_number>0</file_number><open_name>data</open_name></file_ref>
<file_ref><file_number>1</file_number><open_name>model</open_name></file_ref>
<file_ref><file_number>2</file_number><open_name>table</open_name></file_ref>
<command_line>--default</command_line>
<target_nresults>3</target_nresults>
</workunit></input_template>`

const twoOutputs = `<output_template>
<file_info><name><OUTFILE_0/></name><max_nbytes>1000</max_nbytes></file_info>
<file_info><name><OUTFILE_1/></name><max_nbytes>2000</max_nbytes></file_info>
<result>
<file_ref><file_name><OUTFILE_0/></file_name><open_name>result.txt</open_name></file_ref>
<file_ref><file_name><OUTFILE_1/></file_name><open_name>log.txt</open_name></file_ref>
</result></output_template>`

const noLimitOutput = `<output_template><file_info><name><OUTFILE_0/></name></file_info>
<result><file_ref><file_name><OUTFILE_0/></file_name><open_name>out</open_name></file_ref></result></output_template>`

const remoteMD5 = "0123456789abcdef0123456789abcdef"

var stagedLine = regexp.MustCompile(`^(model_([0-9a-f]{32})) ([0-9a-f]{32})\n$`)

// jobDoc returns job name's row and its parsed document.
func jobDoc(t *testing.T, b *bundle, name string) (jobxml.Workunit, int64, int) {
	t.Helper()
	wu, err := b.st.WorkunitGetByName(context.Background(), name)
	if err != nil {
		t.Fatalf("job %s: %v", name, err)
	}
	doc, err := jobxml.ParseWorkunit(wu.XMLDoc)
	if err != nil {
		t.Fatalf("job %s document: %v", name, err)
	}
	return doc, wu.OutputTemplateID, wu.TargetNResults
}

func TestJobSubmitSeveralInputs(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	ctx := context.Background()
	b.mustRun(t, "app", "add", "--name", "demo")
	dir := b.projectDir
	writeFile(t, filepath.Join(dir, "model.bin"), "the model")
	writeFile(t, filepath.Join(dir, "data.txt"), "the data")
	// The remote file second: --remote-file and --input keep their order.
	remoteSecond := strings.NewReplacer("<open_name>model</open_name>", "<open_name>table</open_name>",
		"<open_name>table</open_name>", "<open_name>model</open_name>").Replace(threeInputs)
	writeFile(t, filepath.Join(dir, "in.xml"), remoteSecond)
	writeFile(t, filepath.Join(dir, "out.xml"), twoOutputs)

	out := b.mustRun(t, "file", "stage", "--gzip", "model", filepath.Join(dir, "model.bin"))
	m := stagedLine.FindStringSubmatch(out)
	if m == nil || m[2] != m[3] {
		t.Fatalf("file stage printed %q, want \"model_<md5> <md5>\"", out)
	}
	if list := b.mustRun(t, "file", "list"); !strings.Contains(list, m[1]) || !strings.Contains(list, "live") {
		t.Fatalf("file list lacks %s:\n%s", m[1], list)
	}

	// create_work's spellings: the remote file in order among the inputs.
	b.mustRun(t, "job", "submit", "--app", "demo", "--wu_name", "j1", "--input", filepath.Join(dir, "data.txt"),
		"--remote_file", "https://files.example.org/t,1234,"+remoteMD5, "--input", "shared:model",
		"--command_line", "--alpha 1", "--wu_template", filepath.Join(dir, "in.xml"), "--result_template", filepath.Join(dir, "out.xml"))
	doc, outID, target := jobDoc(t, b, "j1")
	if doc.CommandLine != "--alpha 1" || len(doc.Inputs) != 3 || target != 3 {
		t.Fatalf("job j1 = %+v (target %d); want command line --alpha 1, 3 inputs, the template's target_nresults", doc, target)
	}
	data, remote, shared := doc.Inputs[0], doc.Inputs[1], doc.Inputs[2]
	path, _ := fanout.Path(filepath.Join(dir, "download"), data.Name, 16)
	if got, err := os.ReadFile(path); err != nil || string(got) != "the data" || data.OpenName != "data" || !(data.GzippedNbytes > 0) {
		t.Errorf("first input %+v at %s = %q, %v; want the data, opened as data, gzip'd", data, path, got, err)
	}
	if shared.Name != m[1] || shared.OpenName != "model" || !shared.NoDelete {
		t.Errorf("shared input = %+v; want %s opened as model", shared, m[1])
	}
	if remote.Name != "jf_"+remoteMD5 || remote.Nbytes != 1234 || len(remote.URLs) != 1 || remote.URLs[0] != "https://files.example.org/t" ||
		remote.OpenName != "table" {
		t.Errorf("remote input = %+v", remote)
	}
	if tm, err := b.st.JobTemplateGet(ctx, outID); err != nil || tm.Body != twoOutputs {
		t.Errorf("job j1 output template = %+v, %v; want out.xml", tm, err)
	}

	// Today's form still works: one file for the built-in template, here
	// from standard input.
	b.stdin = "from stdin"
	b.mustRun(t, "job", "submit", "--app", "demo", "--name", "j2", "--input", "-")
	doc, outID, _ = jobDoc(t, b, "j2")
	path, _ = fanout.Path(filepath.Join(dir, "download"), doc.Inputs[0].Name, 16)
	if got, err := os.ReadFile(path); err != nil || string(got) != "from stdin" || len(doc.Inputs) != 1 || doc.Inputs[0].OpenName != "in" || outID != 0 {
		t.Fatalf("job j2 = %+v, input %q, %v; want one input \"in\" from stdin and the built-in output template", doc, got, err)
	}
}

func TestAppTemplates(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	ctx := context.Background()
	dir := b.projectDir
	twoIn := strings.Replace(strings.Replace(threeInputs, "<file_info><number>2</number></file_info>", "", 1),
		"<file_ref><file_number>2</file_number><open_name>table</open_name></file_ref>", "", 1)
	writeFile(t, filepath.Join(dir, "in.xml"), twoIn)
	writeFile(t, filepath.Join(dir, "out.xml"), twoOutputs)
	writeFile(t, filepath.Join(dir, "nolimit.xml"), noLimitOutput)
	writeFile(t, filepath.Join(dir, "a"), "a")
	writeFile(t, filepath.Join(dir, "b"), "b")

	b.mustRun(t, "app", "add", "--name", "demo", "--input-template", filepath.Join(dir, "in.xml"))
	if out := b.mustRun(t, "app", "templates", "--app", "demo"); !strings.Contains(out, "<open_name>model</open_name>") ||
		!strings.Contains(out, "output template: built-in") {
		t.Fatalf("app templates shows:\n%s", out)
	}
	if _, _, err := b.run(t, "app", "templates", "--app", "demo", "--output-template", filepath.Join(dir, "nolimit.xml")); err == nil ||
		!strings.Contains(err.Error(), "max_nbytes") {
		t.Fatalf("app templates with an output without a size limit = %v, want an error naming max_nbytes", err)
	}
	b.mustRun(t, "app", "templates", "--app", "demo", "--output-template", filepath.Join(dir, "out.xml"))
	app, err := b.st.AppGetByName(ctx, "demo")
	if err != nil || app.InputTemplateID == 0 || app.OutputTemplateID == 0 {
		t.Fatalf("app = %+v, %v; want both templates set", app, err)
	}

	// A job naming no template gets the app's.
	b.mustRun(t, "job", "submit", "--app", "demo", "--name", "j", "--input", filepath.Join(dir, "a"), "--input", filepath.Join(dir, "b"))
	doc, outID, _ := jobDoc(t, b, "j")
	if len(doc.Inputs) != 2 || doc.Inputs[0].OpenName != "data" || doc.Inputs[1].OpenName != "model" ||
		doc.CommandLine != "--default" || outID != app.OutputTemplateID {
		t.Fatalf("job j = %+v with output template %d; want the app's templates (output %d)", doc, outID, app.OutputTemplateID)
	}
	if _, _, err := b.run(t, "app", "templates", "--app", "nosuch", "--output-template", filepath.Join(dir, "out.xml")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("app templates for a missing app = %v, want ErrNotFound", err)
	}
}

func TestJobSubmitRefusals(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	dir := b.projectDir
	b.mustRun(t, "app", "add", "--name", "demo")
	writeFile(t, filepath.Join(dir, "data"), "data")
	writeFile(t, filepath.Join(dir, "in.xml"), threeInputs)
	writeFile(t, filepath.Join(dir, "nolimit.xml"), noLimitOutput)
	data, in := filepath.Join(dir, "data"), filepath.Join(dir, "in.xml")
	remote := "https://files.example.org/t,12," + remoteMD5
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"a missing local file", []string{"--input", filepath.Join(dir, "nosuch")}},
		{"a shared file not staged", []string{"--input-template", in, "--input", data, "--input", "shared:model", "--remote-file", remote}},
		{"a template naming a file not given", []string{"--input-template", in, "--input", data, "--remote-file", remote}},
		{"more files than the template takes", []string{"--input", data, "--input", data}},
		{"an output without a size limit", []string{"--input", data, "--output-template", filepath.Join(dir, "nolimit.xml")}},
		{"a missing template file", []string{"--input", data, "--input-template", filepath.Join(dir, "nosuch.xml")}},
		{"a job name with ..", []string{"--name", "..", "--input", data}},
		{"a job name with /", []string{"--name", "a/../b", "--input", data}},
		{"a remote file without md5", []string{"--input-template", in, "--input", data, "--input", data, "--remote-file", "https://x.org/t,12"}},
		{"a remote file with a bad md5", []string{"--input-template", in, "--input", data, "--input", data, "--remote-file", "https://x.org/t,12,xyz"}},
		{"an empty shared name", []string{"--input", "shared:"}},
	} {
		args := append([]string{"job", "submit", "--app", "demo"}, tc.args...)
		if _, _, err := b.run(t, args...); err == nil {
			t.Errorf("job submit with %s succeeded, want an error", tc.name)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
	for _, args := range [][]string{
		{"file", "stage", "../model", data},
		{"file", "stage", "model", filepath.Join(dir, "nosuch")},
		{"file", "stage", "model"},
	} {
		if _, _, err := b.run(t, args...); err == nil {
			t.Errorf("taskctl %s succeeded, want an error", strings.Join(args, " "))
		}
	}
	if files := filesUnder(t, filepath.Join(dir, "download")); len(files) != 0 {
		t.Errorf("refused submissions staged %v", files)
	}
	var n int
	for _, table := range []string{"workunit", "shared_file", "job_template"} {
		if err := b.st.DB().Get(&n, `SELECT COUNT(*) FROM `+table); err != nil || n != 0 {
			t.Errorf("%d %s rows after refused submissions, %v; want 0", n, table, err)
		}
	}
}

func TestBatchSubmitJobsFile(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	dir := b.projectDir
	b.mustRun(t, "app", "add", "--name", "demo")
	writeFile(t, filepath.Join(dir, "model.bin"), "the model")
	writeFile(t, filepath.Join(dir, "in.xml"), threeInputs)
	writeFile(t, filepath.Join(dir, "out.xml"), twoOutputs)
	writeFile(t, filepath.Join(dir, "x1.dat"), "x one")
	writeFile(t, filepath.Join(dir, "x2.dat"), "x two")
	b.mustRun(t, "file", "stage", "model", filepath.Join(dir, "model.bin"))
	x1, x2 := filepath.Join(dir, "x1.dat"), filepath.Join(dir, "x2.dat")
	b.stdin = "# one job a line, as create_work --stdin\n" +
		x1 + " shared:model --remote_file https://files.example.org/t,5," + remoteMD5 + "\n\n" +
		"--wu_name second --command_line '--beta \"2 3\"' " + x2 + " --input shared:model --remote-file https://files.example.org/u,6," + remoteMD5 + "\n"
	out := b.mustRun(t, "batch", "submit", "--app", "demo", "--name", "run", "--jobs", "-", "--input-template", filepath.Join(dir, "in.xml"),
		"--output-template", filepath.Join(dir, "out.xml"), "--command-line", "--common")
	if m := batchLine.FindStringSubmatch(out); m == nil || m[3] != "2" {
		t.Fatalf("batch submit --jobs printed %q, want 2 jobs", out)
	}
	for name, want := range map[string]struct{ cl, data, url string }{
		"run_x1.dat": {"--common", "x one", "https://files.example.org/t"},
		"run_second": {`--common --beta "2 3"`, "x two", "https://files.example.org/u"},
	} {
		doc, outID, _ := jobDoc(t, b, name)
		if doc.CommandLine != want.cl || len(doc.Inputs) != 3 || !strings.HasPrefix(doc.Inputs[1].Name, "model_") ||
			doc.Inputs[2].URLs[0] != want.url || outID == 0 {
			t.Errorf("job %s = %+v, output template %d; want command line %q, 3 inputs", name, doc, outID, want.cl)
			continue
		}
		path, _ := fanout.Path(filepath.Join(dir, "download"), doc.Inputs[0].Name, 16)
		if got, err := os.ReadFile(path); err != nil || string(got) != want.data {
			t.Errorf("job %s first input = %q, %v; want %q", name, got, err, want.data)
		}
	}
	// A bad line refuses the whole batch, with its line number.
	b.stdin = x1 + " shared:model --remote-file https://files.example.org/t,5," + remoteMD5 + "\n" + x2 + " shared:nosuch --remote-file https://files.example.org/t,5," + remoteMD5 + "\n"
	if _, _, err := b.run(t, "batch", "submit", "--app", "demo", "--name", "run2", "--jobs", "-", "--input-template", filepath.Join(dir, "in.xml")); err == nil ||
		!strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("batch with a shared file not staged = %v, want an error naming it", err)
	}
	b.stdin = "--bogus " + x1 + "\n"
	if _, _, err := b.run(t, "batch", "submit", "--app", "demo", "--name", "run3", "--jobs", "-"); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("batch with an unknown option = %v, want an error naming line 1", err)
	}
	if _, err := b.st.BatchGetByName(context.Background(), "run2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("refused batch run2: %v, want none", err)
	}
}

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
