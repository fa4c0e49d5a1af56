package projectrun

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// TestDemoJobByHand: a demo job submitted with the demo templates has the
// work generator's shape; shared files and their copies are counted kept.
func TestDemoJobByHand(t *testing.T) {
	st := storetest.New(t)
	ctx := context.Background()
	appID, err := SeedDemoApp(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	c := jobs.NewCreator(st, filepath.Join(t.TempDir(), "download"), 16, time.Now)
	if _, err := c.StageShared(ctx, demoapp.ModelFile, demoapp.Model(), false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StageShared(ctx, "zipped", []byte("a shared file with a gzip'd copy"), true); err != nil {
		t.Fatal(err)
	}
	if n, err := SharedFilesKept(ctx, st.DB()); n != 3 || err != nil {
		t.Errorf("SharedFilesKept = %d, %v; want 3 (the model, another file and its gzip'd copy)", n, err)
	}
	job := jobs.Job{Name: "by_hand", Inputs: []jobs.Input{{Data: demoapp.Input("by_hand")}, {Shared: demoapp.ModelFile}, {Data: demoapp.Params()}},
		InputTemplate: demoapp.InputTemplate, OutputTemplate: demoapp.OutputTemplate}
	if err := c.Create(ctx, appID, []jobs.Job{job}, jobs.DefaultParams()); err != nil {
		t.Fatal(err)
	}
	// The app's own templates stay the built-in ones: one input.
	if err := c.Create(ctx, appID, []jobs.Job{{Name: "one_input", Inputs: []jobs.Input{{Data: []byte("x")}}}}, jobs.DefaultParams()); err != nil {
		t.Errorf("a one-input demo job: %v", err)
	}
	wu, err := st.WorkunitGetByName(ctx, "by_hand")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jobxml.ParseWorkunit(wu.XMLDoc)
	if err != nil || len(doc.Inputs) != 3 || doc.CommandLine != demoapp.CommandLine(demoapp.Rounds) || !doc.Inputs[1].Sticky {
		t.Fatalf("job by hand: %+v, %v; want the demo's three inputs, sticky model, command line", doc, err)
	}
	tmpl, err := st.JobTemplateGet(ctx, wu.OutputTemplateID)
	if err != nil || tmpl.Body != demoapp.OutputTemplate {
		t.Errorf("output template %+v, %v; want the demo's", tmpl, err)
	}
}
