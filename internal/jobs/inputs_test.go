package jobs_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/jobtemplate"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// threeInputs takes two files given to the job (the second gzip'd) and a
// shared one named in the template, sticky; a command line; parameters.
const threeInputs = `<input_template>
<file_info><number>0</number></file_info>
<file_info><physical_name>model</physical_name><sticky/></file_info>
<file_info><number>1</number><gzip/></file_info>
<workunit>
  <file_ref><open_name>in</open_name></file_ref>
  <file_ref><open_name>model</open_name></file_ref>
  <file_ref><open_name>params</open_name><copy_file/></file_ref>
  <command_line>--rounds 3</command_line>
  <rsc_fpops_est>5e12</rsc_fpops_est>
  <min_quorum>1</min_quorum>
  <target_nresults>1</target_nresults>
</workunit>
</input_template>`

const twoOutputs = `<output_template>
<file_info><name><OUTFILE_0/></name><generated_locally/><upload_when_present/><max_nbytes>1000</max_nbytes><url><UPLOAD_URL/></url></file_info>
<file_info><name><OUTFILE_1/></name><generated_locally/><upload_when_present/><max_nbytes>400000</max_nbytes><url><UPLOAD_URL/></url></file_info>
<result>
  <file_ref><file_name><OUTFILE_0/></file_name><open_name>out</open_name></file_ref>
  <file_ref><file_name><OUTFILE_1/></file_name><open_name>log</open_name><optional/></file_ref>
</result>
</output_template>`

func (f *creatorFixture) read(t *testing.T, name string) []byte {
	t.Helper()
	return f.readBeside(t, name, "")
}

