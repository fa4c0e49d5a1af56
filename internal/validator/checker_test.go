package validator

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/job"
)

// writeFiles writes each content to its own file in a temporary directory
// and returns them as outputs named f0, f1, ...
func writeFiles(t *testing.T, contents ...string) []job.Output {
	t.Helper()
	dir := t.TempDir()
	outs := make([]job.Output, len(contents))
	for i, c := range contents {
		outs[i].Name = "f" + string(rune('0'+i))
		outs[i].Path = filepath.Join(dir, outs[i].Name)
		if err := os.WriteFile(outs[i].Path, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return outs
}

// compareFiles runs c on two outputs, each given as its files' contents.
func compareFiles(t *testing.T, c Checker, a, b []string) (bool, error) {
	t.Helper()
	ctx := context.Background()
	va, err := c.Init(ctx, row.Result{ID: 1, Name: "r_a"}, writeFiles(t, a...))
	if err != nil {
		t.Fatalf("Init(%q): %v", a, err)
	}
	defer c.Cleanup(va)
	vb, err := c.Init(ctx, row.Result{ID: 2, Name: "r_b"}, writeFiles(t, b...))
	if err != nil {
		t.Fatalf("Init(%q): %v", b, err)
	}
	defer c.Cleanup(vb)
	return c.Compare(ctx, va, vb)
}

func TestBitwise(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		a, b []string
		want bool
	}{
		{"equal", []string{"x\n"}, []string{"x\n"}, true},
		{"one byte differs", []string{"x\n"}, []string{"y\n"}, false},
		{"white space matters", []string{"1 2"}, []string{"1  2"}, false},
		{"same bytes split differently across files", []string{"ab", "c"}, []string{"a", "bc"}, false},
		{"two equal files each", []string{"a", "b"}, []string{"a", "b"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got, err := compareFiles(t, Bitwise{}, tt.a, tt.b); err != nil || got != tt.want {
				t.Errorf("Bitwise.Compare(%q, %q) = %v, %v; want %v", tt.a, tt.b, got, err, tt.want)
			}
		})
	}
}

func TestTrustAgreesWithAnything(t *testing.T) {
	t.Parallel()
	if got, err := compareFiles(t, Trust{}, []string{"1"}, []string{"2", "3"}); err != nil || !got {
		t.Errorf("Trust.Compare(1; 2, 3) = %v, %v; want true", got, err)
	}
}

func TestNumericClose(t *testing.T) {
	t.Parallel()
	inf, nan := math.Inf(1), math.NaN()
	tests := []struct {
		name     string
		rel, abs float64
		x, y     float64
		want     bool
	}{
		{"equal", 0, 0, 1.5, 1.5, true},
		{"zero tolerance: exact only", 0, 0, 1, math.Nextafter(1, 2), false},
		{"within relative tolerance", 1e-6, 0, 1, 1 + 5e-7, true},
		{"exactly at relative tolerance", 0.5, 0, 2, 1, true},
		{"just past relative tolerance", 0.5, 0, 2, 0.999, false},
		{"relative to the larger magnitude", 0.5, 0, 1, 2, true},
		{"negative numbers", 1e-6, 0, -1, -1 - 5e-7, true},
		{"opposite signs are far apart", 0.5, 0, 1, -1, false},
		{"zero against tiny: relative tolerance alone never agrees", 1e-6, 0, 0, 1e-300, false},
		{"zero against tiny within absolute tolerance", 1e-6, 1e-12, 0, 1e-13, true},
		{"exactly at absolute tolerance", 0, 0.25, 1, 1.25, true},
		{"just past absolute tolerance", 0, 0.25, 1, math.Nextafter(1.25, 2), false},
		{"positive and negative zero", 0, 0, 0, math.Copysign(0, -1), true},
		{"infinity equals itself", 1e-6, 1, inf, inf, true},
		{"infinities of opposite sign", 1e-6, 1, inf, -inf, false},
		{"infinity against a large number", 1, 1, inf, math.MaxFloat64, false},
		{"NaN agrees with NaN", 0, 0, nan, nan, true},
		{"NaN against a number", 1, 1, nan, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := Numeric{RelTolerance: tt.rel, AbsTolerance: tt.abs}
			if got := n.Close(tt.x, tt.y); got != tt.want {
				t.Errorf("Numeric{rel %g, abs %g}.Close(%g, %g) = %v, want %v", tt.rel, tt.abs, tt.x, tt.y, got, tt.want)
			}
			if got := n.Close(tt.y, tt.x); got != tt.want {
				t.Errorf("Numeric{rel %g, abs %g}.Close(%g, %g) = %v, want %v (symmetric)", tt.rel, tt.abs, tt.y, tt.x, got, tt.want)
			}
		})
	}
}

func TestNumericCompare(t *testing.T) {
	t.Parallel()
	n := Numeric{RelTolerance: 1e-6}
	tests := []struct {
		name string
		a, b []string
		want bool
	}{
		{"same text", []string{"1 2 3\n"}, []string{"1 2 3\n"}, true},
		{"white space does not matter", []string{"1 2\n3"}, []string{" 1\t2 3\n\n"}, true},
		{"last digits differ within tolerance", []string{"0.333333333"}, []string{"0.3333334"}, true},
		{"one number past tolerance", []string{"1 2 3"}, []string{"1 2.1 3"}, false},
		{"notations of one number", []string{"1000 0.5"}, []string{"1e3 5e-1"}, true},
		{"words compared as text", []string{"energy 1.0 J"}, []string{"energy 1.0000001 J"}, true},
		{"a word differs", []string{"energy 1.0 J"}, []string{"energy 1.0 eV"}, false},
		{"word against number", []string{"x 1"}, []string{"1 1"}, false},
		{"more numbers in one", []string{"1 2"}, []string{"1 2 3"}, false},
		{"more files in one", []string{"1"}, []string{"1", ""}, false},
		{"numbers per file must line up", []string{"1 2", "3"}, []string{"1", "2 3"}, false},
		{"out-of-range numbers are infinities", []string{"1e999"}, []string{"2e999"}, true},
		{"nan and inf spelled out", []string{"NaN -Inf"}, []string{"nan -inf"}, true},
		{"empty outputs agree", []string{""}, []string{"\n"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got, err := compareFiles(t, n, tt.a, tt.b); err != nil || got != tt.want {
				t.Errorf("Numeric{rel 1e-6}.Compare(%q, %q) = %v, %v; want %v", tt.a, tt.b, got, err, tt.want)
			}
		})
	}
}

