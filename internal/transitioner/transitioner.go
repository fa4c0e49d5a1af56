package transitioner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/jobtemplate"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/transition"
)

// DefaultMaxOutputBytes is the upload limit written into new instances'
// output files: 1 MiB.
const DefaultMaxOutputBytes = 1 << 20

// Store is what the transitioner needs from the database.
type Store interface {
	AppList(ctx context.Context) ([]row.App, error)
	JobTemplateGet(ctx context.Context, id int64) (row.JobTemplate, error)
	BatchListProgress(ctx context.Context, p store.BatchListProgressParams) ([]store.BatchProgress, error)
	BatchMarkDone(ctx context.Context, id, now int64) error
	WorkunitAddTailCopy(ctx context.Context, id int64, readTailCopies int, now int64) error
	WorkunitListDue(ctx context.Context, p store.WorkunitListDueParams) ([]store.WorkunitResults, error)
	WorkunitListTail(ctx context.Context, p store.WorkunitListTailParams) ([]store.TailCandidate, error)
	WorkunitTransitionBatch(ctx context.Context, ps []store.WorkunitTransitionParams) ([]error, error)
}

// Defaults of the batch pass.
const (
	// DefaultTailInterval is how often the batch pass runs.
	DefaultTailInterval = time.Minute
	// DefaultTailFraction is the share of a batch's jobs at or below which
	// its remaining jobs are accelerated.
	DefaultTailFraction = 0.05
	// DefaultTailAfter is the fraction of a job's delay_bound an instance
	// must have been out for before the job is accelerated.
	DefaultTailAfter = 0.5
)

// appCacheTTL is how long the apps' policies are used before they are read
// again: a changed policy takes effect within it.
const appCacheTTL = 30 * time.Second

// batchPage bounds the batches read per query of the batch pass.
const batchPage = 100

// Config is the transitioner's configuration; each setting has the rules
// of its flag.
type Config struct {
	// Mod and ModIndex select this replica's jobs: store.Partition(id, Mod) = ModIndex
	// (--mod, --mod-index). Only the replica with ModIndex 0 runs the batch
	// pass.
	Mod, ModIndex int
	// Batch bounds the job ⋈ instance rows read per pass (--batch).
	Batch int
	// MaxOutputBytes bounds each output file of a new instance
	// (--max-output-bytes).
	MaxOutputBytes int64
	// TailInterval is how often the batch pass (batch completion and tail
	// acceleration) runs (--tail-interval).
	TailInterval time.Duration
	// TailFraction: a batch whose unfinished jobs are at most
	// max(1, TailFraction × its jobs) gets tail copies. 0 disables tail
	// acceleration (batches are still marked done) (--tail-fraction).
	TailFraction float64
	// TailAfter is the fraction of a job's delay_bound an instance must have
	// been out for before the job gets a tail copy; 0: any instance out
	// (--tail-after).
	TailAfter float64
}

// Validate returns every problem with c, each naming its flag.
func (c Config) Validate() error {
	errs := config.CheckPartition(c.Mod, c.ModIndex, c.Batch)
	if c.MaxOutputBytes < 1 {
		errs = append(errs, fmt.Errorf("--max-output-bytes %d: want at least 1", c.MaxOutputBytes))
	}
	if c.TailInterval < time.Second {
		errs = append(errs, fmt.Errorf("--tail-interval %v: want at least 1s", c.TailInterval))
	}
	if !(c.TailFraction >= 0 && c.TailFraction <= 1) {
		errs = append(errs, fmt.Errorf("--tail-fraction %v: want 0 to 1", c.TailFraction))
	}
	if !(c.TailAfter >= 0 && c.TailAfter <= 10) {
		errs = append(errs, fmt.Errorf("--tail-after %v: want 0 to 10", c.TailAfter))
	}
	return errors.Join(errs...)
}

// Deps are the transitioner's collaborators.
type Deps struct {
	Store   Store
	Log     *slog.Logger     // nil: discard
	Metrics *Metrics         // nil: registered nowhere
	Now     func() time.Time // nil: time.Now
}

// Service is the transitioner.
type Service struct {
	enumerated int // rows listed since TakeEnumerated
	st         Store
	log        *slog.Logger
	m          *Metrics
	opts       Config
	now        func() time.Time

	// mu serialises RunOnce, which owns the fields below.
	mu       sync.Mutex
	nextTail time.Time
	policies map[int64]transition.Policy
	// policiesRead is when policies was read; zero forces a read.
	policiesRead time.Time
	// outputs are the output templates read so far, by id (rows are
	// never changed, so they are never read again).
	outputs map[int64]jobtemplate.Output
}

