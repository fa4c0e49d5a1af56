package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/demoapp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// build compiles the program once per test run into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "demo_app")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestDemoApp runs the built program in a slot directory: it reads every
// input it is given and its command line, and writes both outputs, the
// bytes demoapp says; or fails as asked.
func TestDemoApp(t *testing.T) {
	bin := build(t)
	const job = "wu_demo_1"
	good := demoapp.Input(job)
	three := map[string][]byte{"in": good, "model": demoapp.Model(), "params": demoapp.Params()}
	cases := []struct {
		name     string
		files    map[string][]byte // the slot directory's inputs
		args     []string
		wantCode int
		wantOut  []byte
		wantLog  []byte
	}{
		{name: "one input", files: map[string][]byte{"in": good}, wantCode: exitOK,
			wantOut: demoapp.SingleOutput(job), wantLog: demoapp.Log(demoapp.Files{good}, demoapp.Rounds)},
		{name: "three inputs and a command line", files: three, args: []string{"--rounds", "1000"}, wantCode: exitOK,
			wantOut: demoapp.Output(job), wantLog: demoapp.Log(demoapp.GeneratedFiles(job), demoapp.Rounds)},
		{name: "rounds", files: three, args: []string{"--rounds=7"}, wantCode: exitOK,
			wantOut: demoapp.Out(demoapp.GeneratedFiles(job), 7), wantLog: demoapp.Log(demoapp.GeneratedFiles(job), 7)},
		{name: "bad rounds", files: three, args: []string{"--rounds", "x"}, wantCode: exitError},
		{name: "model without params", files: map[string][]byte{"in": good, "model": demoapp.Model()}, wantCode: exitError},
		{name: "fail flag", files: three, args: []string{"--fail"}, wantCode: exitFail},
		{name: "fail marker", files: map[string][]byte{"in": append([]byte("FAIL"), good...)}, wantCode: exitFail},
		{name: "no input", wantCode: exitError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for name, b := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(bin, tc.args...)
			cmd.Dir = dir
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			var exitErr *exec.ExitError
			if errors.As(err, &exitErr) {
				code = exitErr.ExitCode()
			} else if err != nil {
				t.Fatalf("run demo_app: %v", err)
			}
			if code != tc.wantCode {
				t.Fatalf("demo_app %v exited %d (stderr %q), want %d", tc.args, code, stderr.String(), tc.wantCode)
			}
			finish, finErr := os.ReadFile(filepath.Join(dir, "boinc_finish_called"))
			if tc.wantCode != exitOK {
				if finErr == nil {
					t.Fatalf("demo_app %v exited %d but wrote boinc_finish_called", tc.args, code)
				}
				return
			}
			for name, want := range map[string][]byte{"out": tc.wantOut, "log": tc.wantLog} {
				if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(got, want) {
					t.Errorf("%s = %q, %v; want %q", name, got, err, want)
				}
			}
			if finErr != nil || string(finish) != "0\n" {
				t.Fatalf("boinc_finish_called = %q, %v; want \"0\\n\"", finish, finErr)
			}
		})
	}
}
