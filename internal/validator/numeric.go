package validator

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/job"
)

// Numeric is the Checker of an app whose outputs are text with numbers that
// may differ in their last digits between computers (floating-point
// results). Each file is split at white space; two outputs agree when they
// have as many files, each with as many tokens, and every pair of tokens
// agrees: two numbers (as strconv.ParseFloat reads them) within tolerance,
// anything else equal as text. Two numbers x and y are within tolerance when
// they are equal (so infinities agree only with themselves), both NaN, or
// |x−y| ≤ AbsTolerance or |x−y| ≤ RelTolerance × max(|x|, |y|).
type Numeric struct {
	// RelTolerance is the relative tolerance, ≥ 0.
	RelTolerance float64
	// AbsTolerance is the absolute tolerance, ≥ 0; it is what lets a
	// number near zero agree with zero.
	AbsTolerance float64
}

// Check reports a tolerance that is negative or NaN.
func (n Numeric) Check() error {
	var errs []error
	if !(n.RelTolerance >= 0) {
		errs = append(errs, fmt.Errorf("relative tolerance %g: want a number ≥ 0", n.RelTolerance))
	}
	if !(n.AbsTolerance >= 0) {
		errs = append(errs, fmt.Errorf("absolute tolerance %g: want a number ≥ 0", n.AbsTolerance))
	}
	return errors.Join(errs...)
}

// token is one white-space separated word of an output: a number when
// isNum, else text.
type token struct {
	text  string
	num   float64
	isNum bool
}

// numericOutput is one instance's parsed output: its files' tokens.
type numericOutput [][]token

// maxTokenBytes bounds one token; an output with a longer one is invalid
// rather than read into memory whole.
const maxTokenBytes = 1 << 20

// Init reads the files into tokens. A token longer than maxTokenBytes makes
// the output invalid.
func (Numeric) Init(_ context.Context, r row.Result, outputs []job.Output) (any, error) {
	out := make(numericOutput, 0, len(outputs))
	for _, o := range outputs {
		toks, err := readTokens(o.Path)
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("output %s of result %d: a token longer than %d bytes: %w", o.Name, r.ID, maxTokenBytes,
				ErrInvalidOutput)
		}
		if err != nil {
			return nil, fmt.Errorf("read output of result %d: %w", r.ID, err)
		}
		out = append(out, toks)
	}
	return out, nil
}

func readTokens(path string) ([]token, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), maxTokenBytes)
	sc.Split(bufio.ScanWords)
	var toks []token
	for sc.Scan() {
		t := token{text: sc.Text()}
		if v, err := strconv.ParseFloat(t.text, 64); err == nil || errors.Is(err, strconv.ErrRange) {
			// Out of range parses as ±Inf or 0 with ErrRange: still a
			// number, compared as such.
			t.num, t.isNum = v, true
		}
		toks = append(toks, t)
	}
	return toks, sc.Err()
}

// Compare reports whether the outputs agree token by token.
func (n Numeric) Compare(_ context.Context, a, b any) (bool, error) {
	oa, okA := a.(numericOutput)
	ob, okB := b.(numericOutput)
	if !okA || !okB {
		return false, fmt.Errorf("numeric compare: got %T and %T, want numeric output", a, b)
	}
	if len(oa) != len(ob) {
		return false, nil
	}
	for i := range oa {
		if len(oa[i]) != len(ob[i]) {
			return false, nil
		}
		for j, ta := range oa[i] {
			tb := ob[i][j]
			switch {
			case ta.isNum && tb.isNum:
				if !n.Close(ta.num, tb.num) {
					return false, nil
				}
			case ta.isNum || tb.isNum || ta.text != tb.text:
				return false, nil
			}
		}
	}
	return true, nil
}

// Close reports whether x and y are within tolerance.
func (n Numeric) Close(x, y float64) bool {
	switch {
	case x == y:
		return true
	case math.IsNaN(x) || math.IsNaN(y):
		return math.IsNaN(x) && math.IsNaN(y)
	case math.IsInf(x, 0) || math.IsInf(y, 0):
		return false
	}
	d := math.Abs(x - y)
	return d <= n.AbsTolerance || d <= n.RelTolerance*max(math.Abs(x), math.Abs(y))
}

// Cleanup does nothing: the tokens are garbage collected.
func (Numeric) Cleanup(any) {}
