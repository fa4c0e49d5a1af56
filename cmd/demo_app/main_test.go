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

func TestDemoApp(t *testing.T) {
	bin := build(t)
	good := demoapp.Input("wu_demo_1")
	cases := []struct {
		name     string
		input    []byte // nil: no input file
		args     []string
		wantCode int
	}{
		{name: "ok", input: good, wantCode: exitOK},
		{name: "fail flag", input: good, args: []string{"--fail"}, wantCode: exitFail},
		{name: "fail marker", input: append([]byte("FAIL"), good...), wantCode: exitFail},
		{name: "no input", wantCode: exitError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if tc.input != nil {
				if err := os.WriteFile(filepath.Join(dir, "in"), tc.input, 0o644); err != nil {
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
			out, outErr := os.ReadFile(filepath.Join(dir, "out"))
			finish, finErr := os.ReadFile(filepath.Join(dir, "boinc_finish_called"))
			if tc.wantCode != exitOK {
				if finErr == nil {
					t.Fatalf("demo_app %v exited %d but wrote boinc_finish_called", tc.args, code)
				}
				return
			}
			if outErr != nil || !bytes.Equal(out, demoapp.Output("wu_demo_1")) {
				t.Fatalf("out = %q, %v; want demoapp.Output = %q", out, outErr, demoapp.Output("wu_demo_1"))
			}
			if finErr != nil || string(finish) != "0\n" {
				t.Fatalf("boinc_finish_called = %q, %v; want \"0\\n\"", finish, finErr)
			}
		})
	}
}
