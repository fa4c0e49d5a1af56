package validator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

// Store is what the validator needs from the database.
type Store interface {
	AppGetByName(ctx context.Context, name string) (store.App, error)
	KnownAnswerGet(ctx context.Context, id int64) (store.KnownAnswer, error)
	WorkunitListNeedValidate(ctx context.Context, p store.WorkunitListNeedValidateParams) ([]store.WorkunitResults, error)
	WorkunitValidate(ctx context.Context, p store.WorkunitValidateParams) error
}

// Options configures a Service.
type Options struct {
	// App is the name of the app whose jobs this validator checks.
	App string
	// Checker reads and compares outputs; nil means Bitwise.
	Checker Checker
	// UploadDir and Fanout locate output files (see package fanout).
	UploadDir string
	Fanout    int
	// TempDir holds the short-lived files of known answers' expected
	// outputs; "" means the system's.
	TempDir string
	// Mod and ModIndex select this replica's jobs (id % Mod = ModIndex).
	// Mod 0 means 1.
	Mod, ModIndex int
	// Batch bounds the job ⋈ instance rows read per pass; 0 means 500.
	Batch int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Retry delays after a transient error, per job: the first, doubling up to
// the last.
const (
	retryFirst = 10 * time.Second
	retryMax   = 10 * time.Minute
)

// appRefresh is how long the app row (its credit policy) is used before it
// is read again.
const appRefresh = 30 * time.Second

// maxKnownAnswers bounds the known answers kept in memory; the cache starts
// afresh when it is full.
const maxKnownAnswers = 1000

// Service is the validator of one app.
type Service struct {
	st      Store
	log     *slog.Logger
	m       *Metrics
	opts    Options
	checker Checker

	app     store.App
	appRead time.Time
	// cursor is the id after which the next pass lists jobs.
	cursor int64
	// retry holds the jobs a transient error put off, with when to try
	// again.
	retry map[int64]retryState
	// known caches known answers' expected outputs by id; the rows do not
	// change once written.
	known map[int64][]byte
}

type retryState struct {
	at    time.Time
	delay time.Duration
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
	c := opts.Checker
	if c == nil {
		c = Bitwise{}
	}
	return &Service{st: st, log: log, m: m, opts: opts, checker: c, retry: map[int64]retryState{},
		known: map[int64][]byte{}}
}

// passStats is what one pass did, for its log line.
type passStats struct {
	jobs, valid, invalid, inconclusive, validateErrors, tooLate, conflicts, transient int
	credit                                                                            float64
}

// RunOnce validates one batch of jobs and returns how many it looked at.
// A job that cannot be judged now (a transient error: the upload directory
// is unreachable, a checker's program failed) is left for a later pass,
// after a delay that doubles with each failure, and the others go ahead.
// The pass fails only when every job it looked at failed so, which makes
// the loop back off.
func (s *Service) RunOnce(ctx context.Context) (int, error) {
	now := s.opts.Now()
	app, err := s.loadApp(ctx, now)
	if err != nil {
		return 0, err
	}
	jobs, err := s.list(ctx, app.ID)
	if err != nil {
		return 0, err
	}
	var stats passStats
	var errs []error
	looked := 0
	for _, j := range jobs {
		id := j.Workunit.ID
		if rs, ok := s.retry[id]; ok && now.Before(rs.at) {
			continue
		}
		looked++
		if err := s.validate(ctx, app, j, now.Unix(), &stats); err != nil {
			s.m.transient.Inc()
			stats.transient++
			errs = append(errs, err)
			rs := s.retry[id]
			rs.delay = min(max(rs.delay*2, retryFirst), retryMax)
			rs.at = now.Add(rs.delay)
			s.retry[id] = rs
			s.log.Warn("job left for a later pass", "workunit_id", id, "retry_in", rs.delay, "error", err)
			continue
		}
		delete(s.retry, id)
	}
	for id, rs := range s.retry {
		// A job put off long ago and not seen since was judged elsewhere.
		if now.Sub(rs.at) > time.Hour {
			delete(s.retry, id)
		}
	}
	s.m.retrying.Set(float64(len(s.retry)))
	if stats.jobs > 0 || stats.conflicts > 0 || stats.transient > 0 {
		s.log.Info("validated jobs", "jobs", stats.jobs, "valid", stats.valid, "invalid", stats.invalid,
			"inconclusive", stats.inconclusive, "validate_errors", stats.validateErrors, "too_late", stats.tooLate,
			"credit", stats.credit, "conflicts", stats.conflicts, "transient_errors", stats.transient)
	}
	if looked > 0 && len(errs) == looked {
		return looked, fmt.Errorf("validator: every job of the pass failed: %w", errors.Join(errs...))
	}
	return looked, nil
}

// loadApp returns the app row, read again every appRefresh so that a
// changed credit policy takes effect.
func (s *Service) loadApp(ctx context.Context, now time.Time) (store.App, error) {
	if s.app.ID != 0 && now.Sub(s.appRead) < appRefresh && !now.Before(s.appRead) {
		return s.app, nil
	}
	app, err := s.st.AppGetByName(ctx, s.opts.App)
	if err != nil {
		return store.App{}, fmt.Errorf("validator: %w", err)
	}
	if !KnownCreditPolicy(app.CreditPolicy) {
		s.log.Warn("unknown credit policy; granting by FLOP estimate", "app", app.Name, "credit_policy", app.CreditPolicy)
	}
	s.app, s.appRead = app, now
	return app, nil
}

// list returns the next jobs to validate, going on from where the last
// pass stopped and starting again from the first job once past the last.
func (s *Service) list(ctx context.Context, appID int64) ([]store.WorkunitResults, error) {
	for {
		p := store.WorkunitListNeedValidateParams{AppID: appID, AfterID: s.cursor, Mod: s.opts.Mod,
			ModIndex: s.opts.ModIndex, Limit: s.opts.Batch}
		jobs, err := s.st.WorkunitListNeedValidate(ctx, p)
		if err != nil {
			return nil, err
		}
		rows := 0
		for _, j := range jobs {
			rows += len(j.Results)
		}
		switch {
		case rows >= s.opts.Batch && len(jobs) > 0:
			s.cursor = jobs[len(jobs)-1].Workunit.ID
		case len(jobs) == 0 && s.cursor != 0:
			s.cursor = 0
			continue
		default:
			s.cursor = 0
		}
		return jobs, nil
	}
}

// expected returns a known answer's expected output, cached.
func (s *Service) expected(ctx context.Context, id int64) ([]byte, error) {
	if out, ok := s.known[id]; ok {
		return out, nil
	}
	k, err := s.st.KnownAnswerGet(ctx, id)
	if err != nil {
		return nil, err
	}
	if k.Output == nil {
		k.Output = []byte{}
	}
	if len(s.known) >= maxKnownAnswers {
		clear(s.known)
	}
	s.known[id] = k.Output
	return k.Output, nil
}

// validate judges and writes one job. An error is transient: nothing was
// written.
func (s *Service) validate(ctx context.Context, app store.App, j store.WorkunitResults, now int64, stats *passStats) error {
	wu := j.Workunit
	var expected []byte
	if wu.KnownAnswerID != 0 {
		var err error
		if expected, err = s.expected(ctx, wu.KnownAnswerID); err != nil {
			return fmt.Errorf("validate workunit %d: %w", wu.ID, err)
		}
	}
	v, err := s.judge(ctx, wu, j.Results, expected)
	if err != nil {
		return fmt.Errorf("validate workunit %d: %w", wu.ID, err)
	}

	p := store.WorkunitValidateParams{ID: wu.ID, Now: now, TargetNResults: v.TargetNResults}
	credit := wu.CanonicalCredit
	if v.Canonical != 0 {
		var claims []float64
		for _, r := range j.Results {
			if v.States[r.ID] == state.ValidateValid {
				claims = append(claims, r.ClaimedCredit)
			}
		}
		credit = GrantedCredit(app.CreditPolicy, wu, claims)
		p.CanonicalResultID, p.CanonicalCredit = v.Canonical, credit
	}
	validateError := map[int64]bool{}
	for _, id := range v.ValidateErrors {
		validateError[id] = true
	}
	var local passStats
	for _, r := range j.Results {
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
		case vs == state.ValidateTooLate:
			local.tooLate++
		}
		p.Results = append(p.Results, rv)
	}
	err = s.st.WorkunitValidate(ctx, p)
	if errors.Is(err, store.ErrConflict) {
		s.m.conflicts.Inc()
		stats.conflicts++
		s.log.Debug("job changed while being validated; skipped", "workunit_id", wu.ID)
		return nil
	}
	if err != nil {
		return err
	}
	s.m.jobs.Inc()
	s.m.results.WithLabelValues(outcomeValid).Add(float64(local.valid))
	s.m.results.WithLabelValues(outcomeInvalid).Add(float64(local.invalid))
	s.m.results.WithLabelValues(outcomeInconclusive).Add(float64(local.inconclusive))
	s.m.results.WithLabelValues(outcomeValidateError).Add(float64(local.validateErrors))
	s.m.results.WithLabelValues(outcomeTooLate).Add(float64(local.tooLate))
	s.m.credit.Add(local.credit)
	stats.jobs++
	stats.valid += local.valid
	stats.invalid += local.invalid
	stats.inconclusive += local.inconclusive
	stats.validateErrors += local.validateErrors
	stats.tooLate += local.tooLate
	stats.credit += local.credit
	s.log.Debug("validated job", "workunit_id", wu.ID, "canonical_resultid", v.Canonical,
		"results_judged", len(p.Results), "target_nresults", v.TargetNResults, "credit", credit)
	return nil
}
