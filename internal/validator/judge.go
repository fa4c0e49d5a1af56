package validator

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/job"
)

// errMissing marks an output whose file is not there, or that the result's
// file list names unusably: the instance failed to deliver.
var errMissing = errors.New("output missing")

// judge decides one job: wu with all its instances. expected is the known
// answer's output for a known-answer job, nil otherwise. Every output it
// initialises is cleaned up before it returns. An error means the job could
// not be judged now (a transient error) and nothing may be written.
func (s *Service) judge(ctx context.Context, wu row.Workunit, results []row.Result, expected []byte) (Verdict, error) {
	candidates := Candidates(wu, results)
	if len(candidates) == 0 {
		return Verdict{States: map[int64]state.ValidateState{}}, nil
	}
	var inits []any
	defer func() {
		for _, v := range inits {
			s.checker.Cleanup(v)
		}
	}()

	// The reference output, when there is one: a known answer is checked
	// against, always; a canonical instance's output once found. refSet
	// names the reference's outputs, a canonical one's only: a known
	// answer's single output has no name.
	var ref any
	var refSet string
	switch {
	case expected != nil:
		v, err := s.initExpected(ctx, wu, expected)
		if err != nil {
			return Verdict{}, err
		}
		inits = append(inits, v)
		ref = v
	case wu.CanonicalResultID != 0:
		v, set, err := s.initCanonical(ctx, wu, results)
		if errors.Is(err, errMissing) {
			// The job's files are deleted: nothing to compare with.
			v := Verdict{States: map[int64]state.ValidateState{}}
			for _, r := range candidates {
				v.States[r.ID] = state.ValidateTooLate
			}
			return v, nil
		}
		if err != nil {
			return Verdict{}, err
		}
		inits = append(inits, v)
		ref, refSet = v, set
	}

	ids := make([]int64, len(candidates))
	outs := make([]any, len(candidates))
	sets := make([]string, len(candidates))
	unusable := make([]bool, len(candidates))
	for i, r := range candidates {
		ids[i] = r.ID
		v, set, err := s.initResult(ctx, r)
		switch {
		case errors.Is(err, errMissing), errors.Is(err, ErrInvalidOutput):
			unusable[i] = true
			s.log.Debug("unusable output", "workunit_id", wu.ID, "result_id", r.ID, "error", err)
		case err != nil:
			return Verdict{}, fmt.Errorf("workunit %d: %w", wu.ID, err)
		default:
			inits = append(inits, v)
			outs[i], sets[i] = v, set
		}
	}

	if ref == nil {
		v, err := Quorum(wu.MinQuorum, ids, unusable, func(i, j int) (bool, error) {
			if sets[i] != sets[j] {
				return false, nil
			}
			return s.checker.Compare(ctx, outs[i], outs[j])
		})
		if err != nil {
			return Verdict{}, fmt.Errorf("workunit %d: %w", wu.ID, err)
		}
		return v, nil
	}
	v, err := AgainstReference(ids, unusable, func(i int) (bool, error) {
		if expected == nil && refSet != sets[i] {
			return false, nil
		}
		return s.checker.Compare(ctx, ref, outs[i])
	})
	if err != nil {
		return Verdict{}, fmt.Errorf("workunit %d: %w", wu.ID, err)
	}
	if expected != nil && wu.CanonicalResultID == 0 {
		// A known-answer job's first valid instance is its canonical one.
		for _, id := range ids {
			if v.States[id] == state.ValidateValid {
				v.Canonical = id
				break
			}
		}
	}
	return v, nil
}

// initCanonical initialises the output of wu's canonical instance and
// names its outputs (see initResult). It returns errMissing when the job's or the instance's files are deleted,
// and a (transient) error when they should be there and are not: a file
// system that is not all there must not turn good results into bad ones.
func (s *Service) initCanonical(ctx context.Context, wu row.Workunit, results []row.Result) (any, string, error) {
	var canon *row.Result
	for i := range results {
		if results[i].ID == wu.CanonicalResultID {
			canon = &results[i]
		}
	}
	deleted := wu.FileDeleteState != state.FileDeleteInit || (canon != nil && canon.FileDeleteState != state.FileDeleteInit)
	if canon == nil {
		if deleted {
			return nil, "", errMissing
		}
		return nil, "", fmt.Errorf("workunit %d: canonical result %d is not among its results", wu.ID, wu.CanonicalResultID)
	}
	v, set, err := s.initResult(ctx, *canon)
	switch {
	case errors.Is(err, errMissing) && deleted:
		return nil, "", errMissing
	case errors.Is(err, errMissing):
		// Not %w: to the caller this is a transient error, not a deletion.
		return nil, "", fmt.Errorf("workunit %d: output of canonical result %d is missing: %v", wu.ID, canon.ID, err)
	case errors.Is(err, ErrInvalidOutput):
		// Valid once, rejected now: the checker changed. Comparing with
		// something else would be a guess; an operator must look.
		return nil, "", fmt.Errorf("workunit %d: the checker rejects the output of canonical result %d: %v", wu.ID,
			canon.ID, err)
	case err != nil:
		return nil, "", fmt.Errorf("workunit %d: canonical: %w", wu.ID, err)
	}
	return v, set, nil
}