// New returns a transitioner.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{st: deps.Store, log: deps.Log, m: deps.Metrics, opts: cfg, now: deps.Now}
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
	transitioned, created, timedOut, failed, held, conflicts int
}

// RunOnce runs the batch pass when it is due (replica 0 only), then
// transitions one batch of due jobs, and returns how many jobs it looked at
// plus how many batch-pass actions it took. A job that fails is left due and
// the others still go ahead; the failures are returned together at the end
// of the pass.
func (s *Service) RunOnce(ctx context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	clock := s.now()
	now := clock.Unix()
	var errs []error
	work := 0
	if s.opts.ModIndex == 0 && !clock.Before(s.nextTail) {
		// Before the due jobs, so the jobs it triggers are transitioned in
		// this same pass.
		n, err := s.batchPass(ctx, now)
		work += n
		if err != nil {
			errs = append(errs, err)
		}
		s.nextTail = clock.Add(s.opts.TailInterval)
	}
	n, err := s.transitionDue(ctx, now)
	if err != nil {
		errs = append(errs, err)
	}
	return work + n, errors.Join(errs...)
}

// transitionDue transitions one batch of due jobs, written in one
// transaction, and returns how many it looked at. The jobs come oldest due
// first, so the first one gives the transition lag without a query of its
// own.
func (s *Service) transitionDue(ctx context.Context, now int64) (int, error) {
	jobs, err := s.st.WorkunitListDue(ctx, store.WorkunitListDueParams{
		Now: now, Mod: s.opts.Mod, ModIndex: s.opts.ModIndex, Limit: s.opts.Batch})
	if err != nil {
		return 0, err
	}
	s.enumerated += len(jobs)
	if len(jobs) == 0 {
		s.m.lag.Set(0)
		return 0, nil
	}
	oldest := jobs[0].Workunit.TransitionTime
	for _, j := range jobs[1:] {
		oldest = min(oldest, j.Workunit.TransitionTime)
	}
	s.m.lag.Set(float64(now - oldest))
	if err := s.readPolicies(ctx, jobs, now); err != nil {
		return 0, err
	}
	var errs []error
	ps := make([]store.WorkunitTransitionParams, 0, len(jobs))
	ds := make([]transition.Decision, 0, len(jobs))
	from := make([]row.Workunit, 0, len(jobs))
	for _, j := range jobs {
		p, d, err := s.decide(ctx, j, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ps = append(ps, p)
		ds = append(ds, d)
		from = append(from, j.Workunit)
	}
	outcomes, err := s.st.WorkunitTransitionBatch(ctx, ps)
	if err != nil {
		return 0, errors.Join(append(errs, err)...)
	}
	var stats passStats
	for i, err := range outcomes {
		switch {
		case errors.Is(err, store.ErrConflict):
			s.m.conflicts.Inc()
			stats.conflicts++
			s.log.Debug("job changed while being transitioned; will retry", "workunit_id", ps[i].ID)
		case err != nil:
			errs = append(errs, err)
		default:
			s.written(from[i], ps[i], ds[i], &stats)
		}
	}
	if stats.transitioned > 0 || stats.conflicts > 0 {
		s.log.Info("transitioned jobs", "jobs", stats.transitioned, "results_created", stats.created,
			"results_timed_out", stats.timedOut, "jobs_failed", stats.failed, "jobs_held", stats.held,
			"conflicts", stats.conflicts)
	}
	return len(jobs), errors.Join(errs...)
}

// readPolicies reads the apps' policies when the cached ones are older than
// appCacheTTL or one of jobs belongs to an app not seen yet.
func (s *Service) readPolicies(ctx context.Context, jobs []store.WorkunitResults, now int64) error {
	fresh := s.policies != nil && now-s.policiesRead.Unix() < int64(appCacheTTL/time.Second)
	if fresh {
		for _, j := range jobs {
			if _, ok := s.policies[j.Workunit.AppID]; !ok {
				fresh = false
				break
			}
		}
	}
	if fresh {
		return nil
	}
	apps, err := s.st.AppList(ctx)
	if err != nil {
		return err
	}
	s.policies = make(map[int64]transition.Policy, len(apps))
	for _, a := range apps {
		s.policies[a.ID] = transition.Policy{HoldFailedJobs: a.HoldFailedJobs}
	}
	s.policiesRead = time.Unix(now, 0)
	return nil
}

// decide applies the state machine to one job and returns the write it
// asks for.
func (s *Service) decide(ctx context.Context, j store.WorkunitResults, now int64) (store.WorkunitTransitionParams, transition.Decision, error) {
	wu := j.Workunit
	// An app missing from the list just read (deleted under its jobs) has
	// the zero policy: its jobs fail rather than hold.
	d := transition.Decide(wu, j.Results, now, s.policies[wu.AppID])
	p := store.WorkunitTransitionParams{
		ID:                 wu.ID,
		ReadTransitionTime: wu.TransitionTime,
		Now:                now,
		NeedValidate:       d.NeedValidate,
		ErrorMask:          d.ErrorMask,
		HoldReason:         d.HoldReason,
		HoldTime:           d.HoldTime,
		AssimilateState:    d.AssimilateState,
		FileDeleteState:    d.FileDeleteState,
		TransitionTime:     d.TransitionTime,
		NoUnsentRead:       true,
	}
	var tmpl jobtemplate.Output
	if len(d.NewResults) > 0 {
		var err error
		if tmpl, err = s.outputTemplate(ctx, wu.OutputTemplateID); err != nil {
			return p, d, fmt.Errorf("transition workunit %d: %w", wu.ID, err)
		}
	}
	for _, nr := range d.NewResults {
		doc, err := jobxml.FormatResult(tmpl.Outputs(nr.Name))
		if err != nil {
			return p, d, fmt.Errorf("transition workunit %d: new instance %q: %w", wu.ID, nr.Name, err)
		}
		p.NewResults = append(p.NewResults, row.Result{
			CreateTime:  now,
			WorkunitID:  wu.ID,
			ServerState: state.ServerUnsent,
			Name:        nr.Name,
			XMLDocIn:    doc,
			Batch:       wu.Batch,
			AppID:       wu.AppID,
			Priority:    nr.Priority,
			Random:      int64(rand.Int32()),
			ModTime:     now,
			SendFlags:   nr.SendFlags,
		})
	}
	fromFDS := make(map[int64]state.FileDeleteState, len(j.Results))
	for _, r := range j.Results {
		fromFDS[r.ID] = r.FileDeleteState
		if r.ServerState == state.ServerUnsent || r.ServerState == state.ServerInactive {
			p.NoUnsentRead = false
		}
	}
	for _, c := range d.Changes {
		p.Changes = append(p.Changes, store.ResultTransition{
			ID:                  c.ID,
			FromServerState:     c.From,
			FromFileDeleteState: fromFDS[c.ID],
			ServerState:         c.ServerState,
			Outcome:             c.Outcome,
			FileDeleteState:     c.FileDeleteState,
		})
	}
	return p, d, nil
}

// written counts and logs a job whose transition p, decided as d from the
// job as read (wu), was written.
func (s *Service) written(wu row.Workunit, p store.WorkunitTransitionParams, d transition.Decision, stats *passStats) {
	s.m.jobs.Inc()
	s.m.created.Add(float64(len(p.NewResults)))
	s.m.timedOut.Add(float64(d.TimedOut))
	s.m.addErrors(d.AddedErrors(wu.ErrorMask))
	stats.transitioned++
	stats.created += len(p.NewResults)
	stats.timedOut += d.TimedOut
	if added := d.AddedErrors(wu.ErrorMask); added != 0 {
		stats.failed++
		s.log.Debug("job failed", "workunit_id", wu.ID, "error_mask", added.String())
	}
	if held := d.NewHold(wu.HoldReason); held != 0 {
		s.m.addHeld(held)
		stats.held++
		s.log.Debug("job held", "workunit_id", wu.ID, "hold_reason", held.String())
	}
	s.log.Debug("transitioned job", "workunit_id", wu.ID, "results_created", len(p.NewResults),
		"results_changed", len(p.Changes), "need_validate", d.NeedValidate, "transition_time", d.TransitionTime)
}

// TakeEnumerated returns the rows this daemon's passes listed since the
// last call (daemon.Enumerator).
func (s *Service) TakeEnumerated() int {
	n := s.enumerated
	s.enumerated = 0
	return n
}

// outputTemplate returns output template id: the built-in one, with
// --max-output-bytes as its limit, for 0. A template that cannot be read
// leaves the job for the next pass; one that no longer parses (it was
// checked when stored) is an error for each of its jobs, in the log.
func (s *Service) outputTemplate(ctx context.Context, id int64) (jobtemplate.Output, error) {
	if id == 0 {
		return jobtemplate.DefaultOutput(float64(s.opts.MaxOutputBytes)), nil
	}
	if t, ok := s.outputs[id]; ok {
		return t, nil
	}
	row, err := s.st.JobTemplateGet(ctx, id)
	if err != nil {
		return jobtemplate.Output{}, err
	}
	t, err := jobtemplate.ParseOutput(row.Body)
	if err != nil {
		return jobtemplate.Output{}, fmt.Errorf("output template %d: %w", id, err)
	}
	if s.outputs == nil {
		s.outputs = map[int64]jobtemplate.Output{}
	}
	s.outputs[id] = t
	return t, nil
}
