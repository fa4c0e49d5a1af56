package assimilator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/taskserver/taskserver/internal/store"
)

// Store is what the assimilator needs from the database.
type Store interface {
	AppGetByName(ctx context.Context, name string) (store.App, error)
	WorkunitListAssimilate(ctx context.Context, p store.WorkunitListAssimilateParams) ([]store.Workunit, error)
	ResultGet(ctx context.Context, id int64) (store.Result, error)
	WorkunitMarkAssimilated(ctx context.Context, id, now int64) error
}

// Options configures a Service.
type Options struct {
	// App is the name of the app whose jobs this assimilator handles.
	App string
	// Mod and ModIndex select this replica's jobs (id % Mod = ModIndex).
	// Mod 0 means 1.
	Mod, ModIndex int
	// Batch bounds the jobs read per pass; 0 means 500.
	Batch int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Service is the assimilator of one app.
type Service struct {
	st    Store
	h     Handler
	log   *slog.Logger
	m     *Metrics
	opts  Options
	appID int64
}

// New returns an assimilator handing jobs to h.
func New(st Store, h Handler, log *slog.Logger, m *Metrics, opts Options) *Service {
	if opts.Mod <= 0 {
		opts.Mod = 1
	}
	if opts.Batch <= 0 {
		opts.Batch = 500
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Service{st: st, h: h, log: log, m: m, opts: opts}
}

// RunOnce assimilates one batch of jobs and returns how many it looked at.
// A job whose handler fails stays READY and is tried again on a later pass,
// never skipped; the other jobs of the batch still go ahead, and the
// failures are returned so the loop backs off.
func (s *Service) RunOnce(ctx context.Context) (int, error) {
	if s.appID == 0 {
		app, err := s.st.AppGetByName(ctx, s.opts.App)
		if err != nil {
			return 0, fmt.Errorf("assimilator: %w", err)
		}
		s.appID = app.ID
	}
	jobs, err := s.st.WorkunitListAssimilate(ctx, store.WorkunitListAssimilateParams{
		AppID: s.appID, Mod: s.opts.Mod, ModIndex: s.opts.ModIndex, Limit: s.opts.Batch})
	if err != nil {
		return 0, err
	}
	done := map[string]int{}
	var errs []error
	for _, wu := range jobs {
		kind, err := s.assimilate(ctx, wu)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if kind != "" {
			done[kind]++
		}
	}
	if len(done) > 0 {
		s.log.Info("assimilated jobs", "success", done[kindSuccess], "error", done[kindError], "failed", len(errs))
	}
	return len(jobs), errors.Join(errs...)
}

// assimilate hands one job on and marks it done; it returns the job's kind,
// or "" if someone else marked it first.
func (s *Service) assimilate(ctx context.Context, wu store.Workunit) (string, error) {
	kind := kindError
	var canonical *store.Result
	if wu.CanonicalResultID != 0 {
		r, err := s.st.ResultGet(ctx, wu.CanonicalResultID)
		if err != nil {
			s.m.handlerErrors.Inc()
			return "", fmt.Errorf("assimilate workunit %d: %w", wu.ID, err)
		}
		canonical, kind = &r, kindSuccess
	}
	if err := s.h.Handle(ctx, wu, canonical); err != nil {
		s.m.handlerErrors.Inc()
		return "", fmt.Errorf("assimilate workunit %d: %w", wu.ID, err)
	}
	err := s.st.WorkunitMarkAssimilated(ctx, wu.ID, s.opts.Now().Unix())
	if errors.Is(err, store.ErrConflict) {
		s.m.conflicts.Inc()
		s.log.Debug("job no longer ready to assimilate", "workunit_id", wu.ID)
		return "", nil
	}
	if err != nil {
		return "", err
	}
	s.m.jobs.WithLabelValues(kind).Inc()
	s.log.Debug("assimilated job", "workunit_id", wu.ID, "kind", kind)
	return kind, nil
}
