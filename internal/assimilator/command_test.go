package assimilator

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// writeScript writes an executable shell script into dir.
func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// canonical returns a result named rname with one output file per entry of
// outputs, stored under upload (nil: not uploaded).
func canonical(t *testing.T, upload, rname string, outputs ...[]byte) row.Result {
	t.Helper()
	opens := make([]string, len(outputs))
	for i := range opens {
		opens[i] = "out" + strconv.Itoa(i)
	}
	doc, err := jobxml.FormatResult(storetest.Outputs(rname, opens, 1e6))
	if err != nil {
		t.Fatal(err)
	}
	for i, out := range outputs {
		if out == nil {
			continue
		}
		path, err := fanout.Path(upload, jobxml.OutputName(rname, i), fanoutN)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, outputfile.FinishedMode); err != nil { // as the data server marks it
			t.Fatal(err)
		}
	}
	return row.Result{ID: 7, Name: rname, XMLDocIn: doc}
}

// recordScript appends its environment and each output file to the log
// file given as its first argument.
const recordScript = `log=$1; shift
{
  echo "name=$TASKSERVER_JOB_NAME id=$TASKSERVER_JOB_ID batch=$TASKSERVER_BATCH mask=$TASKSERVER_ERROR_MASK names=$TASKSERVER_ERROR_NAMES"
  for f in "$@"; do echo "file=$(basename "$f") body=$(cat "$f")"; done
} >> "$log"
echo handled
`

func TestCommandHandlerSuccessGetsOutputsAndEnv(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	upload, log := filepath.Join(dir, "upload"), filepath.Join(dir, "log")
	h := CommandHandler{Argv: []string{"/bin/sh", writeScript(t, dir, "h.sh", recordScript), log},
		UploadDir: upload, Fanout: fanoutN, Timeout: time.Minute}
	r := canonical(t, upload, "job_0", []byte("zero"), []byte("one"))
	wu := row.Workunit{ID: 42, Name: "job", Batch: 3, CanonicalResultID: r.ID}
	if err := h.Handle(context.Background(), wu, &r); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	got, err := os.ReadFile(log)
	if err != nil {
		t.Fatalf("the script's log: %v", err)
	}
	want := "name=job id=42 batch=3 mask=0 names=\nfile=job_0_0 body=zero\nfile=job_0_1 body=one\n"
	if string(got) != want {
		t.Errorf("the script saw\n%s\nwant\n%s", got, want)
	}
}

func TestCommandHandlerFailedJobGetsErrorMask(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	h := CommandHandler{Argv: []string{"/bin/sh", writeScript(t, dir, "h.sh", recordScript), log}}
	wu := row.Workunit{ID: 5, Name: "bad", ErrorMask: state.ErrTooManyErrorResults | state.ErrCancelled}
	if err := h.Handle(context.Background(), wu, nil); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	got, _ := os.ReadFile(log)
	want := "name=bad id=5 batch=0 mask=18 names=" + wu.ErrorMask.String() + "\n"
	if string(got) != want {
		t.Errorf("the script saw %q, want %q", got, want)
	}
}

func TestCommandHandlerMissingOutputIsNotRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	upload, log := filepath.Join(dir, "upload"), filepath.Join(dir, "log")
	h := CommandHandler{Argv: []string{"/bin/sh", writeScript(t, dir, "h.sh", recordScript), log},
		UploadDir: upload, Fanout: fanoutN}
	r := canonical(t, upload, "job_0", []byte("zero"), nil)
	err := h.Handle(context.Background(), row.Workunit{ID: 1, Name: "job"}, &r)
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Handle with an output missing = %v, want an error wrapping ErrNotExist", err)
	}
	if _, err := os.Stat(log); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the script ran (log: %v); want it not run with an output missing", err)
	}
}

func TestCommandHandlerNonZeroExitIsAnErrorWithBoundedOutput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := writeScript(t, dir, "h.sh", `i=0; while [ $i -lt 200 ]; do echo "line $i of a long complaint"; i=$((i+1)); done >&2
exit 3
`)
	h := CommandHandler{Argv: []string{"/bin/sh", script}, MaxOutput: 100}
	err := h.Handle(context.Background(), row.Workunit{ID: 1, Name: "job", ErrorMask: state.ErrCancelled}, nil)
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("Handle of a script exiting 3 = %v, want an error naming exit status 3", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Handle error %v wraps DeadlineExceeded; want a plain failure", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "line 0 of") || !strings.Contains(msg, "more bytes)") || len(msg) > 400 {
		t.Errorf("Handle error = %q; want the start of the output, a note of what was cut, and no more", msg)
	}
}

func TestCommandHandlerTimeoutKillsTheProcessGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	script := writeScript(t, dir, "h.sh", `sleep 120 &
echo $! > "$1"
wait
`)
	h := CommandHandler{Argv: []string{"/bin/sh", script, pidFile}, Timeout: 300 * time.Millisecond}
	err := h.Handle(context.Background(), row.Workunit{ID: 1, Name: "slow", ErrorMask: state.ErrCancelled}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Handle of a script outliving its timeout = %v, want an error wrapping DeadlineExceeded", err)
	}
	if got := handlerFailure(err); got != failTimeout {
		t.Errorf("handlerFailure(%v) = %q, want %q", err, got, failTimeout)
	}
	body, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the script's child pid: %v", err)
	}
	pid := strings.TrimSpace(string(body))
	// The kill is asynchronous for the child; give it a generous while.
	deadline := time.Now().Add(20 * time.Second)
	for {
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return // gone, or dead and waiting to be reaped
		}
		if time.Now().After(deadline) {
			t.Fatalf("the script's child %s still runs after the timeout: %s", pid, stat)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
