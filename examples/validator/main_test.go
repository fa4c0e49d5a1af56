package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/job"
	"github.com/taskserver/taskserver/jobtest"
	"github.com/taskserver/taskserver/validator"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var checker = demoChecker{tolerance: 1e-9}

// honest is the demo app's correct output of a job.
const honest = "bytes 4096\nrounds 1000\ndigest 42c354797214ccc0812b118bb0cb71acbd12d1a3fe67b7fe38cb7bff3107587e\n"

// initOutput writes contents as the output files of one instance and
// initialises it.
func initOutput(t *testing.T, contents ...string) (any, error) {
	t.Helper()
	in := job.Instance{ID: 1, Name: "job_0"}
	for i, c := range contents {
		p := filepath.Join(t.TempDir(), "out"+strconv.Itoa(i))
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		in.Outputs = append(in.Outputs, job.Output{Name: "out", Path: p})
	}
	return checker.Init(context.Background(), in)
}

func TestDemoCheckerCompare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		a, b string
		want bool
	}{
		{"the correct output agrees with itself", honest, honest, true},
		{"a forged digest", honest, strings.Replace(honest, "digest ", "digest 0", 1), false},
		{"a number written differently", honest, strings.Replace(honest, "rounds 1000", "rounds 1000.0", 1), true},
		{"a number within tolerance", "bytes 4096\ndigest ab\n", "bytes 4096.000000001\ndigest ab\n", true},
		{"a number past tolerance", "bytes 4096\ndigest ab\n", "bytes 4097\ndigest ab\n", false},
		{"a digest that reads as a number is still exact", "digest 1e5\n", "digest 100000\n", false},
		{"keys in another order", "bytes 1\ndigest ab\n", "digest ab\nbytes 1\n", false},
		{"a line more", "digest ab\n", "digest ab\nnote x\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, errA := initOutput(t, tt.a)
			b, errB := initOutput(t, tt.b)
			if errA != nil || errB != nil {
				t.Fatalf("Init: %v, %v", errA, errB)
			}
			defer checker.Cleanup(a)
			defer checker.Cleanup(b)
			if got, err := checker.Compare(context.Background(), a, b); err != nil || got != tt.want {
				t.Errorf("Compare(%q, %q) = %v, %v; want %v", tt.a, tt.b, got, err, tt.want)
			}
		})
	}
}

func TestDemoCheckerRejectsMalformedOutput(t *testing.T) {
	t.Parallel()
	for _, files := range [][]string{
		{"bytes 4096\nrounds 1000\n"}, // no digest
		{"digest\n"},                  // a line without a value
	} {
		if _, err := initOutput(t, files...); !errors.Is(err, validator.ErrInvalidOutput) {
			t.Errorf("Init(%q) = %v, want ErrInvalidOutput", files, err)
		}
	}
	// The checker finds its output by its logical name.
	in := job.Instance{ID: 1, Name: "job_0", Outputs: []job.Output{{Name: "log", Path: "/nonexistent"}}}
	if _, err := checker.Init(context.Background(), in); !errors.Is(err, validator.ErrInvalidOutput) {
		t.Errorf("Init(no output \"out\") = %v, want ErrInvalidOutput", err)
	}
}

// TestOnePassWithTheDemoChecker runs the example's validator as main does,
// for one pass over a real database: an output that agrees without being
// bitwise equal is valid, a forged one invalid, an unreadable one a
// validate error. It runs a cli app, so it is not parallel.
func TestOnePassWithTheDemoChecker(t *testing.T) {
	p := jobtest.New(t, "demo")
	p.AddJobToValidate("job", 2,
		honest,
		strings.Replace(honest, "rounds 1000", "rounds 1000.0", 1), // agrees, not bitwise
		strings.Replace(honest, "digest ", "digest 0", 1),          // a cheater
		"garbage", // not the demo app's output
	)
	if err := validator.Run(context.Background(), p.Args("validator"), program()); err != nil {
		t.Fatalf("validator.Run: %v", err)
	}
	if got := p.Canonical("job"); got != "job_0" {
		t.Errorf("canonical instance %q, want job_0", got)
	}
	for name, want := range map[string]string{"job_0": "valid", "job_1": "valid", "job_2": "invalid", "job_3": "invalid"} {
		if got := p.Verdict(name); got != want {
			t.Errorf("%s is %s, want %s", name, got, want)
		}
	}
}

// TestToleranceFlag checks that the example's own flag reaches its
// checker: with --tolerance 0, the number written differently disagrees.
func TestToleranceFlag(t *testing.T) {
	p := jobtest.New(t, "demo")
	p.AddJobToValidate("job", 2, honest, strings.Replace(honest, "rounds 1000", "rounds 1000.5", 1))
	if err := validator.Run(context.Background(), p.Args("validator", "--tolerance", "0"), program()); err != nil {
		t.Fatalf("validator.Run: %v", err)
	}
	if got := p.Canonical("job"); got != "" {
		t.Errorf("canonical instance %q with --tolerance 0, want none", got)
	}
	err := validator.Run(context.Background(), p.Args("validator", "--tolerance", "x"), program())
	if err == nil || !strings.Contains(err.Error(), "--tolerance") {
		t.Errorf("validator.Run with --tolerance x = %v, want an error naming --tolerance", err)
	}
}
