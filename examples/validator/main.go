// Command validator is a worked example of a project's own validator: the
// validator daemon with a Checker written for the demo app's output, whose
// lines are "key value" ("bytes 4096", "rounds 1000", "digest 3f…").
// Numeric values agree within a relative tolerance (--tolerance, 1e-9),
// others must be equal. It takes the stock validator's flags, without
// --checker and its options:
//
//	go run ./validator --config project.yaml --app demo
package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/taskserver/taskserver/job"
	"github.com/taskserver/taskserver/validator"
)

func main() { validator.Main(program()) }

// program is the daemon: the stock validator with the demo checker.
func program() validator.Program {
	return validator.Program{
		Usage: "validate the demo app's outputs: equal keys, digests exactly, numbers within --tolerance",
		Flags: []job.Flag{{Name: "tolerance", Value: "1e-9", Usage: "relative tolerance of numeric values"}},
		NewChecker: func(env job.Env) (validator.Checker, error) {
			tol, err := strconv.ParseFloat(env.Flags["tolerance"], 64)
			if err != nil || tol < 0 || math.IsNaN(tol) {
				return nil, fmt.Errorf("--tolerance %q: want a number >= 0", env.Flags["tolerance"])
			}
			return demoChecker{tolerance: tol}, nil
		},
	}
}

// demoChecker accepts demo outputs that agree within tolerance.
type demoChecker struct{ tolerance float64 }

// field is one "key value" line.
type field struct{ key, value string }

// Init parses the output "out" (found by its logical name; the job's other
// outputs are not compared); an output that is not "key value"
// lines with a digest is invalid (the instance failed).
func (demoChecker) Init(_ context.Context, in job.Instance) (any, error) {
	file, ok := in.Output("out")
	if !ok && len(in.Outputs) == 1 && in.Outputs[0].Name == "" {
		file = in.Outputs[0] // a known answer's expected output has no name
	} else if !ok {
		return nil, fmt.Errorf("instance %s has no output \"out\": %w", in.Name, validator.ErrInvalidOutput)
	}
	b, err := os.ReadFile(file.Path)
	if err != nil {
		return nil, err // transient: retried on a later pass
	}
	var out []field
	digest := false
	for sc := bufio.NewScanner(bytes.NewReader(b)); sc.Scan(); {
		key, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			return nil, fmt.Errorf("instance %s: line %q: %w", in.Name, sc.Text(), validator.ErrInvalidOutput)
		}
		digest = digest || key == "digest"
		out = append(out, field{key, value})
	}
	if !digest {
		return nil, fmt.Errorf("instance %s: no digest: %w", in.Name, validator.ErrInvalidOutput)
	}
	return out, nil
}

// Compare says whether two outputs have the same keys in the same order
// with values that agree.
func (c demoChecker) Compare(_ context.Context, a, b any) (bool, error) {
	fa, okA := a.([]field)
	fb, okB := b.([]field)
	if !okA || !okB {
		return false, fmt.Errorf("demo compare: got %T and %T", a, b)
	}
	if len(fa) != len(fb) {
		return false, nil
	}
	for i := range fa {
		if fa[i].key != fb[i].key || !c.agree(fa[i].key, fa[i].value, fb[i].value) {
			return false, nil
		}
	}
	return true, nil
}

// agree compares one value: the digest exactly (a hex string may look like
// a number), numbers within tolerance, anything else as text.
func (c demoChecker) agree(key, a, b string) bool {
	if key == "digest" {
		return a == b
	}
	x, errX := strconv.ParseFloat(a, 64)
	y, errY := strconv.ParseFloat(b, 64)
	if errX != nil || errY != nil {
		return a == b
	}
	return math.Abs(x-y) <= c.tolerance*max(math.Abs(x), math.Abs(y))
}

// Cleanup has nothing to release.
func (demoChecker) Cleanup(any) {}
