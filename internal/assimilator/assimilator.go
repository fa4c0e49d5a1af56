package assimilator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// Store is what the assimilator needs from the database.
type Store interface {
	AppGetByName(ctx context.Context, name string) (row.App, error)
	WorkunitListAssimilateCanonical(ctx context.Context, p store.WorkunitListAssimilateParams) ([]store.WorkunitCanonical, error)
	WorkunitMarkAssimilatedBatch(ctx context.Context, ids []int64, now int64) ([]int64, error)
}

// Config is the assimilator's configuration; each setting has the rules of
// its flag.
type Config struct {
	// App is the name of the app whose jobs this assimilator handles
	// (--app).
	App string
	// Mod and ModIndex select this replica's jobs: store.Partition(id, Mod) = ModIndex
	// (--mod, --mod-index).
	Mod, ModIndex int
	// Batch bounds the jobs tried per pass, and the rows read per query
	// (--batch).
	Batch int
	// ScanPages bounds the queries of one pass; 0 means 10 (no flag). Jobs
	// backing off are skipped in memory, so a pass reads on past them, up
	// to ScanPages × Batch rows, and the next pass goes on from where it
	// stopped: failing jobs at the head of the queue never hold up the rest.
	ScanPages int
}

// Validate returns every problem with c, each naming its flag.
func (c Config) Validate() error {
	errs := config.CheckPartition(c.Mod, c.ModIndex, c.Batch)
	if c.App == "" {
		errs = append(errs, errAppMissing)
	}
	if c.ScanPages < 0 {
		errs = append(errs, fmt.Errorf("scan pages %d: want 0 (the default) or more", c.ScanPages))
	}
	return errors.Join(errs...)
}

// Deps are the assimilator's collaborators.
type Deps struct {
	Store Store
	// Handler is the project's code each finished job is handed to.
	Handler Handler
	Log     *slog.Logger     // nil: discard
	Metrics *Metrics         // nil: registered nowhere
	Now     func() time.Time // nil: time.Now
	// Rand gives the back-off jitter, in [0, 1); nil means math/rand.
	Rand func() float64
}

// Service is the assimilator of one app. Its RunOnce must not be called
// concurrently.
type Service struct {
	enumerated int // rows listed since TakeEnumerated
	st         Store
	h          Handler
	log        *slog.Logger
	m          *Metrics
	opts       Config
	now        func() time.Time
	appID      int64
	retry      *backoff
	// after is where the scan of READY jobs goes on: the last id looked at.
	after int64
}

// New returns an assimilator handing jobs to deps.Handler.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Handler == nil {
		return nil, errors.New("assimilator: no handler")
	}
	if cfg.ScanPages == 0 {
		cfg.ScanPages = 10
	}
	random := deps.Rand
	if random == nil {
		random = rand.Float64
	}
	s := &Service{st: deps.Store, h: deps.Handler, log: deps.Log, m: deps.Metrics, opts: cfg, now: deps.Now,
		retry: newBackoff(random)}
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

// pass tallies one RunOnce.
type pass struct {
	tried    int
	done     map[string]int
	failed   int
	firstErr error
}

// RunOnce tries up to Config.Batch READY jobs and returns how many it
// tried. A job whose handler fails stays READY and is tried again after its
// back-off (RetryMin doubling to RetryMax); meanwhile the scan steps past
// it. Only a failure to read the queue is returned as an error: a failing
// job is counted, logged and retried, and must not slow the loop for the
// others.
func (s *Service) RunOnce(ctx context.Context) (int, error) {
	if s.appID == 0 {
		app, err := s.st.AppGetByName(ctx, s.opts.App)
		if err != nil {
			return 0, fmt.Errorf("assimilator: %w", err)
		}
		s.appID = app.ID
	}
	p := pass{done: map[string]int{}}
	err := s.scan(ctx, &p)
	s.m.backingOff.Set(float64(s.retry.len()))
	if p.failed > 0 {
		s.log.Warn("jobs failed to assimilate; they stay ready and are retried", "failed", p.failed,
			"backing_off", s.retry.len(), "error", p.firstErr)
	}
	if p.tried > p.failed {
		s.log.Info("assimilated jobs", "success", p.done[kindSuccess], "error", p.done[kindError],
			"known_answer", p.done[kindKnownAnswer], "failed", p.failed)
	}
	return p.tried, err
}

