package main

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/jobtest"
	"github.com/taskserver/taskserver/workgenerator"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestInputIsTheJobsOwn(t *testing.T) {
	t.Parallel()
	m := monteCarlo{samples: 7}
	a1, err1 := m.Input(context.Background(), "mc_1")
	a2, err2 := m.Input(context.Background(), "mc_1")
	b, err3 := m.Input(context.Background(), "mc_2")
	if err1 != nil || err2 != nil || err3 != nil {
		t.Fatalf("Input: %v, %v, %v", err1, err2, err3)
	}
	if string(a1) != string(a2) {
		t.Errorf("one job, two inputs: %q and %q", a1, a2)
	}
	if string(a1) == string(b) {
		t.Errorf("two jobs, one input: %q", a1)
	}
	if !strings.HasPrefix(string(a1), "seed ") || !strings.HasSuffix(string(a1), "\nsamples 7\n") {
		t.Errorf("input %q, want seed and samples lines", a1)
	}
}

// TestOnePass runs the example daemon once over a real database: it makes
// the jobs the backlog lacks, each with its input staged for download.
// Not parallel: urfave/cli's help flag is a package-level variable.
func TestOnePass(t *testing.T) {
	p := jobtest.New(t, "demo")
	args := p.Args("workgenerator", "--unsent-target", "6", "--target-nresults", "2", "--min-quorum", "2",
		"--job-prefix", "mc", "--samples", "500")
	if err := workgenerator.Run(context.Background(), args, program()); err != nil {
		t.Fatalf("workgenerator.Run: %v", err)
	}
	jobs := p.Jobs()
	if len(jobs) != 3 {
		t.Fatalf("jobs after one pass: %q, want 3 (6 instances unsent, 2 per job)", jobs)
	}
	for _, name := range jobs {
		want, _ := monteCarlo{samples: 500}.Input(context.Background(), name)
		if got := p.Input(name); !strings.HasPrefix(name, "mc_") || string(got) != string(want) {
			t.Errorf("job %s has input %.80q, want %q", name, got, want)
		}
	}
}

func TestBadSamplesStopsTheProgram(t *testing.T) {
	p := jobtest.New(t, "demo")
	err := workgenerator.Run(context.Background(), p.Args("workgenerator", "--samples", "0"), program())
	if err == nil || !strings.Contains(err.Error(), "--samples") {
		t.Errorf("workgenerator.Run with --samples 0 = %v, want an error naming --samples", err)
	}
	if jobs := p.Jobs(); len(jobs) != 0 {
		t.Errorf("jobs made by a program that should not start: %q", jobs)
	}
}
