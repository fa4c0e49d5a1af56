package validator

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

// Store is what the validator needs from the database.
type Store interface {
	AppGetByName(ctx context.Context, name string) (store.App, error)
	WorkunitListNeedValidate(ctx context.Context, p store.WorkunitListNeedValidateParams) ([]store.WorkunitResults, error)
	WorkunitValidate(ctx context.Context, p store.WorkunitValidateParams) error
}

// Options configures a Service.
type Options struct {
	// App is the name of the app whose jobs this validator checks.
	App string
	// UploadDir and Fanout locate output files (see package fanout).
	UploadDir string
	Fanout    int
	// Mod and ModIndex select this replica's jobs (id % Mod = ModIndex).
	// Mod 0 means 1.
	Mod, ModIndex int
	// Batch bounds the job ⋈ instance rows read per pass; 0 means 500.
	Batch int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Service is the validator of one app.
type Service struct {
	st    Store
	log   *slog.Logger
	m     *Metrics
	opts  Options
	appID int64
}

// New returns a validator working through st.
func New(st Store, log *slog.Logger, m *Metrics, opts Options) *Service {
	if opts.Mod <= 0 {
		opts.Mod = 1
	}
	if opts.Batch <= 0 {
		opts.Batch = 500
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Service{st: st, log: log, m: m, opts: opts}
}

// passStats is what one pass did, for its log line.
type passStats struct {
	jobs, valid, invalid, inconclusive, validateErrors, conflicts int
	credit                                                        float64
}

// RunOnce validates one batch of jobs and returns how many it looked at. A
// job whose outputs cannot be read for a reason other than their absence
// (the upload directory is unreachable, say) is left for a later pass and
// the others go ahead; the failures are returned together.
func (s *Service) RunOnce(ctx context.Context) (int, error) {
	if s.appID == 0 {
		app, err := s.st.AppGetByName(ctx, s.opts.App)
		if err != nil {
			return 0, fmt.Errorf("validator: %w", err)
		}
		s.appID = app.ID
	}
	jobs, err := s.st.WorkunitListNeedValidate(ctx, store.WorkunitListNeedValidateParams{
		AppID: s.appID, Mod: s.opts.Mod, ModIndex: s.opts.ModIndex, Limit: s.opts.Batch})
	if err != nil {
		return 0, err
	}
	now := s.opts.Now().Unix()
	var stats passStats
	var errs []error
	for _, j := range jobs {
		if err := s.validate(ctx, j, now, &stats); err != nil {
			s.m.errors.Inc()
			errs = append(errs, err)
		}
	}
	if stats.jobs > 0 || stats.conflicts > 0 {
		s.log.Info("validated jobs", "jobs", stats.jobs, "valid", stats.valid, "invalid", stats.invalid,
			"inconclusive", stats.inconclusive, "validate_errors", stats.validateErrors,
			"credit", stats.credit, "conflicts", stats.conflicts)
	}
	return len(jobs), errors.Join(errs...)
}

// validate judges and writes one job.
func (s *Service) validate(ctx context.Context, j store.WorkunitResults, now int64, stats *passStats) error {
	wu := j.Workunit
	candidates := Candidates(wu, j.Results)
	outputs := make(map[int64]Output, len(candidates))
	for _, r := range candidates {
		out, err := s.readOutput(r)
		if err != nil {
			return fmt.Errorf("validate workunit %d: %w", wu.ID, err)
		}
		outputs[r.ID] = out
	}

	var v Verdict
	if wu.CanonicalResultID == 0 {
		v = Quorum(wu, candidates, outputs)
	} else {
		canon := Output{Missing: true}
		for _, r := range j.Results {
			if r.ID == wu.CanonicalResultID {
				var err error
				if canon, err = s.readOutput(r); err != nil {
					return fmt.Errorf("validate workunit %d: canonical: %w", wu.ID, err)
				}
			}
		}
		switch {
		case !canon.Missing:
			v = AgainstCanonical(canon.Digest, candidates, outputs)
		case wu.FileDeleteState == state.FileDeleteInit:
			// The canonical output should still be there: a file system that
			// is not all there must not turn good results into bad ones.
			return fmt.Errorf("validate workunit %d: output of canonical result %d is missing", wu.ID, wu.CanonicalResultID)
		default:
			// The job's files are deleted: nothing to compare with.
			v = Verdict{States: map[int64]state.ValidateState{}}
			for _, r := range candidates {
				v.States[r.ID] = state.ValidateTooLate
			}
		}
	}

	credit := Credit(wu.RscFpopsEst)
	p := store.WorkunitValidateParams{ID: wu.ID, Now: now, TargetNResults: v.TargetNResults}
	if v.Canonical != 0 {
		p.CanonicalResultID, p.CanonicalCredit = v.Canonical, credit
	}
	validateError := map[int64]bool{}
	for _, id := range v.ValidateErrors {
		validateError[id] = true
	}
	var local passStats
	for _, r := range candidates {
		vs, ok := v.States[r.ID]
		if !ok || vs == r.ValidateState {
			continue
		}
		rv := store.ResultValidation{ID: r.ID, UserID: r.UserID, HostID: r.HostID, ValidateState: vs,
			Outcome: state.OutcomeSuccess}
		switch {
		case validateError[r.ID]:
			rv.Outcome = state.OutcomeValidateError
			local.validateErrors++
		case vs == state.ValidateValid:
			rv.GrantedCredit = credit
			local.valid++
			local.credit += credit
		case vs == state.ValidateInvalid:
			local.invalid++
		case vs == state.ValidateInconclusive:
			local.inconclusive++
		}
		p.Results = append(p.Results, rv)
	}
	err := s.st.WorkunitValidate(ctx, p)
	if errors.Is(err, store.ErrConflict) {
		s.m.conflicts.Inc()
		stats.conflicts++
		s.log.Debug("job changed while being validated; skipped", "workunit_id", wu.ID)
		return nil
	}
	if err != nil {
		return err
	}
	tooLate := len(p.Results) - local.valid - local.invalid - local.inconclusive - local.validateErrors
	s.m.jobs.Inc()
	s.m.results.WithLabelValues(outcomeValid).Add(float64(local.valid))
	s.m.results.WithLabelValues(outcomeInvalid).Add(float64(local.invalid))
	s.m.results.WithLabelValues(outcomeInconclusive).Add(float64(local.inconclusive))
	s.m.results.WithLabelValues(outcomeValidateError).Add(float64(local.validateErrors))
	s.m.results.WithLabelValues(outcomeTooLate).Add(float64(tooLate))
	s.m.credit.Add(local.credit)
	stats.jobs++
	stats.valid += local.valid
	stats.invalid += local.invalid
	stats.inconclusive += local.inconclusive
	stats.validateErrors += local.validateErrors
	stats.credit += local.credit
	s.log.Debug("validated job", "workunit_id", wu.ID, "canonical_resultid", v.Canonical,
		"results_judged", len(p.Results), "target_nresults", v.TargetNResults)
	return nil
}

// readOutput digests the output files of instance r. An output that is not
// there, or that r's file list names unusably, is Missing: the instance
// failed. Any other read error is returned: it says nothing about the
// instance.
func (s *Service) readOutput(r store.Result) (Output, error) {
	files, err := jobxml.ParseResult(r.XMLDocIn)
	if err != nil {
		return Output{Missing: true}, nil
	}
	h := sha256.New()
	var n [8]byte
	for _, f := range files {
		path, err := fanout.Path(s.opts.UploadDir, f.Name, s.opts.Fanout)
		if err != nil {
			return Output{Missing: true}, nil
		}
		fh, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			return Output{Missing: true}, nil
		}
		if err != nil {
			return Output{}, fmt.Errorf("read output of result %d: %w", r.ID, err)
		}
		size, err := io.Copy(h, fh)
		fh.Close()
		if err != nil {
			return Output{}, fmt.Errorf("read output of result %d: %w", r.ID, err)
		}
		// The length after each file keeps (ab, c) and (a, bc) apart.
		binary.BigEndian.PutUint64(n[:], uint64(size))
		h.Write(n[:])
	}
	var out Output
	h.Sum(out.Digest[:0])
	return out, nil
}