func TestNumericRejectsHugeToken(t *testing.T) {
	t.Parallel()
	paths := writeFiles(t, strings.Repeat("7", maxTokenBytes+1))
	if _, err := (Numeric{}).Init(context.Background(), row.Result{ID: 1}, paths); !errors.Is(err, ErrInvalidOutput) {
		t.Errorf("Numeric.Init(a token of %d bytes) = %v, want ErrInvalidOutput", maxTokenBytes+1, err)
	}
}

func TestNumericCheck(t *testing.T) {
	t.Parallel()
	for _, n := range []Numeric{{RelTolerance: -1}, {AbsTolerance: -1}, {RelTolerance: math.NaN()}} {
		if err := n.Check(); err == nil {
			t.Errorf("Numeric%+v.Check() = nil, want an error", n)
		}
	}
	if err := (Numeric{RelTolerance: 1e-6}).Check(); err != nil {
		t.Errorf("Numeric{rel 1e-6}.Check() = %v, want nil", err)
	}
}

// sh is argv running script with /bin/sh; the checker's arguments follow
// as $1, $2, ...
func sh(script string) []string { return []string{"/bin/sh", "-c", script, "sh"} }

func TestCommandCompareExitCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		argv    []string
		timeout time.Duration
		a, b    []string
		want    bool
		wantErr bool
	}{
		{"exit 0: agree", sh("exit 0"), 0, []string{"x"}, []string{"y"}, true, false},
		{"exit 1: disagree", sh("exit 1"), 0, []string{"x"}, []string{"x"}, false, false},
		{"exit 2: transient", sh("exit 2"), 0, []string{"x"}, []string{"x"}, false, true},
		{"killed by a signal: transient", sh("kill -9 $$"), 0, []string{"x"}, []string{"x"}, false, true},
		{"program not found: transient", []string{"/nonexistent/compare"}, 0, []string{"x"}, []string{"x"}, false, true},
		{"runs past its timeout: killed, transient", sh("sleep 60"), 50 * time.Millisecond, []string{"x"}, []string{"x"}, false, true},
		{"gets A's files then B's", sh(`cmp -s "$1" "$2"`), 0, []string{"same"}, []string{"same"}, true, false},
		{"gets A's files then B's: different", sh(`cmp -s "$1" "$2"`), 0, []string{"same"}, []string{"other"}, false, false},
		{"gets the result names and files per result",
			sh(`[ "$TASKSERVER_RESULT_A" = r_a ] && [ "$TASKSERVER_RESULT_B" = r_b ] && [ "$TASKSERVER_FILES_PER_RESULT" = 2 ] && [ $# = 4 ]`),
			0, []string{"1", "2"}, []string{"3", "4"}, true, false},
		{"different file counts disagree without running", sh("exit 2"), 0, []string{"x"}, []string{"x", "y"}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := Command{CompareArgv: tt.argv, Timeout: tt.timeout}
			got, err := compareFiles(t, c, tt.a, tt.b)
			if got != tt.want || (err != nil) != tt.wantErr || errors.Is(err, ErrInvalidOutput) {
				t.Errorf("Command{%q}.Compare = %v, %v; want %v, error %v (never ErrInvalidOutput)", tt.argv, got, err,
					tt.want, tt.wantErr)
			}
		})
	}
}

func TestCommandInitExitCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		argv        []string
		wantInvalid bool
		wantErr     bool
	}{
		{"no init program: accepted", nil, false, false},
		{"exit 0: accepted", sh(`[ -s "$1" ] && [ "$TASKSERVER_RESULT_NAME" = r_1 ] && [ "$TASKSERVER_RESULT_ID" = 1 ]`), false, false},
		{"exit 1: invalid output", sh("exit 1"), true, true},
		{"exit 3: transient", sh("exit 3"), false, true},
		{"program not found: transient", []string{"/nonexistent/init"}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := Command{InitArgv: tt.argv, CompareArgv: sh("exit 0")}
			v, err := c.Init(context.Background(), row.Result{ID: 1, Name: "r_1"}, writeFiles(t, "out"))
			if (err != nil) != tt.wantErr || errors.Is(err, ErrInvalidOutput) != tt.wantInvalid {
				t.Errorf("Command{init %q}.Init = %v, %v; want error %v, ErrInvalidOutput %v", tt.argv, v, err,
					tt.wantErr, tt.wantInvalid)
			}
			if err == nil {
				c.Cleanup(v)
			}
		})
	}
}

func TestCommandCheck(t *testing.T) {
	t.Parallel()
	for _, c := range []Command{{}, {CompareArgv: []string{""}}, {CompareArgv: []string{"x"}, Timeout: -1}} {
		if err := c.Check(); err == nil {
			t.Errorf("Command%+v.Check() = nil, want an error", c)
		}
	}
}
