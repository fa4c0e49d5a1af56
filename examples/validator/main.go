// Command validator is a worked example of a project's own validator: the
// validator daemon with a Checker written for the demo app's output, whose
// lines are "key value" ("bytes 4096", "rounds 1000", "digest 3f…").
// Numeric values agree within a relative tolerance, others must be equal.
// It takes the same flags as cmd/validator, without --checker.
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

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/validator"
)

func main() { validator.Main(demoChecker{tolerance: 1e-9}) }

// demoChecker accepts demo outputs that agree within tolerance.
type demoChecker struct{ tolerance float64 }

// field is one "key value" line.
type field struct{ key, value string }

// Init parses the output's one file; an output that is not "key value"
// lines with a digest is invalid (the instance failed).
func (demoChecker) Init(_ context.Context, r row.Result, files []string) (any, error) {
	if len(files) != 1 {
		return nil, fmt.Errorf("result %d has %d output files, want 1: %w", r.ID, len(files), validator.ErrInvalidOutput)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		return nil, err // transient: retried on a later pass
	}
	var out []field
	digest := false
	for sc := bufio.NewScanner(bytes.NewReader(b)); sc.Scan(); {
		key, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			return nil, fmt.Errorf("result %d: line %q: %w", r.ID, sc.Text(), validator.ErrInvalidOutput)
		}
		digest = digest || key == "digest"
		out = append(out, field{key, value})
	}
	if !digest {
		return nil, fmt.Errorf("result %d: no digest: %w", r.ID, validator.ErrInvalidOutput)
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
