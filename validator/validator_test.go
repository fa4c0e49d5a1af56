package validator_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/job"
	"github.com/taskserver/taskserver/jobtest"
	"github.com/taskserver/taskserver/validator"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// resultChecker compares only the output named "result", found by its
// logical name, and records the names of every output it is handed.
type resultChecker struct{ seen chan []string }

func (c resultChecker) Init(_ context.Context, in job.Instance) (any, error) {
	names := make([]string, len(in.Outputs))
	for i, o := range in.Outputs {
		names[i] = o.Name
	}
	c.seen <- names
	o, ok := in.Output("result")
	if !ok {
		return nil, fmt.Errorf("instance %s has no output \"result\": %w", in.Name, validator.ErrInvalidOutput)
	}
	return os.ReadFile(o.Path)
}

func (resultChecker) Compare(_ context.Context, a, b any) (bool, error) {
	return string(a.([]byte)) == string(b.([]byte)), nil
}

func (resultChecker) Cleanup(any) {}

// TestCheckerSeesOutputsByLogicalName: a project's checker gets every
// output of an instance under its logical name, and two instances that do
// not have the same outputs disagree even where the checker, looking at one
// output, would say they agree.
func TestCheckerSeesOutputsByLogicalName(t *testing.T) {
	t.Parallel()
	p := jobtest.New(t, "science")
	p.AddJobToValidateFiles("same", 2, jobtest.Files{"result": "42", "log": "a"}, jobtest.Files{"result": "42", "log": "a"})
	p.AddJobToValidateFiles("differ", 2, jobtest.Files{"result": "42", "log": "a"}, jobtest.Files{"result": "43", "log": "a"})
	p.AddJobToValidateFiles("more", 2, jobtest.Files{"result": "42", "log": "a"}, jobtest.Files{"result": "42"})
	ch := resultChecker{seen: make(chan []string, 16)}
	err := validator.Run(context.Background(), p.Args("validator"), validator.Program{
		NewChecker: func(job.Env) (validator.Checker, error) { return ch, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	close(ch.seen)
	n := 0
	for names := range ch.seen {
		n++
		if len(names) == 2 && (names[0] != "log" || names[1] != "result") {
			t.Errorf("checker got outputs %q, want [log result] in the file list's order", names)
		}
	}
	if n != 6 {
		t.Errorf("checker initialised %d outputs, want 6", n)
	}
	for inst, want := range map[string]string{"same_0": "valid", "same_1": "valid", "differ_0": "inconclusive",
		"differ_1": "inconclusive", "more_0": "inconclusive", "more_1": "inconclusive"} {
		if got := p.Verdict(inst); got != want {
			t.Errorf("%s = %s, want %s", inst, got, want)
		}
	}
}
