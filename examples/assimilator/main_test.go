package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/assimilator"
	"github.com/taskserver/taskserver/job"
	"github.com/taskserver/taskserver/jobtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// output writes body as an output file in dir and returns an instance
// whose one output it is.
func output(t *testing.T, dir, name string, body []byte) job.Instance {
	t.Helper()
	path := filepath.Join(dir, name+"_0")
	if err := os.WriteFile(path, body, 0o444); err != nil {
		t.Fatal(err)
	}
	return job.Instance{ID: 1, Name: name, Outputs: []job.Output{{Name: "out", Path: path}}}
}

func sha(body string) string {
	s := sha256.Sum256([]byte(body))
	return hex.EncodeToString(s[:])
}

func readCSV(t *testing.T, path string) string {
	t.Helper()
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(body)
}

func TestCSVHandlerAppendsEachJobOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := filepath.Join(dir, "csv")
	h := NewCSVHandler(out)
	ctx := context.Background()
	r := output(t, dir, "a_0", []byte("42\n"))
	ok := job.Job{ID: 10, Name: "a", Batch: 3}
	bad := job.Job{ID: 11, Name: "b", Batch: 3, Errors: []string{"too_many_error_results"}}
	for _, call := range []struct {
		j job.Job
		r *job.Instance
	}{{ok, &r}, {bad, nil}, {ok, &r}} {
		if err := h.Handle(ctx, call.j, call.r); err != nil {
			t.Fatalf("Handle(%s): %v", call.j.Name, err)
		}
	}
	// A restarted process handling a job again (crash before it was marked
	// done) finds it in the file.
	if err := NewCSVHandler(out).Handle(ctx, bad, nil); err != nil {
		t.Fatalf("Handle after a restart: %v", err)
	}
	want := "job,job_id,batch,status,sha256,bytes\n" +
		"a,10,3,success," + sha("42\n") + ",3\n" +
		"b,11,3,too_many_error_results,,\n"
	if got := readCSV(t, filepath.Join(out, "batch_3.csv")); got != want {
		t.Errorf("batch_3.csv =\n%s\nwant\n%s", got, want)
	}
}

func TestCSVHandlerCutsATornLastLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "batch_0.csv")
	if err := os.WriteFile(path, []byte("job,job_id,batch,status,sha256,bytes\nx,1,0,cancelled,,\ny,2,0,canc"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := NewCSVHandler(dir)
	cancelled := []string{"cancelled"}
	for _, j := range []job.Job{{ID: 1, Name: "x", Errors: cancelled}, {ID: 2, Name: "y", Errors: cancelled}} {
		if err := h.Handle(context.Background(), j, nil); err != nil {
			t.Fatalf("Handle(%s): %v", j.Name, err)
		}
	}
	want := "job,job_id,batch,status,sha256,bytes\nx,1,0,cancelled,,\ny,2,0,cancelled,,\n"
	if got := readCSV(t, path); got != want {
		t.Errorf("after a torn row and a rerun: %q, want %q (torn row replaced, x not repeated)", got, want)
	}
}

func TestCSVHandlerMissingOutputIsAnError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := job.Instance{ID: 1, Name: "m_0", Outputs: []job.Output{{Name: "out", Path: filepath.Join(dir, "m_0_0")}}}
	h := NewCSVHandler(filepath.Join(dir, "csv"))
	if err := h.Handle(context.Background(), job.Job{ID: 1, Name: "m"}, &r); err == nil {
		t.Error("Handle with the output gone = nil, want an error (the job is retried)")
	}
	if got := readCSV(t, filepath.Join(dir, "csv", "batch_0.csv")); got != "job,job_id,batch,status,sha256,bytes\n" {
		t.Errorf("batch_0.csv after a failed Handle = %q, want the header only", got)
	}
}

// TestOnePass runs the example daemon once over a real database: a job
// that succeeded and one that was cancelled each get their row, and both
// are marked assimilated. Not parallel: urfave/cli's help flag is a
// package-level variable.
func TestOnePass(t *testing.T) {
	p := jobtest.New(t, "demo")
	p.AddJobToAssimilate("good", 5, "digest 1\n")
	p.AddCancelledJob("gone", 5)
	if err := assimilator.Run(context.Background(), p.Args("assimilator"), program()); err != nil {
		t.Fatalf("assimilator.Run: %v", err)
	}
	want := "job,job_id,batch,status,sha256,bytes\n" +
		"good," + strconv.FormatInt(p.JobID("good"), 10) + ",5,success," + sha("digest 1\n") + ",9\n" +
		"gone," + strconv.FormatInt(p.JobID("gone"), 10) + ",5,cancelled,,\n"
	if got := readCSV(t, filepath.Join(p.Dir, "results-csv", "batch_5.csv")); got != want {
		t.Errorf("results-csv/batch_5.csv =\n%s\nwant\n%s", got, want)
	}
	for _, name := range []string{"good", "gone"} {
		if !p.Assimilated(name) {
			t.Errorf("job %s not marked assimilated after the pass", name)
		}
	}
}
