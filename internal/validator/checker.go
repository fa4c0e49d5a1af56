package validator

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/job"
)

// ErrInvalidOutput marks an output a Checker rejects: the instance's output
// is bad, so the instance gets outcome VALIDATE_ERROR and validate_state
// INVALID. Wrap it (fmt.Errorf("...: %w", ErrInvalidOutput)); any other
// error from a Checker is taken as transient and the job is retried on a
// later pass.
var ErrInvalidOutput = errors.New("invalid output")

// Checker is the science-specific part of the validator: how an instance's
// output is read and when two outputs agree. The validator calls Init once
// for each output it needs in a pass, Compare on pairs of initialised
// outputs, and Cleanup on every value Init returned, whatever happened in
// between. Calls for one job come from one goroutine, but several jobs are
// judged at once (Config.Workers): a Checker must be safe for concurrent
// use across jobs. The built-in checkers get instances with the columns the
// validator reads for itself (id, name, file list and the like); any other
// Checker gets every column.
type Checker interface {
	// Init reads one result's output files and returns its parsed form.
	// outputs are the files to compare, in the result's file order, each
	// by its logical name (open name) and path: not those the template
	// marks no_validate, nor an optional one the result does not have. A
	// known answer's expected output is one output without a name. An error wrapping
	// ErrInvalidOutput means the output is bad (result invalid / validate
	// error); any other error is transient (job retried on a later pass,
	// metric counted).
	Init(ctx context.Context, r row.Result, outputs []job.Output) (any, error)
	// Compare says whether two initialised outputs agree. It should be
	// symmetric; an error is transient.
	Compare(ctx context.Context, a, b any) (bool, error)
	// Cleanup releases what Init returned.
	Cleanup(any)
}

// Digest identifies an instance's output for Bitwise: equal digests mean
// bitwise equal output files.
type Digest [32]byte

// Bitwise is the default Checker: outputs agree when their files are equal
// byte for byte. Init reads each file once into a SHA-256 digest, so a
// comparison costs nothing however many instances a quorum has.
type Bitwise struct{}

// Init digests the files in order, with each file's length after it so
// that (ab, c) and (a, bc) differ. The names are not digested: the
// validator compares which outputs two results have before it compares
// their digests, and a known answer's expected output has none.
func (Bitwise) Init(_ context.Context, r row.Result, outputs []job.Output) (any, error) {
	h := sha256.New()
	var n [8]byte
	for _, o := range outputs {
		f, err := os.Open(o.Path)
		if err != nil {
			return nil, fmt.Errorf("read output of result %d: %w", r.ID, err)
		}
		size, err := io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read output of result %d: %w", r.ID, err)
		}
		binary.BigEndian.PutUint64(n[:], uint64(size))
		h.Write(n[:])
	}
	var d Digest
	h.Sum(d[:0])
	return d, nil
}

// Compare reports whether the digests are equal.
func (Bitwise) Compare(_ context.Context, a, b any) (bool, error) {
	da, okA := a.(Digest)
	db, okB := b.(Digest)
	if !okA || !okB {
		return false, fmt.Errorf("bitwise compare: got %T and %T, want Digest", a, b)
	}
	return da == db, nil
}

// Cleanup does nothing: a digest holds no resources.
func (Bitwise) Cleanup(any) {}

// Trust is the Checker of an app whose outputs cannot be compared (or need
// not be): every output that is there is valid, and any two agree, so the
// first instances reported make the quorum.
type Trust struct{}

// Init accepts any output whose files exist and are finished (the validator checks that
// before calling Init).
func (Trust) Init(context.Context, row.Result, []job.Output) (any, error) { return struct{}{}, nil }

// Compare says yes.
func (Trust) Compare(context.Context, any, any) (bool, error) { return true, nil }

// Cleanup does nothing.
func (Trust) Cleanup(any) {}
