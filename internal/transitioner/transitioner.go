package transitioner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/transition"
)

// DefaultMaxOutputBytes is the upload limit written into new instances'
// output files: 1 MiB.
const DefaultMaxOutputBytes = 1 << 20

// OutputOpenName is the name the application opens its single output file
// by.
const OutputOpenName = "out"

// Store is what the transitioner needs from the database.
type Store interface {
	WorkunitListDue(ctx context.Context, p store.WorkunitListDueParams) ([]store.WorkunitResults, error)
	WorkunitOldestDue(ctx context.Context, now int64, mod, modIndex int) (int64, bool, error)
	WorkunitTransition(ctx context.Context, p store.WorkunitTransitionParams) error
}

// Options configures a Service.
type Options struct {
	// Mod and ModIndex select this replica's jobs (id % Mod = ModIndex).
	// Mod 0 means 1.
	Mod, ModIndex int
	// Batch bounds the job ⋈ instance rows read per pass; 0 means 500.
	Batch int
	// MaxOutputBytes bounds each output file of a new instance; 0 means
	// DefaultMaxOutputBytes.
	MaxOutputBytes float64
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Service is the transitioner.
type Service struct {
	st   Store
	log  *slog.Logger
	m    *Metrics
	opts Options
}

// New returns a transitioner working through st.
func New(st Store, log *slog.Logger, m *Metrics, opts Options) *Service {
	if opts.Mod <= 0 {
		opts.Mod = 1
	}
	if opts.Batch <= 0 {
		opts.Batch = 500
	}
	if opts.MaxOutputBytes <= 0 {
		opts.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Service{st: st, log: log, m: m, opts: opts}
}

// passStats is what one pass did, for its log line.
type passStats struct {
	transitioned, created, timedOut, failed, conflicts int
}

// RunOnce transitions one batch of due jobs and returns how many it looked
// at. A job that fails is left due and the others still go ahead; the
// failures are returned together at the end of the pass.
func (s *Service) RunOnce(ctx context.Context) (int, error) {
	now := s.opts.Now().Unix()
	oldest, due, err := s.st.WorkunitOldestDue(ctx, now, s.opts.Mod, s.opts.ModIndex)
	if err != nil {
		return 0, err
	}
	if !due {
		s.m.lag.Set(0)
		return 0, nil
	}
	s.m.lag.Set(float64(now - oldest))
	jobs, err := s.st.WorkunitListDue(ctx, store.WorkunitListDueParams{
		Now: now, Mod: s.opts.Mod, ModIndex: s.opts.ModIndex, Limit: s.opts.Batch})
	if err != nil {
		return 0, err
	}
	var stats passStats
	var errs []error
	for _, j := range jobs {
		if err := s.transition(ctx, j, now, &stats); err != nil {
			errs = append(errs, err)
		}
	}
	if stats.transitioned > 0 || stats.conflicts > 0 {
		s.log.Info("transitioned jobs", "jobs", stats.transitioned, "results_created", stats.created,
			"results_timed_out", stats.timedOut, "jobs_failed", stats.failed, "conflicts", stats.conflicts)
	}
	return len(jobs), errors.Join(errs...)
}

// transition decides and writes one job.
func (s *Service) transition(ctx context.Context, j store.WorkunitResults, now int64, stats *passStats) error {
	wu := j.Workunit
	d := transition.Decide(wu, j.Results, now)
	p := store.WorkunitTransitionParams{
		ID:                 wu.ID,
		ReadTransitionTime: wu.TransitionTime,
		Now:                now,
		NeedValidate:       d.NeedValidate,
		ErrorMask:          d.ErrorMask,
		AssimilateState:    d.AssimilateState,
		FileDeleteState:    d.FileDeleteState,
		TransitionTime:     d.TransitionTime,
	}
	for _, name := range d.NewResults {
		doc, err := jobxml.FormatResult(name, []string{OutputOpenName}, s.opts.MaxOutputBytes)
		if err != nil {
			return fmt.Errorf("transition workunit %d: new instance %q: %w", wu.ID, name, err)
		}
		p.NewResults = append(p.NewResults, store.Result{
			CreateTime:  now,
			WorkunitID:  wu.ID,
			ServerState: state.ServerUnsent,
			Name:        name,
			XMLDocIn:    doc,
			Batch:       wu.Batch,
			AppID:       wu.AppID,
			Priority:    wu.Priority,
			Random:      int64(rand.Int32()),
			ModTime:     now,
		})
	}
	fromFDS := make(map[int64]state.FileDeleteState, len(j.Results))
	for _, r := range j.Results {
		fromFDS[r.ID] = r.FileDeleteState
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
	err := s.st.WorkunitTransition(ctx, p)
	if errors.Is(err, store.ErrConflict) {
		s.m.conflicts.Inc()
		stats.conflicts++
		s.log.Debug("job changed while being transitioned; will retry", "workunit_id", wu.ID)
		return nil
	}
	if err != nil {
		return err
	}
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
	s.log.Debug("transitioned job", "workunit_id", wu.ID, "results_created", len(p.NewResults),
		"results_changed", len(p.Changes), "need_validate", d.NeedValidate, "transition_time", d.TransitionTime)
	return nil
}
