package workgenerator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// Store is what the work generator needs from the database.
type Store interface {
	jobs.Store
	AppGetByName(ctx context.Context, name string) (row.App, error)
	WorkunitCountBacklog(ctx context.Context, appID int64, now int64) (store.Backlog, error)
	WorkunitCountByNamePrefix(ctx context.Context, appID int64, prefix string) (int64, error)
}

// Config is the work generator's configuration; each setting has the rules
// of its flag.
type Config struct {
	// App is the name of the app to make jobs for (--app).
	App string
	// JobPrefix starts every job name; empty means App (--job-prefix).
	JobPrefix string
	// UnsentTarget is the backlog, in unsent instances, to keep
	// (--unsent-target).
	UnsentTarget int
	// TotalJobs stops creating jobs once this many exist over all runs;
	// 0 means no limit (--total-jobs).
	TotalJobs int64
	// Mod and ModIndex are 1 and 0: the work generator does not shard, one
	// runs per app (--mod, --mod-index).
	Mod, ModIndex int
	// Batch is the most jobs created per pass, in one transaction (--batch).
	Batch int
	// CounterFile is the path of the counter file (see CounterPath).
	CounterFile string
	// Params are the parameters of every job (the job flags, --min-quorum
	// and the rest).
	Params jobs.Params
}

// Validate returns every problem with c, each naming its flag.
func (c Config) Validate() error {
	errs := config.CheckPartition(c.Mod, c.ModIndex, c.Batch)
	if c.App == "" {
		errs = append(errs, fmt.Errorf("--%s is missing: name the app to create jobs for (or set %s, or app: in --config)",
			FlagApp, config.EnvName(FlagApp)))
	}
	if c.UnsentTarget < 1 {
		errs = append(errs, fmt.Errorf("--%s %d: want at least 1", FlagUnsentTarget, c.UnsentTarget))
	}
	if c.TotalJobs < 0 {
		errs = append(errs, fmt.Errorf("--%s %d: want 0 (no limit) or more", FlagTotalJobs, c.TotalJobs))
	}
	if c.Mod > 1 {
		errs = append(errs, fmt.Errorf("--mod %d: the work generator does not shard; run one per app", c.Mod))
	}
	if c.CounterFile == "" {
		errs = append(errs, errors.New("counter file path is empty"))
	}
	if err := c.Params.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("job parameters: %w", err))
	}
	return errors.Join(errs...)
}

// Deps are the work generator's collaborators.
type Deps struct {
	Store Store
	// Creator writes the jobs and stages their input files.
	Creator *jobs.Creator
	// Input makes a job's input file from its name; nil means
	// demoapp.Input. An error fails the pass before anything is written:
	// no job of the batch is created, and the next pass tries again.
	Input   func(ctx context.Context, job string) ([]byte, error)
	Log     *slog.Logger     // nil: discard
	Metrics *Metrics         // nil: registered nowhere
	Now     func() time.Time // nil: time.Now
}

// Service is the work generator.
type Service struct {
	st      Store
	creator *jobs.Creator
	cfg     Config
	input   func(ctx context.Context, job string) ([]byte, error)
	log     *slog.Logger
	m       *Metrics
	now     func() time.Time

	// Valid only while loaded: the app and the number of jobs created.
	loaded  bool
	appID   int64
	created int64

	// bound is the backlog counted at boundAt plus the most instances the
	// jobs created since can have brought (see RunOnce); boundAt zero means
	// no count to go by.
	bound   int64
	boundAt time.Time
}

// recountAfter is how long a backlog count stands in for a new one while
// the backlog is known to be short of the target.
const recountAfter = 10 * time.Second

