package projectrun

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"maps"
	"path/filepath"
	"slices"
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
	kept, err := SharedFilesKept(ctx, st.DB())
	zipped := jobs.SharedName("zipped", md5Of("a shared file with a gzip'd copy"))
	want := map[string]bool{jobs.SharedName(demoapp.ModelFile, md5Of(string(demoapp.Model()))): true, zipped: true, zipped + ".gz": true}
	if err != nil || !maps.Equal(kept, want) {
		t.Errorf("SharedFilesKept = %v, %v; want %v (the model, another file and its gzip'd copy)", kept, err, want)
	}
	left := []string{filepath.Join("1a", zipped), filepath.Join("1b", "job_in"), filepath.Join("2c", zipped+".gz")}
	if got := Unkept(left, kept); !slices.Equal(got, left[1:2]) {
		t.Errorf("Unkept(%q) = %q, want only the job's input", left, got)
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

// md5Of is the hex md5 sum of s, as shared file names carry it.
func md5Of(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}
