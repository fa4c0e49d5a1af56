package boincapp

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// app returns the built application; a missing one skips the test, or
// fails it under TASKSERVER_REAL_CLIENT=1 (make test, make test-client).
func app(t *testing.T) string {
	p, err := Path()
	if err != nil {
		if os.Getenv("TASKSERVER_REAL_CLIENT") == "1" {
			t.Fatalf("TASKSERVER_REAL_CLIENT=1 but %v", err)
		}
		t.Skipf("BOINC-API demo app not available: %v", err)
	}
	return p
}

// run runs the application standalone (no client: BOINC's library then
// opens the logical names as they are) in a directory holding the inputs,
// plus the extra files, and returns the directory.
func run(t *testing.T, bin, job string, rounds int64, extra map[string]string) (string, error) {
	dir := t.TempDir()
	files := map[string][]byte{InName: Input(job), SharedName: Shared(), ParamsName: Params(job)}
	for name, text := range extra {
		files[name] = []byte(text)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "--rounds", fmt.Sprint(rounds))
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Logf("boinc_demo output: %s", out)
	}
	return dir, err
}

func read(t *testing.T, dir, name string) []byte {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("read the app's %q: %v", name, err)
	}
	return b
}

// TestAppOutputMatchesGoTwin: the C++ application's "out" is what Output
// says, so the real-client test can check assimilated results; its "log"
// is at least LogSize bytes.
func TestAppOutputMatchesGoTwin(t *testing.T) {
	bin := app(t)
	const job, rounds = "twin_job", 300000
	dir, err := run(t, bin, job, rounds, nil)
	if err != nil {
		t.Fatalf("boinc_demo: %v", err)
	}
	want := Output(Input(job), Shared(), Params(job), rounds)
	if got := read(t, dir, OutName); !bytes.Equal(got, want) {
		t.Errorf("out = %q, want %q", got, want)
	}
	if n := len(read(t, dir, LogName)); n < LogSize {
		t.Errorf("log is %d bytes, want at least %d", n, LogSize)
	}
}

// TestAppResumesFromCheckpoint: started with a checkpoint in its
// directory, the application goes on from the checkpoint's round, state
// and count of trickle-ups sent (a checkpoint whose state is wrong shows
// in the digest, so the test sees that the checkpoint was used, not the
// work redone).
func TestAppResumesFromCheckpoint(t *testing.T) {
	bin := app(t)
	const job, rounds, at = "resume_job", 300000, 120000
	in, shared, params := Input(job), Shared(), Params(job)
	good := fmt.Sprintf("round %d state %016x sent 4\n", at, State(in, shared, params, at))
	dir, err := run(t, bin, job, rounds, map[string]string{"checkpoint": good})
	if err != nil {
		t.Fatalf("boinc_demo: %v", err)
	}
	if got, want := read(t, dir, OutName), Output(in, shared, params, rounds); !bytes.Equal(got, want) {
		t.Errorf("resumed from round %d: out = %q, want %q", at, got, want)
	}
	// Standalone, the app sends one trickle-up (it waits for no answer).
	if log, want := read(t, dir, LogName), fmt.Sprintf("started at round %d of %d\ntrickle-ups sent: 5\n", at, rounds); !bytes.HasPrefix(log, []byte(want)) {
		t.Errorf("log starts %q, want %q: resumed at round %d, the fifth trickle-up", log[:60], want, at)
	}

	bad := fmt.Sprintf("round %d state %016x sent 4\n", at, State(in, shared, params, at)+1)
	dir, err = run(t, bin, job, rounds, map[string]string{"checkpoint": bad})
	if err != nil {
		t.Fatalf("boinc_demo: %v", err)
	}
	if got := read(t, dir, OutName); bytes.Equal(got, Output(in, shared, params, rounds)) {
		t.Errorf("a checkpoint with a wrong state gave the right digest: the checkpoint was not read")
	}
}

// TestAppFailsOnFailInput: an "in" starting with FAIL makes the
// application exit with status 3 (the real-client test's failing job).
func TestAppFailsOnFailInput(t *testing.T) {
	bin := app(t)
	_, err := run(t, bin, "fail_job", 10, map[string]string{InName: "FAIL on purpose\n"})
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("boinc_demo on a FAIL input: %v, want exit status 3", err)
	}
}