// New returns a work generator.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Creator == nil {
		return nil, errors.New("work generator: no job creator")
	}
	if cfg.JobPrefix == "" {
		cfg.JobPrefix = cfg.App
	}
	s := &Service{st: deps.Store, creator: deps.Creator, cfg: cfg, input: deps.Input, log: deps.Log, m: deps.Metrics, now: deps.Now}
	if s.input == nil {
		s.input = func(_ context.Context, job string) ([]byte, error) { return demoapp.Input(job), nil }
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

// Created returns the number of jobs created for the app over all runs, as
// far as this process knows (0 before the first pass).
func (s *Service) Created() int64 { return s.created }

// RunOnce creates one batch of jobs if the backlog is below target and the
// total limit allows; it returns the number created, 0 when there is nothing
// to do.
func (s *Service) RunOnce(ctx context.Context) (int, error) {
	if !s.loaded {
		if err := s.load(ctx); err != nil {
			return 0, err
		}
	}
	remaining := int64(-1)
	if s.cfg.TotalJobs > 0 {
		remaining = s.cfg.TotalJobs - s.created
		if remaining <= 0 {
			return 0, nil
		}
	}
	now := s.now()
	// Counting the backlog reads every unsent instance and every job still
	// awaiting its instances, so it is not repeated while filling a large
	// shortfall: the backlog only grows by the jobs created here (each at
	// most per instances, plus at most one known-answer job of one
	// instance), so the last count plus those is an upper bound, and while
	// it leaves room for a whole batch, a count would make a whole batch
	// too. Other creators and replacement instances can add to the backlog
	// too, which a fresh count, at least every recountAfter, takes in.
	per := int64(s.cfg.Params.TargetNResults)
	backlog := s.bound
	fullBatch := int64(s.cfg.UnsentTarget)-backlog >= int64(s.cfg.Batch)*per
	if s.boundAt.IsZero() || !fullBatch || now.Sub(s.boundAt) >= recountAfter || now.Before(s.boundAt) {
		b, err := s.st.WorkunitCountBacklog(ctx, s.appID, now.Unix())
		if err != nil {
			return 0, err
		}
		backlog, s.bound, s.boundAt = b.Total(), b.Total(), now
		s.m.backlog.Set(float64(backlog))
	}
	short := int64(s.cfg.UnsentTarget) - backlog
	if short <= 0 {
		return 0, nil
	}
	// Each job brings target_nresults instances; round up so the target is
	// reached, overshooting by less than one job.
	n := min((short+per-1)/per, int64(s.cfg.Batch))
	if remaining >= 0 {
		n = min(n, remaining)
	}
	batch := make([]jobs.Job, n)
	for i := range batch {
		name := jobs.NewName(s.cfg.JobPrefix, now)
		in, err := s.input(ctx, name)
		if err != nil {
			return 0, fmt.Errorf("input of job %s: %w", name, err)
		}
		batch[i] = jobs.Job{Name: name, Inputs: []jobs.Input{{Data: in}}}
	}
	// Write-ahead: from here until the second write, a crash leaves a
	// pending batch that load resolves against the database.
	names := make([]string, len(batch))
	for i, j := range batch {
		names[i] = j.Name
	}
	intent := counter{App: s.cfg.App, Created: s.created, Pending: &pending{Jobs: n, FirstName: batch[0].Name, Names: names}}
	if err := writeCounter(s.cfg.CounterFile, intent); err != nil {
		return 0, err
	}
	s.loaded = false // until the outcome is on disk, trust only the file
	if err := s.creator.Create(ctx, s.appID, batch, s.cfg.Params); err != nil {
		s.boundAt = time.Time{}
		return 0, fmt.Errorf("create %d jobs: %w", n, err)
	}
	s.bound += n * (per + 1)
	done := counter{App: s.cfg.App, Created: s.created + n}
	if err := writeCounter(s.cfg.CounterFile, done); err != nil {
		return 0, err
	}
	s.created = done.Created
	s.loaded = true
	s.m.jobsCreated.Add(float64(n))
	s.m.totalJobs.Set(float64(s.created))
	s.log.Info("created jobs", "app", s.cfg.App, "jobs", n, "backlog", backlog,
		"target", s.cfg.UnsentTarget, "created_total", s.created)
	return int(n), nil
}

// load finds the app and reads the count of jobs created, resolving a batch
// left pending by a crash (see the package comment).
func (s *Service) load(ctx context.Context) error {
	app, err := s.st.AppGetByName(ctx, s.cfg.App)
	if err != nil {
		return fmt.Errorf("work generator app: %w", err)
	}
	c, err := readCounter(s.cfg.CounterFile)
	if err != nil {
		return err
	}
	if c.App != "" && c.App != s.cfg.App {
		return fmt.Errorf("counter file %s belongs to app %q, not %q", s.cfg.CounterFile, c.App, s.cfg.App)
	}
	rewrite := false
	if c.Pending != nil {
		_, err := s.st.WorkunitGetByName(ctx, c.Pending.FirstName)
		switch {
		case err == nil:
			c.Created += c.Pending.Jobs
		case errors.Is(err, store.ErrNotFound):
			// Not committed: its staged inputs belong to no job.
			if err := s.creator.RemoveInputs(c.Pending.Names); err != nil {
				return fmt.Errorf("remove the inputs of an uncommitted batch: %w", err)
			}
		default:
			return fmt.Errorf("resolve pending batch: %w", err)
		}
		s.log.Info("resolved pending batch", "app", s.cfg.App, "jobs", c.Pending.Jobs,
			"committed", err == nil, "created_total", c.Created)
		c.Pending = nil
		rewrite = true
	}
	inDB, err := s.st.WorkunitCountByNamePrefix(ctx, app.ID, s.cfg.JobPrefix+"_")
	if err != nil {
		return err
	}
	if inDB > c.Created {
		c.Created = inDB
		rewrite = true
	}
	if rewrite {
		c.App = s.cfg.App
		if err := writeCounter(s.cfg.CounterFile, c); err != nil {
			return err
		}
	}
	s.appID = app.ID
	s.created = c.Created
	s.loaded = true
	s.m.totalJobs.Set(float64(s.created))
	return nil
}
