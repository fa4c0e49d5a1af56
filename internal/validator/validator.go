package validator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

// Store is what the validator needs from the database.
type Store interface {
	AppGetByName(ctx context.Context, name string) (row.App, error)
	KnownAnswerGet(ctx context.Context, id int64) (row.KnownAnswer, error)
	ResultListHostGrants(ctx context.Context, hostIDs []int64, perHost int) ([]row.HostGrant, error)
	WorkunitListValidate(ctx context.Context, p store.WorkunitListValidateParams) ([]store.WorkunitResults, error)
	WorkunitValidate(ctx context.Context, p store.WorkunitValidateParams) error
	WorkunitValidateBatch(ctx context.Context, p store.WorkunitValidateBatchParams) ([]int64, error)
}

// Config is the validator's configuration; each setting has the rules of
// its flag.
type Config struct {
	// App is the name of the app whose jobs this validator checks (--app).
	App string
	// UploadDir and Fanout locate output files (--upload-dir, --fanout; see
	// package fanout).
	UploadDir string
	Fanout    int
	// TempDir holds the short-lived files of known answers' expected
	// outputs; "" means the system's (no flag).
	TempDir string
	// Mod and ModIndex select this replica's jobs: store.Partition(id, Mod) = ModIndex
	// (--mod, --mod-index).
	Mod, ModIndex int
	// Batch bounds the job ⋈ instance rows read per pass (--batch). A
	// pass's verdicts are written in one transaction.
	Batch int
	// Workers is how many jobs are judged at once (--workers).
	Workers int
	// DailyResultQuota is the scheduler's daily quota per instance
	// (--daily-result-quota, default DefaultDailyResultQuota; 0: none): a
	// valid result doubles a host's shrunk quota for the version back up
	// to it, never past it (package hostav).
	DailyResultQuota int
}

// DefaultDailyResultQuota is --daily-result-quota's default, the
// scheduler's: what BOINC's make_project writes.
const DefaultDailyResultQuota = 500

// Validate returns every problem with c, each naming its flag.
func (c Config) Validate() error {
	errs := config.CheckPartition(c.Mod, c.ModIndex, c.Batch)
	if c.App == "" {
		errs = append(errs, errAppMissing)
	}
	if c.UploadDir == "" {
		errs = append(errs, fmt.Errorf("--%s is empty", config.FlagUploadDir))
	}
	if err := config.CheckFanout(c.Fanout); err != nil {
		errs = append(errs, err)
	}
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("--%s %d: want at least 1", FlagWorkers, c.Workers))
	}
	if c.DailyResultQuota < 0 {
		errs = append(errs, fmt.Errorf("--%s %d: want 0 (none) or more", FlagDailyResultQuota, c.DailyResultQuota))
	}
	return errors.Join(errs...)
}

// Deps are the validator's collaborators.
type Deps struct {
	Store Store
	// Checker reads and compares outputs; nil means Bitwise.
	Checker Checker
	Log     *slog.Logger     // nil: discard
	Metrics *Metrics         // nil: registered nowhere
	Now     func() time.Time // nil: time.Now
}

// Retry delays after a transient error, per job: the first, doubling up to
// the last.
const (
	retryFirst = 10 * time.Second
	retryMax   = 10 * time.Minute
)

// DefaultWorkers is --workers's default, how many jobs are judged at once: enough to overlap the file reads (and a
// command checker's programs) of a pass.
const DefaultWorkers = 4

// appRefresh is how long the app row (its credit policy) is used before it
// is read again.
const appRefresh = 30 * time.Second

// maxKnownAnswers bounds the known answers kept in memory; the cache starts
// afresh when it is full.
const maxKnownAnswers = 1000