// scan walks the READY jobs from s.after, trying those not backing off,
// until it has tried Batch jobs, read ScanPages pages, or gone round once.
// The jobs of each page are handed on one by one, then a Flusher handler
// makes them durable, then those handled are marked DONE together.
func (s *Service) scan(ctx context.Context, p *pass) error {
	startedAtHead := s.after == 0
	wrapped := false
	for range s.opts.ScanPages {
		jobs, err := s.st.WorkunitListAssimilateCanonical(ctx, store.WorkunitListAssimilateParams{AppID: s.appID,
			Mod: s.opts.Mod, ModIndex: s.opts.ModIndex, AfterID: s.after, Limit: s.opts.Batch})
		if err != nil {
			return err
		}
		s.enumerated += len(jobs)
		var handled []handledJob
		full, ran := false, false
		for _, j := range jobs {
			s.after = j.Workunit.ID
			if s.retry.waiting(j.Workunit.ID, s.now()) {
				continue
			}
			p.tried++
			ran = ran || j.Workunit.KnownAnswerID == 0
			kind, fail, err := s.handle(ctx, j)
			if err != nil {
				s.failed(j.Workunit.ID, fail, err, p)
			} else {
				handled = append(handled, handledJob{id: j.Workunit.ID, kind: kind})
			}
			if p.tried >= s.opts.Batch {
				full = true
				break
			}
		}
		if ran {
			handled = s.flush(ctx, handled, p)
		}
		s.mark(ctx, handled, p)
		if full {
			return nil
		}
		if len(jobs) == s.opts.Batch {
			continue
		}
		// The end of the queue: every READY job has been seen since the
		// last time round.
		s.after = 0
		s.retry.endSweep()
		if startedAtHead || wrapped {
			return nil
		}
		wrapped = true
	}
	return nil
}

// handledJob is a job its handler took, waiting to be marked DONE.
type handledJob struct {
	id   int64
	kind string
}

// flush has a Flusher handler make the page's work durable before any of
// it is marked DONE, and returns the jobs that may be marked. Should Flush
// fail, every job the handler took fails (it is handled again after its
// back-off); known-answer jobs, which the handler never saw, are marked.
func (s *Service) flush(ctx context.Context, handled []handledJob, p *pass) []handledJob {
	f, ok := s.h.(Flusher)
	if !ok {
		return handled
	}
	err := f.Flush(ctx)
	if err == nil {
		return handled
	}
	err = fmt.Errorf("assimilator: flush handler: %w", err)
	fail := handlerFailure(err)
	kept := handled[:0]
	for _, h := range handled {
		if h.kind == kindKnownAnswer {
			kept = append(kept, h)
			continue
		}
		s.failed(h.id, fail, err, p)
	}
	return kept
}

// failed records a job's failure for its back-off.
func (s *Service) failed(id int64, fail string, err error, p *pass) {
	s.m.handlerErrors.WithLabelValues(fail).Inc()
	delay, failures := s.retry.fail(id, s.now())
	p.failed++
	if p.firstErr == nil {
		p.firstErr = err
	}
	s.log.Debug("job failed to assimilate", "workunit_id", id, "kind", fail, "failures", failures,
		"retry_in", delay, "error", err)
}

// handle hands one job on. It returns the job's kind; on error, the kind
// of failure.
func (s *Service) handle(ctx context.Context, j store.WorkunitCanonical) (kind, fail string, err error) {
	wu := j.Workunit
	switch {
	case wu.KnownAnswerID != 0:
		// A known-answer job only tested a host; the project has no use
		// for its output.
		return kindKnownAnswer, "", nil
	case wu.CanonicalResultID != 0:
		if j.Canonical == nil {
			return "", failDB, fmt.Errorf("assimilate workunit %d: canonical result %d: %w", wu.ID,
				wu.CanonicalResultID, store.ErrNotFound)
		}
		if err := s.h.Handle(ctx, wu, j.Canonical); err != nil {
			return "", handlerFailure(err), fmt.Errorf("assimilate workunit %d: %w", wu.ID, err)
		}
		return kindSuccess, "", nil
	default:
		if err := s.h.Handle(ctx, wu, nil); err != nil {
			return "", handlerFailure(err), fmt.Errorf("assimilate workunit %d: %w", wu.ID, err)
		}
		return kindError, "", nil
	}
}

// mark marks the handled jobs DONE in one statement. A job someone else
// marked meanwhile is a conflict, not a failure; should the write fail,
// every job of it stays READY and backs off like a failed one (its handler
// runs again: handlers are idempotent).
func (s *Service) mark(ctx context.Context, handled []handledJob, p *pass) {
	if len(handled) == 0 {
		return
	}
	ids := make([]int64, len(handled))
	for i, h := range handled {
		ids[i] = h.id
	}
	done, err := s.st.WorkunitMarkAssimilatedBatch(ctx, ids, s.now().Unix())
	if err != nil {
		err = fmt.Errorf("assimilator: %w", err)
		for _, h := range handled {
			s.failed(h.id, failDB, err, p)
		}
		return
	}
	marked := make(map[int64]bool, len(done))
	for _, id := range done {
		marked[id] = true
	}
	for _, h := range handled {
		s.retry.forget(h.id)
		if !marked[h.id] {
			s.m.conflicts.Inc()
			s.log.Debug("job no longer ready to assimilate", "workunit_id", h.id)
			continue
		}
		p.done[h.kind]++
		s.m.jobs.WithLabelValues(h.kind).Inc()
		s.log.Debug("assimilated job", "workunit_id", h.id, "kind", h.kind)
	}
}

func handlerFailure(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return failTimeout
	}
	return failHandler
}

// TakeEnumerated returns the rows this daemon's passes listed since the
// last call (daemon.Enumerator).
func (s *Service) TakeEnumerated() int {
	n := s.enumerated
	s.enumerated = 0
	return n
}
