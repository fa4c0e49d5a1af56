package plugin

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store/storetest"
	"github.com/taskserver/taskserver/job"
)

func TestJobErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mask state.ErrorMask
		want []string
	}{
		{0, nil},
		{state.ErrCancelled, []string{"cancelled"}},
		{state.ErrTooManyErrorResults | state.ErrCancelled, []string{"too_many_error_results", "cancelled"}},
		{1 << 20, []string{"0x100000"}},
	} {
		j := Job(row.Workunit{ID: 7, Name: "j", Batch: 3, ErrorMask: tt.mask}, "science")
		want := job.Job{ID: 7, Name: "j", App: "science", Batch: 3, Errors: tt.want}
		if !reflect.DeepEqual(j, want) {
			t.Errorf("Job with mask %v = %+v, want %+v", tt.mask, j, want)
		}
	}
}

func TestCanonicalHandsOverOnlyFinishedOutputs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	doc, err := jobxml.FormatResult(storetest.Outputs("c_0", []string{"out"}, 1e6))
	if err != nil {
		t.Fatal(err)
	}
	r := row.Result{ID: 1, Name: "c_0", XMLDocIn: doc}
	if _, err := Canonical(r, dir, 4); err == nil {
		t.Error("Canonical with its output missing = nil error")
	}
	path, err := fanout.Path(dir, jobxml.OutputName("c_0", 0), 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, outputfile.WritingMode); err != nil {
		t.Fatal(err)
	}
	if _, err := Canonical(r, dir, 4); err == nil || !strings.Contains(err.Error(), "not a finished upload") {
		t.Errorf("Canonical with its output still being written = %v, want not a finished upload", err)
	}
	if err := os.Chmod(path, outputfile.FinishedMode); err != nil {
		t.Fatal(err)
	}
	in, err := Canonical(r, dir, 4)
	if err != nil || !reflect.DeepEqual(in.Outputs, []job.Output{{Name: "out", Path: path}}) {
		t.Errorf("Canonical = %+v, %v; want its one output at %s", in.Outputs, err, path)
	}
}