// initExpected initialises a known answer's expected output, written to a
// temporary file for the checker, which reads files. A checker that
// rejects it is a transient error: the known answer is at fault, not the
// instances.
func (s *Service) initExpected(ctx context.Context, wu row.Workunit, expected []byte) (any, error) {
	f, err := os.CreateTemp(s.opts.TempDir, "known-answer-*")
	if err != nil {
		return nil, fmt.Errorf("workunit %d: known answer %d: %w", wu.ID, wu.KnownAnswerID, err)
	}
	path := f.Name()
	defer os.Remove(path)
	_, err = f.Write(expected)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("workunit %d: known answer %d: %w", wu.ID, wu.KnownAnswerID, err)
	}
	r := row.Result{Name: fmt.Sprintf("known_answer_%d", wu.KnownAnswerID), WorkunitID: wu.ID, AppID: wu.AppID}
	v, err := s.checker.Init(ctx, r, []job.Output{{Path: path}})
	if err != nil {
		// Not %w: a rejected known answer must not pass for a rejected
		// instance output.
		return nil, fmt.Errorf("workunit %d: known answer %d: %v", wu.ID, wu.KnownAnswerID, err)
	}
	return v, nil
}

// initResult initialises instance r's output through the checker, and
// returns with it the logical names of the outputs it has (its output set,
// one name per line): two results whose sets differ disagree, whatever the
// checker says. The checker gets the outputs to compare: not those marked
// no_validate, nor an optional one r does not have (no finished upload). initResult returns
// errMissing when a required file is not there, is not a finished upload,
// or r's file list names it unusably; the checker's ErrInvalidOutput as is;
// and any other error for a transient failure.
func (s *Service) initResult(ctx context.Context, r row.Result) (any, string, error) {
	files, err := jobxml.ParseResult(r.XMLDocIn)
	if err != nil {
		return nil, "", fmt.Errorf("result %d file list: %v: %w", r.ID, err, errMissing)
	}
	outs := make([]job.Output, 0, len(files))
	var set strings.Builder
	for _, f := range files {
		path, err := fanout.Path(s.opts.UploadDir, f.Name, s.opts.Fanout)
		if err != nil {
			return nil, "", fmt.Errorf("result %d: %v: %w", r.ID, err, errMissing)
		}
		fi, err := os.Stat(path)
		switch {
		case f.Optional && (errors.Is(err, fs.ErrNotExist) || err == nil && !outputfile.Finished(fi.Mode())):
			// Not written (the scheduler leaves a closed empty file in its
			// place when it records the report): absent from the set,
			// which the other results' sets must match.
			continue
		case errors.Is(err, fs.ErrNotExist):
			return nil, "", fmt.Errorf("result %d: %s: %w", r.ID, f.Name, errMissing)
		case err != nil:
			return nil, "", fmt.Errorf("result %d output: %w", r.ID, err)
		case !outputfile.Finished(fi.Mode()):
			// An upload may still write to it (or it was closed unfinished):
			// what is read now need not be what is there later, so it is
			// no output at all.
			return nil, "", fmt.Errorf("result %d: %s is not a finished upload (mode %v): %w", r.ID, f.Name, fi.Mode(), errMissing)
		}
		if f.NoValidate {
			// There, as a successful result must have it, but not compared.
			continue
		}
		set.WriteString(f.OpenName + "\n")
		outs = append(outs, job.Output{Name: f.OpenName, Path: path})
	}
	v, err := s.checker.Init(ctx, r, outs)
	if errors.Is(err, fs.ErrNotExist) && !errors.Is(err, ErrInvalidOutput) {
		// Gone between the check and the read.
		return nil, "", fmt.Errorf("%v: %w", err, errMissing)
	}
	return v, set.String(), err
}
