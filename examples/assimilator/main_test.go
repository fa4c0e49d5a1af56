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

	"github.com/taskserver/taskserver/internal/assimilator"
	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const fanoutN = 8

// upload stores body as output file 0 of result rname and returns a
// canonical result naming it.
func upload(t *testing.T, dir, rname string, body []byte) row.Result {
	t.Helper()
	doc, err := jobxml.FormatResult(rname, []string{"out"}, 1e6)
	if err != nil {
		t.Fatal(err)
	}
	path, err := fanout.Path(dir, jobxml.OutputName(rname, 0), fanoutN)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, body, 0o644); err != nil {
		t.Fatal(err)
	}
	return row.Result{ID: 1, Name: rname, XMLDocIn: doc}
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
	up, out := filepath.Join(dir, "upload"), filepath.Join(dir, "csv")
	h := NewCSVHandler(out, up, fanoutN)
	ctx := context.Background()
	r := upload(t, up, "a_0", []byte("42\n"))
	ok := row.Workunit{ID: 10, Name: "a", Batch: 3, CanonicalResultID: r.ID}
	bad := row.Workunit{ID: 11, Name: "b", Batch: 3, ErrorMask: state.ErrTooManyErrorResults}
	for _, call := range []struct {
		wu row.Workunit
		r  *row.Result
	}{{ok, &r}, {bad, nil}, {ok, &r}} {
		if err := h.Handle(ctx, call.wu, call.r); err != nil {
			t.Fatalf("Handle(%s): %v", call.wu.Name, err)
		}
	}
	// A restarted process handling a job again (crash before it was marked
	// done) finds it in the file.
	if err := NewCSVHandler(out, up, fanoutN).Handle(ctx, bad, nil); err != nil {
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
	h := NewCSVHandler(dir, dir, fanoutN)
	for _, wu := range []row.Workunit{{ID: 1, Name: "x", ErrorMask: state.ErrCancelled}, {ID: 2, Name: "y", ErrorMask: state.ErrCancelled}} {
		if err := h.Handle(context.Background(), wu, nil); err != nil {
			t.Fatalf("Handle(%s): %v", wu.Name, err)
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
	doc, err := jobxml.FormatResult("m_0", []string{"out"}, 1e6)
	if err != nil {
		t.Fatal(err)
	}
	r := row.Result{ID: 1, Name: "m_0", XMLDocIn: doc}
	h := NewCSVHandler(filepath.Join(dir, "csv"), filepath.Join(dir, "upload"), fanoutN)
	if err := h.Handle(context.Background(), row.Workunit{ID: 1, Name: "m", CanonicalResultID: 1}, &r); err == nil {
		t.Error("Handle with the output not uploaded = nil, want an error (the job is retried)")
	}
	if got := readCSV(t, filepath.Join(dir, "csv", "batch_0.csv")); got != "job,job_id,batch,status,sha256,bytes\n" {
		t.Errorf("batch_0.csv after a failed Handle = %q, want the header only", got)
	}
}

// TestOnePass runs the example daemon once over a real database. Not
// parallel: urfave/cli's help flag is a package-level variable.
func TestOnePass(t *testing.T) {
	dsn := storetest.NewDatabase(t)
	ctx := context.Background()
	st, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	defer st.Close()
	appID, err := st.AppInsert(ctx, row.App{Name: "demo", UserFriendlyName: "Demo"})
	if err != nil {
		t.Fatalf("AppInsert: %v", err)
	}
	project := t.TempDir()
	good, err := st.WorkunitInsert(ctx, row.Workunit{AppID: appID, Name: "good", Batch: 5, AssimilateState: state.AssimilateReady})
	if err != nil {
		t.Fatalf("WorkunitInsert: %v", err)
	}
	r := upload(t, filepath.Join(project, "upload"), "good_0", []byte("digest 1\n"))
	rid, err := st.ResultInsert(ctx, row.Result{WorkunitID: good, Name: r.Name, XMLDocIn: r.XMLDocIn,
		ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ValidateState: state.ValidateValid})
	if err != nil {
		t.Fatalf("ResultInsert: %v", err)
	}
	if _, err := st.DB().Exec(`UPDATE workunit SET canonical_resultid = ? WHERE id = ?`, rid, good); err != nil {
		t.Fatal(err)
	}
	args := []string{"assimilator", "--db-dsn", dsn, "--one-pass", "--listen", "", "--project-dir", project,
		"--fanout", strconv.Itoa(fanoutN), "--app", "demo"}
	if err := assimilator.Run(ctx, args, program()); err != nil {
		t.Fatalf("Run(%v): %v", args, err)
	}
	want := "job,job_id,batch,status,sha256,bytes\ngood," + strconv.FormatInt(good, 10) + ",5,success," +
		sha("digest 1\n") + ",9\n"
	if got := readCSV(t, filepath.Join(project, "results-csv", "batch_5.csv")); got != want {
		t.Errorf("results-csv/batch_5.csv =\n%s\nwant\n%s", got, want)
	}
	if wu, err := st.WorkunitGet(ctx, good); err != nil || wu.AssimilateState != state.AssimilateDone {
		t.Errorf("job after the pass = %v, %v; want done", wu.AssimilateState, err)
	}
}