// Service is the validator of one app.
type Service struct {
	enumerated int // rows listed since TakeEnumerated
	st         Store
	log        *slog.Logger
	m          *Metrics
	opts       Config
	checker    Checker
	now        func() time.Time

	app     row.App
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

// New returns a validator.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{st: deps.Store, log: deps.Log, m: deps.Metrics, opts: cfg, checker: deps.Checker, now: deps.Now,
		retry: map[int64]retryState{}, known: map[int64][]byte{}}
	if s.checker == nil {
		s.checker = Bitwise{}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.m == nil {
		s.m = NewMetrics(prometheus.NewRegistry())
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// passStats is what one pass did, for its log line.
type passStats struct {
	jobs, valid, invalid, inconclusive, validateErrors, tooLate, conflicts, transient int
	credit                                                                            float64
}

// add adds o's verdict counts and credit to p.
func (p *passStats) add(o passStats) {
	p.jobs += o.jobs
	p.valid += o.valid
	p.invalid += o.invalid
	p.inconclusive += o.inconclusive
	p.validateErrors += o.validateErrors
	p.tooLate += o.tooLate
	p.credit += o.credit
}

// judgement is what the validator decided for one job of a pass, and what
// became of it.
type judgement struct {
	id int64
	// p is the job's write; local its verdicts, counted once written.
	p     store.WorkunitValidateParams
	local passStats
	// err is a transient error: the job could not be judged or written now.
	err error
	// conflict says the job changed meanwhile and nothing was written.
	conflict bool
}

// RunOnce validates one batch of jobs and returns how many it looked at.
// The jobs are judged concurrently (Config.Workers), then every verdict
// of the pass is written in one transaction. A job that cannot be judged
// now (a transient error: the upload directory is unreachable, a checker's
// program failed) is left for a later pass, after a delay that doubles with
// each failure, and the others go ahead. The pass fails only when every job
// it looked at failed so, which makes the loop back off.
func (s *Service) RunOnce(ctx context.Context) (int, error) {
	now := s.now()
	app, err := s.loadApp(ctx, now)
	if err != nil {
		return 0, err
	}
	jobs, err := s.list(ctx, app.ID)
	if err != nil {
		return 0, err
	}
	s.enumerated += len(jobs)
	var todo []store.WorkunitResults
	for _, j := range jobs {
		if rs, ok := s.retry[j.Workunit.ID]; ok && now.Before(rs.at) {
			continue
		}
		todo = append(todo, j)
	}
	judged := s.judgeAll(ctx, app, todo, now.Unix())
	s.write(ctx, judged, now.Unix())

	var stats passStats
	var errs []error
	for _, jd := range judged {
		switch {
		case jd.err != nil:
			s.m.transient.Inc()
			stats.transient++
			errs = append(errs, jd.err)
			rs := s.retry[jd.id]
			rs.delay = min(max(rs.delay*2, retryFirst), retryMax)
			rs.at = now.Add(rs.delay)
			s.retry[jd.id] = rs
			s.log.Warn("job left for a later pass", "workunit_id", jd.id, "retry_in", rs.delay, "error", jd.err)
			continue
		case jd.conflict:
			stats.conflicts++
		default:
			stats.add(jd.local)
		}
		delete(s.retry, jd.id)
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
	if len(todo) > 0 && len(errs) == len(todo) {
		return len(todo), fmt.Errorf("validator: every job of the pass failed: %w", errors.Join(errs...))
	}
	return len(todo), nil
}

// judgeAll judges jobs on Config.Workers goroutines (a judgement reads
// output files and may run a checker's programs: the waits overlap). The
// known answers' expected outputs are read first, here, since their cache
// is not shared between goroutines.
func (s *Service) judgeAll(ctx context.Context, app row.App, jobs []store.WorkunitResults, now int64) []judgement {
	out := make([]judgement, len(jobs))
	expected := make([][]byte, len(jobs))
	for i, j := range jobs {
		out[i].id = j.Workunit.ID
		if id := j.Workunit.KnownAnswerID; id != 0 {
			var err error
			if expected[i], err = s.expected(ctx, id); err != nil {
				out[i].err = fmt.Errorf("validate workunit %d: %w", j.Workunit.ID, err)
			}
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(s.opts.Workers, len(jobs)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) {
					return
				}
				if out[i].err == nil {
					s.judgeJob(ctx, app, jobs[i], expected[i], now, &out[i])
				}
			}
		})
	}
	wg.Wait()
	return out
}

// hostRecord is how many of a host's newest grants make its record (see
// HostRate): enough that a few odd jobs do not move the median.
const hostRecord = 20

// claims returns the claims of the valid instances among results, with
// their hosts' records when the app's policy grants by claims (the only
// one that reads them).
func (s *Service) claims(ctx context.Context, app row.App, results []row.Result, states map[int64]state.ValidateState) ([]Claim, error) {
	var claims []Claim
	var hosts []int64
	for _, r := range results {
		if states[r.ID] == state.ValidateValid {
			claims = append(claims, Claim{Credit: r.ClaimedCredit})
			hosts = append(hosts, r.HostID)
		}
	}
	if app.CreditPolicy != row.CreditMedian || len(claims) == 0 {
		return claims, nil
	}
	grants, err := s.st.ResultListHostGrants(ctx, hosts, hostRecord)
	if err != nil {
		return nil, err
	}
	byHost := map[int64][]row.HostGrant{}
	for _, g := range grants {
		byHost[g.HostID] = append(byHost[g.HostID], g)
	}
	for i := range claims {
		claims[i].HostRate = HostRate(byHost[hosts[i]])
	}
	return claims, nil
}

// judgeJob judges one job into jd: its write and its verdicts' counts, or
// a transient error.
func (s *Service) judgeJob(ctx context.Context, app row.App, j store.WorkunitResults, expected []byte, now int64, jd *judgement) {
	wu := j.Workunit
	v, err := s.judge(ctx, wu, j.Results, expected)
	if err != nil {
		jd.err = fmt.Errorf("validate workunit %d: %w", wu.ID, err)
		return
	}
	p := store.WorkunitValidateParams{ID: wu.ID, Now: now, TargetNResults: v.TargetNResults,
		DailyResultQuota: s.opts.DailyResultQuota}
	credit := wu.CanonicalCredit
	if v.Canonical != 0 {
		claims, err := s.claims(ctx, app, j.Results, v.States)
		if err != nil {
			jd.err = fmt.Errorf("validate workunit %d: %w", wu.ID, err)
			return
		}
		credit = GrantedCredit(app.CreditPolicy, wu, claims)
		p.CanonicalResultID, p.CanonicalCredit = v.Canonical, credit
	}
	validateError := map[int64]bool{}
	for _, id := range v.ValidateErrors {
		validateError[id] = true
	}
	local := passStats{jobs: 1}
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
	jd.p, jd.local = p, local
}

// write writes the judged jobs of a pass in one transaction and counts
// what was written. A job that changed meanwhile is a conflict and the
// others are written all the same. Should the transaction fail as a whole,
// each job is written on its own, so that a job the batch cannot take
// never holds up the rest: it alone is left for a later pass.
func (s *Service) write(ctx context.Context, judged []judgement, now int64) {
	var batch []store.WorkunitValidateParams
	for _, jd := range judged {
		if jd.err == nil {
			batch = append(batch, jd.p)
		}
	}
	if len(batch) == 0 {
		return
	}
	conflicts, err := s.st.WorkunitValidateBatch(ctx, store.WorkunitValidateBatchParams{Now: now, Jobs: batch,
		DailyResultQuota: s.opts.DailyResultQuota})
	conflicted := map[int64]bool{}
	for _, id := range conflicts {
		conflicted[id] = true
	}
	if err != nil {
		s.log.Warn("writing the pass's verdicts together failed; writing them job by job", "jobs", len(batch),
			"error", err)
	}
	for i := range judged {
		jd := &judged[i]
		if jd.err != nil {
			continue
		}
		if err != nil {
			switch werr := s.st.WorkunitValidate(ctx, jd.p); {
			case errors.Is(werr, store.ErrConflict):
				conflicted[jd.id] = true
			case werr != nil:
				jd.err = werr
				continue
			}
		}
		if conflicted[jd.id] {
			jd.conflict = true
			s.m.conflicts.Inc()
			s.log.Debug("job changed while being validated; skipped", "workunit_id", jd.id)
			continue
		}
		l := jd.local
		s.m.jobs.Inc()
		s.m.results.WithLabelValues(outcomeValid).Add(float64(l.valid))
		s.m.results.WithLabelValues(outcomeInvalid).Add(float64(l.invalid))
		s.m.results.WithLabelValues(outcomeInconclusive).Add(float64(l.inconclusive))
		s.m.results.WithLabelValues(outcomeValidateError).Add(float64(l.validateErrors))
		s.m.results.WithLabelValues(outcomeTooLate).Add(float64(l.tooLate))
		s.m.credit.Add(l.credit)
		s.log.Debug("validated job", "workunit_id", jd.id, "canonical_resultid", jd.p.CanonicalResultID,
			"results_judged", len(jd.p.Results), "target_nresults", jd.p.TargetNResults, "credit", l.credit)
	}
}

// loadApp returns the app row, read again every appRefresh so that a
// changed credit policy takes effect.
func (s *Service) loadApp(ctx context.Context, now time.Time) (row.App, error) {
	if s.app.ID != 0 && now.Sub(s.appRead) < appRefresh && !now.Before(s.appRead) {
		return s.app, nil
	}
	app, err := s.st.AppGetByName(ctx, s.opts.App)
	if err != nil {
		return row.App{}, fmt.Errorf("validator: %w", err)
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
		p := store.WorkunitListValidateParams{AppID: appID, AfterID: s.cursor, Mod: s.opts.Mod,
			ModIndex: s.opts.ModIndex, Limit: s.opts.Batch, AllColumns: !builtin(s.checker)}
		jobs, err := s.st.WorkunitListValidate(ctx, p)
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

// builtin reports whether c is one of the package's checkers, which look
// at no column of an instance but its id and name: the others may look at
// any, so the instances are read whole for them.
func builtin(c Checker) bool {
	switch c.(type) {
	case Bitwise, Trust, Numeric, Command:
		return true
	}
	return false
}

// TakeEnumerated returns the rows this daemon's passes listed since the
// last call (daemon.Enumerator).
func (s *Service) TakeEnumerated() int {
	n := s.enumerated
	s.enumerated = 0
	return n
}
