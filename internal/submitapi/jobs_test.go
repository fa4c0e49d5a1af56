package submitapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/submitapi"
)

// threeInputs takes a file given by content, a shared file and a remote
// file.
const threeInputs = `<input_template>
<file_info><number>0</number></file_info>
<file_info><number>1</number></file_info>
<file_info><number>2</number></file_info>
<workunit>
<file_ref><file_number>0</file_number><open_name>data</open_name></file_ref>
<file_ref><file_number>1</file_number><open_name>model</open_name></file_ref>
<file_ref><file_number>2</file_number><open_name>table</open_name></file_ref>
</workunit></input_template>`

const twoOutputs = `<output_template>
<file_info><name><OUTFILE_0/></name><max_nbytes>1000</max_nbytes></file_info>
<file_info><name><OUTFILE_1/></name><max_nbytes>2000</max_nbytes></file_info>
<result>
<file_ref><file_name><OUTFILE_0/></file_name><open_name>result.txt</open_name></file_ref>
<file_ref><file_name><OUTFILE_1/></file_name><open_name>log.txt</open_name></file_ref>
</result></output_template>`

const remoteMD5 = "0123456789abcdef0123456789abcdef"

func threeInputJob(name string) map[string]any {
	return map[string]any{"name": name, "command_line": "--seed 7", "inputs": []any{
		map[string]any{"data": "ZGF0YQ=="}, // "data"
		map[string]any{"shared": "model"},
		map[string]any{"url": "https://files.example.org/t", "md5": remoteMD5, "nbytes": 99},
	}}
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
			out = append(out, filepath.Base(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSubmitJobsWithTemplatesAndOutputs(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx := context.Background()
	r := b.do(t, "POST", "/api/v1/files?name=model", b.alice, "the model")
	r.want(t, "stage a shared file", http.StatusCreated)
	var f submitapi.FileResponse
	if err := json.Unmarshal(r.body, &f); err != nil || !strings.HasPrefix(f.Name, "model_") || f.Nbytes != 9 {
		t.Fatalf("stage answer = %s, %v", r.body, err)
	}

	sub := map[string]any{"app": "demo", "name": "tpl", "input_template": threeInputs, "output_template": twoOutputs,
		"jobs": []any{threeInputJob("a")}}
	b.do(t, "POST", "/api/v1/batches", b.alice, sub).want(t, "submit three inputs", http.StatusCreated)
	wu, err := b.st.WorkunitGetByName(ctx, "tpl_a")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jobxml.ParseWorkunit(wu.XMLDoc)
	if err != nil || doc.CommandLine != "--seed 7" || len(doc.Inputs) != 3 || doc.Inputs[0].Nbytes != 4 ||
		doc.Inputs[1].Name != f.Name || doc.Inputs[1].OpenName != "model" || doc.Inputs[2].Name != "jf_"+remoteMD5 ||
		doc.Inputs[2].URLs[0] != "https://files.example.org/t" || wu.OutputTemplateID == 0 {
		t.Fatalf("job tpl_a = %+v with %+v, %v; want the three inputs, the command line and the output template", wu, doc, err)
	}

	// Assimilated with two outputs: listed and served by logical name.
	outputs := "/api/v1/jobs/tpl_a/outputs"
	r = b.do(t, "GET", outputs, b.alice, nil)
	r.want(t, "outputs before assimilation", http.StatusOK)
	var lo submitapi.JobOutputsResponse
	if err := json.Unmarshal(r.body, &lo); err != nil || lo.Done || len(lo.Outputs) != 0 {
		t.Fatalf("outputs before assimilation = %s, %v; want none, not done", r.body, err)
	}
	if _, err := b.st.DB().Exec(`UPDATE workunit SET assimilate_state = ? WHERE id = ?`, state.AssimilateDone, wu.ID); err != nil {
		t.Fatal(err)
	}
	// The copy assimilator's layout: <results>/<job>/<open name>.
	if err := os.MkdirAll(filepath.Join(b.resultsDir, "tpl_a"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"result.txt": "42\n", "log.txt": "log lines\n"} {
		if err := os.WriteFile(filepath.Join(b.resultsDir, "tpl_a", name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b.do(t, "GET", outputs, b.bob, nil).want(t, "another user's job outputs", http.StatusNotFound)
	r = b.do(t, "GET", outputs, b.alice, nil)
	r.want(t, "outputs", http.StatusOK)
	lo = submitapi.JobOutputsResponse{}
	// In name order.
	if err := json.Unmarshal(r.body, &lo); err != nil || !lo.Done || len(lo.Outputs) != 2 ||
		lo.Outputs[1].Name != "result.txt" || lo.Outputs[1].Size != 3 || lo.Outputs[0].Name != "log.txt" {
		t.Fatalf("outputs = %s, %v; want result.txt and log.txt", r.body, err)
	}
	for _, o := range lo.Outputs {
		r = b.do(t, "GET", o.URL, b.alice, nil)
		r.want(t, "output "+o.Name, http.StatusOK)
		if want := map[string]string{"result.txt": "42\n", "log.txt": "log lines\n"}[o.Name]; string(r.body) != want {
			t.Errorf("output %s = %q, want %q", o.Name, r.body, want)
		}
	}
	b.do(t, "GET", outputs+"/nosuch", b.alice, nil).want(t, "a missing output", http.StatusNotFound)
	b.do(t, "GET", outputs+"/result.txt", b.bob, nil).want(t, "another user's output", http.StatusNotFound)
}

func TestSubmitJobRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t, 4096)
	noLimit := `<output_template><file_info><name><OUTFILE_0/></name></file_info>
<result><file_ref><file_name><OUTFILE_0/></file_name><open_name>out</open_name></file_ref></result></output_template>`
	withJob := func(job map[string]any, extra ...string) map[string]any {
		s := map[string]any{"app": "demo", "name": "bad", "input_template": threeInputs, "jobs": []any{job}}
		for i := 0; i+1 < len(extra); i += 2 {
			s[extra[i]] = extra[i+1]
		}
		return s
	}
	twoGiven := threeInputJob("a")
	twoGiven["inputs"] = twoGiven["inputs"].([]any)[:2]
	both := threeInputJob("a")
	both["input"] = "eA=="
	twoKinds := threeInputJob("a")
	twoKinds["inputs"].([]any)[0] = map[string]any{"data": "eA==", "shared": "model"}
	tests := []struct {
		name string
		body any
	}{
		{"a shared file not staged", withJob(threeInputJob("a"))},
		{"a template naming a file not given", withJob(twoGiven)},
		{"input and inputs", withJob(both)},
		{"an input of two kinds", withJob(twoKinds)},
		{"an output without a size limit", withJob(map[string]any{"name": "a", "input": "eA=="}, "input_template", "", "output_template", noLimit)},
		{"a job name with ..", withJob(map[string]any{"name": "..", "input": "eA=="}, "input_template", "")},
		{"a bad input template", withJob(threeInputJob("a"), "input_template", "<input_template>")},
	}
	for _, tc := range tests {
		b.do(t, "POST", "/api/v1/batches", b.alice, tc.body).want(t, tc.name, http.StatusBadRequest)
	}
	b.do(t, "POST", "/api/v1/files?name=..", b.alice, "x").want(t, "a shared file named ..", http.StatusBadRequest)
	b.do(t, "POST", "/api/v1/files?name=a/b", b.alice, "x").want(t, "a shared file name with /", http.StatusBadRequest)
	b.do(t, "POST", "/api/v1/files", b.alice, "x").want(t, "a shared file without a name", http.StatusBadRequest)
	b.do(t, "POST", "/api/v1/files?name=big", b.alice, strings.Repeat("x", 5000)).
		want(t, "a shared file larger than a body", http.StatusRequestEntityTooLarge)
	b.do(t, "POST", "/api/v1/files?name=m", b.carol, "x").want(t, "staging without submit permission", http.StatusForbidden)
	if files := filesUnder(t, b.downloadDir); len(files) != 0 {
		t.Errorf("refused requests staged %v", files)
	}
	var n int
	for _, table := range []string{"workunit", "batch", "shared_file", "job_template"} {
		if err := b.st.DB().Get(&n, `SELECT COUNT(*) FROM `+table); err != nil || n != 0 {
			t.Errorf("%d %s rows after refused requests, %v; want 0", n, table, err)
		}
	}
}
