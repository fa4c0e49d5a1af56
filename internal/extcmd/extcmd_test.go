package extcmd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		script   string
		args     []string
		env      []string
		timeout  time.Duration
		wantCode int
		wantOut  string
		wantErr  error
	}{
		{"exit 0 with output", `echo "out $1"; echo err >&2`, []string{"a"}, nil, 0, 0, "out a\nerr\n", nil},
		{"exit status kept", `exit 3`, nil, nil, 0, 3, "", nil},
		{"environment added", `echo "$EXTCMD_TEST"`, nil, []string{"EXTCMD_TEST=v"}, 0, 0, "v\n", nil},
		{"timeout kills the group", `sleep 30 & sleep 30; echo never`, nil, nil, 200 * time.Millisecond, -1, "", context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			script := filepath.Join(t.TempDir(), "s.sh")
			if err := os.WriteFile(script, []byte("#!/bin/sh\n"+tc.script+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			// Through /bin/sh, not exec of the script itself: a parallel
			// test's fork can briefly hold the script's write descriptor,
			// and exec of a file open for writing fails (text file busy).
			res, err := Run(context.Background(), Spec{Argv: []string{"/bin/sh", script}, Args: tc.args, Env: tc.env, Timeout: tc.timeout})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Run = %+v, %v; want error %v", res, err, tc.wantErr)
				}
				return
			}
			if err != nil || res.ExitCode != tc.wantCode || res.Output != tc.wantOut {
				t.Fatalf("Run = %+v, %v; want exit %d output %q", res, err, tc.wantCode, tc.wantOut)
			}
		})
	}
}

func TestRunRefusesNoProgram(t *testing.T) {
	t.Parallel()
	if _, err := Run(context.Background(), Spec{}); !errors.Is(err, ErrNoProgram) {
		t.Fatalf("Run(no program) = %v, want ErrNoProgram", err)
	}
	if _, err := Run(context.Background(), Spec{Argv: []string{"/nonexistent/program"}}); err == nil ||
		!strings.Contains(err.Error(), "no such file") {
		t.Fatalf("Run(missing program) = %v, want a start error", err)
	}
}

func TestCappedBuffer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		max     int
		writes  []string
		want    string
		wantLen int
	}{
		{"under the bound", 10, []string{"ab", "cd"}, "abcd", 4},
		{"exactly the bound", 4, []string{"abcd"}, "abcd", 4},
		{"over the bound in one write", 3, []string{"abcdef"}, "abc... (3 more bytes)", 6},
		{"over the bound across writes", 3, []string{"ab", "cd", "ef"}, "abc... (3 more bytes)", 6},
		{"nothing written", 3, nil, "", 0},
	} {
		b := &cappedBuffer{max: tc.max}
		for _, w := range tc.writes {
			if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
				t.Errorf("%s: Write(%q) = %d, %v; want %d, nil", tc.name, w, n, err, len(w))
			}
		}
		if got := b.String(); got != tc.want || b.Len() != tc.wantLen {
			t.Errorf("%s: String() = %q, Len() = %d; want %q, %d", tc.name, got, b.Len(), tc.want, tc.wantLen)
		}
	}
}