// readBeside reads name+suffix in name's fan-out directory.
func (f *creatorFixture) readBeside(t *testing.T, name, suffix string) []byte {
	t.Helper()
	path, err := fanout.Path(f.dir, name, 8)
	path += suffix
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestJobFromTemplates creates a job from BOINC templates: every input is
// staged or referred to, the gzip'd copy is beside its file, the shared
// file is referred to in workunit_shared_file, the template's parameters
// and command line are the job's, and its instances get the output
// template's files.
func TestJobFromTemplates(t *testing.T) {
	t.Parallel()
	f := newCreatorFixture(t)
	ctx := context.Background()
	app := f.app(t, storetest.AppOptions{Name: "tmpl"})
	model, err := f.c.StageShared(ctx, "model", []byte("the model, shared"), false)
	if err != nil {
		t.Fatal(err)
	}
	if model.Name != jobs.SharedName("model", model.MD5) || model.State != row.SharedFileLive {
		t.Fatalf("StageShared = %+v", model)
	}
	params := bytes.Repeat([]byte("p"), 5000)
	job := jobs.Job{Name: "t1", Inputs: []jobs.Input{{Data: []byte("input one")}, {Data: params}},
		InputTemplate:  strings.Replace(threeInputs, "<physical_name>model</physical_name>", "<physical_name>"+model.Name+"</physical_name>", 1),
		OutputTemplate: twoOutputs}
	if err := f.c.Submit(ctx, app, job, jobs.DefaultParams()); err != nil {
		t.Fatal(err)
	}
	wu, err := f.st.WorkunitGetByName(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if wu.RscFpopsEst != 5e12 || wu.MinQuorum != 1 || wu.TargetNResults != 1 || wu.OutputTemplateID == 0 {
		t.Errorf("job row %+v: want the template's rsc_fpops_est, quorum 1 and an output template", wu)
	}
	doc, err := jobxml.ParseWorkunit(wu.XMLDoc)
	if err != nil {
		t.Fatal(err)
	}
	if doc.CommandLine != "--rounds 3" || len(doc.Inputs) != 3 {
		t.Fatalf("workunit doc %+v", doc)
	}
	in, sh, pa := doc.Inputs[0], doc.Inputs[1], doc.Inputs[2]
	if in.OpenName != "in" || string(f.read(t, in.Name)) != "input one" {
		t.Errorf("first input %+v", in)
	}
	if sh.Name != model.Name || sh.OpenName != "model" || !sh.Sticky || !sh.NoDelete || sh.MD5 != model.MD5 {
		t.Errorf("shared input %+v, want %s, sticky, no_delete", sh, model.Name)
	}
	if pa.OpenName != "params" || !pa.CopyFile || pa.GzippedNbytes <= 0 || !bytes.Equal(f.read(t, pa.Name), params) {
		t.Errorf("gzip'd input %+v", pa)
	}
	z := f.readBeside(t, pa.Name, ".gz")
	if float64(len(z)) != pa.GzippedNbytes {
		t.Errorf("gzip'd copy is %d bytes, the document says %g", len(z), pa.GzippedNbytes)
	}
	zr, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(zr); !bytes.Equal(got, params) {
		t.Error("the gzip'd copy does not decompress to the file")
	}
	var refs []int64
	if err := f.st.DB().Select(&refs, `SELECT shared_file_id FROM workunit_shared_file WHERE workunitid = ?`, wu.ID); err != nil || len(refs) != 1 || refs[0] != model.ID {
		t.Errorf("shared file references = %v, %v; want [%d]", refs, err, model.ID)
	}
	tmpl, err := f.st.JobTemplateGet(ctx, wu.OutputTemplateID)
	if err != nil || tmpl.Kind != jobtemplate.KindOutput || tmpl.Body != twoOutputs {
		t.Errorf("stored output template %+v, %v", tmpl, err)
	}
	// A second job with the same template reuses the row; by logical name
	// the shared file is the latest staged.
	job2 := job
	job2.Name, job2.InputTemplate = "t2", threeInputs
	if err := f.c.Submit(ctx, app, job2, jobs.DefaultParams()); err != nil {
		t.Fatal(err)
	}
	wu2, _ := f.st.WorkunitGetByName(ctx, "t2")
	if wu2.OutputTemplateID != wu.OutputTemplateID {
		t.Errorf("the same output template stored twice: %d and %d", wu.OutputTemplateID, wu2.OutputTemplateID)
	}
	if sf, _ := f.st.SharedFileGet(ctx, model.Name); sf.NJobs != 2 {
		t.Errorf("shared file used by %d jobs, want 2", sf.NJobs)
	}
}

// TestAppTemplatesAreTheDefault: an app's stored templates shape jobs that
// name none.
func TestAppTemplatesAreTheDefault(t *testing.T) {
	t.Parallel()
	f := newCreatorFixture(t)
	ctx := context.Background()
	inID, err := f.st.JobTemplatePut(ctx, jobtemplate.KindInput, `<file_info/><file_info/><workunit><file_ref><open_name>a</open_name></file_ref><file_ref><open_name>b</open_name></file_ref></workunit>`, 1)
	if err != nil {
		t.Fatal(err)
	}
	outID, err := f.st.JobTemplatePut(ctx, jobtemplate.KindOutput, twoOutputs, 1)
	if err != nil {
		t.Fatal(err)
	}
	app := f.app(t, storetest.AppOptions{Name: "withdefaults"})
	if _, err := f.st.DB().Exec(`UPDATE app SET input_template_id = ?, output_template_id = ? WHERE id = ?`, inID, outID, app.ID); err != nil {
		t.Fatal(err)
	}
	app, _ = f.st.AppGet(ctx, app.ID)
	if err := f.c.Submit(ctx, app, jobs.Job{Name: "d1", Inputs: []jobs.Input{{Data: []byte("A")}, {Data: []byte("B")}}}, jobs.DefaultParams()); err != nil {
		t.Fatal(err)
	}
	wu, _ := f.st.WorkunitGetByName(ctx, "d1")
	doc, _ := jobxml.ParseWorkunit(wu.XMLDoc)
	if len(doc.Inputs) != 2 || doc.Inputs[1].OpenName != "b" || string(f.read(t, doc.Inputs[1].Name)) != "B" || wu.OutputTemplateID != outID {
		t.Errorf("job of an app with templates: %+v, output template %d", doc, wu.OutputTemplateID)
	}
	if err := f.c.Submit(ctx, app, jobs.Job{Name: "d2", Inputs: []jobs.Input{{Data: []byte("A")}}}, jobs.DefaultParams()); err == nil {
		t.Error("a job given one file for a two-file template was created")
	}
}

// TestBadJobsStageNothing: a refused job leaves no file and no row.
func TestBadJobsStageNothing(t *testing.T) {
	t.Parallel()
	f := newCreatorFixture(t)
	ctx := context.Background()
	app := f.app(t, storetest.AppOptions{Name: "bad"})
	good := jobs.Input{Data: []byte("fine")}
	for name, j := range map[string]jobs.Job{
		"too few files":          {Inputs: nil},
		"too many files":         {Inputs: []jobs.Input{good, good}},
		"output without a limit": {Inputs: []jobs.Input{good}, OutputTemplate: `<file_info><name><OUTFILE_0/></name></file_info><result><file_ref><file_name><OUTFILE_0/></file_name><open_name>out</open_name></file_ref></result>`},
		"path in an open name":   {Inputs: []jobs.Input{good}, InputTemplate: `<file_info/><workunit><file_ref><open_name>../in</open_name></file_ref></workunit>`},
		"unknown shared file":    {Inputs: []jobs.Input{{Shared: "nosuch"}}},
		"remote without md5":     {Inputs: []jobs.Input{{URL: "https://example.org/x", Nbytes: 3}}},
		"remote not http":        {Inputs: []jobs.Input{{URL: "file:///etc/passwd", MD5: strings.Repeat("a", 32), Nbytes: 3}}},
		"two kinds at once":      {Inputs: []jobs.Input{{Data: []byte("x"), Shared: "model"}}},
	} {
		// A valid first job in the same batch: nothing of it is staged either.
		batch := []jobs.Job{{Name: "ok_" + strings.ReplaceAll(name, " ", "_"), Inputs: []jobs.Input{good}}, j}
		batch[1].Name = "bad_" + strings.ReplaceAll(name, " ", "_")
		if err := f.c.CreateForApp(ctx, app, batch, jobs.DefaultParams()); err == nil {
			t.Errorf("%s: created", name)
		}
	}
	var n int
	if err := f.st.DB().Get(&n, `SELECT COUNT(*) FROM workunit`); err != nil || n != 0 {
		t.Errorf("jobs in the database after refused submissions: %d, %v", n, err)
	}
	if entries, _ := os.ReadDir(f.dir); len(entries) != 0 {
		t.Errorf("files staged by refused submissions: %v", entries)
	}
}

// TestSharedFileBeingDeletedIsNotReferred: a job cannot refer to a shared
// file the file deleter has begun to delete, and staging it again while
// it is being deleted is refused; once deleted, staging it again revives it.
func TestSharedFileBeingDeletedIsNotReferred(t *testing.T) {
	t.Parallel()
	f := newCreatorFixture(t)
	ctx := context.Background()
	app := f.app(t, storetest.AppOptions{Name: "gone"})
	sf, err := f.c.StageShared(ctx, "db", []byte("database"), true)
	if err != nil {
		t.Fatal(err)
	}
	if sf.GzippedNbytes <= 0 || len(f.readBeside(t, sf.Name, ".gz")) != int(sf.GzippedNbytes) {
		t.Errorf("shared file staged with gzip: %+v", sf)
	}
	tmpl := `<file_info/><file_info/><workunit><file_ref><open_name>in</open_name></file_ref><file_ref><open_name>db</open_name></file_ref></workunit>`
	if _, err := f.st.DB().Exec(`UPDATE shared_file SET state = ? WHERE id = ?`, row.SharedFileDeleting, sf.ID); err != nil {
		t.Fatal(err)
	}
	err = f.c.Submit(ctx, app, jobs.Job{Name: "g1", Inputs: []jobs.Input{{}, {Shared: sf.Name}}, InputTemplate: tmpl}, jobs.DefaultParams())
	if !errors.Is(err, store.ErrSharedFileGone) {
		t.Errorf("job referring to a shared file being deleted: %v, want ErrSharedFileGone", err)
	}
	if _, err := f.c.StageShared(ctx, "db", []byte("database"), true); !errors.Is(err, store.ErrSharedFileGone) {
		t.Errorf("staging a file being deleted: %v, want ErrSharedFileGone", err)
	}
	if _, err := f.st.DB().Exec(`UPDATE shared_file SET state = ? WHERE id = ?`, row.SharedFileDeleted, sf.ID); err != nil {
		t.Fatal(err)
	}
	path, _ := fanout.Path(f.dir, sf.Name, 8)
	os.Remove(path)
	if again, err := f.c.StageShared(ctx, "db", []byte("database"), true); err != nil || again.State != row.SharedFileLive || again.ID != sf.ID {
		t.Errorf("staging a deleted file again = %+v, %v; want it live", again, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("re-staged file not on disk: %v", err)
	}
	if err := f.c.Submit(ctx, app, jobs.Job{Name: "g2", Inputs: []jobs.Input{{}, {Shared: "db"}}, InputTemplate: tmpl}, jobs.DefaultParams()); err != nil {
		t.Errorf("job referring to the revived file by its logical name: %v", err)
	}
}
