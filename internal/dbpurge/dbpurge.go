package dbpurge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// Store is what db_purge needs from the database.
type Store interface {
	WorkunitListPurgeable(ctx context.Context, p store.PurgeListParams) ([]row.Workunit, error)
	ResultListByWorkunitIDs(ctx context.Context, wuids []int64) ([]row.Result, error)
	WorkunitPurge(ctx context.Context, p store.PurgeParams) (store.PurgeCounts, error)
	MsgPurge(ctx context.Context, before int64, limit int) (up, down int64, err error)
	ThroughputPurge(ctx context.Context, before int64, limit int) (int64, error)
	CountsFold(ctx context.Context, limit int) (int64, error)
}

// Config is db_purge's configuration; each setting has the rules of its
// flag.
type Config struct {
	// ArchiveDir receives the archive files (--archive-dir, resolved
	// against the project directory); it is created if missing.
	ArchiveDir string
	// MinAge is how long a finished job is kept after its files were
	// deleted, by its mod_time (--min-age); 0 purges it at once.
	MinAge time.Duration
	// MaxArchiveRows is the most rows per archive file (--max-archive-rows).
	MaxArchiveRows int
	// Mod and ModIndex pick this replica's jobs: store.Partition(id, Mod) = ModIndex
	// (--mod, --mod-index).
	Mod, ModIndex int
	// Batch is the most jobs purged per pass, in one transaction (--batch).
	Batch int
	// TrickleRetention is how long handled trickle messages are kept
	// (--trickle-retention); 0 keeps them. See purgeTrickles.
	TrickleRetention time.Duration
}

// Validate returns every problem with c, each naming its flag.
func (c Config) Validate() error {
	errs := config.CheckPartition(c.Mod, c.ModIndex, c.Batch)
	if c.ArchiveDir == "" {
		errs = append(errs, errors.New("--archive-dir is empty"))
	}
	if c.MinAge < 0 {
		errs = append(errs, fmt.Errorf("--min-age %s: want 0 or a positive duration", c.MinAge))
	}
	if c.TrickleRetention < 0 {
		errs = append(errs, fmt.Errorf("--trickle-retention %s: want 0 (keep) or a positive duration", c.TrickleRetention))
	}
	if c.MaxArchiveRows < 1 {
		errs = append(errs, fmt.Errorf("--max-archive-rows %d: want at least 1", c.MaxArchiveRows))
	}
	return errors.Join(errs...)
}

// Deps are db_purge's collaborators.
type Deps struct {
	Store   Store
	Log     *slog.Logger     // nil: discard
	Metrics *Metrics         // nil: registered nowhere
	Now     func() time.Time // nil: time.Now
}

// Service is db_purge.
type Service struct {
	enumerated int // rows listed since TakeEnumerated
	st         Store
	cfg        Config
	log        *slog.Logger
	m          *Metrics
	now        func() time.Time
	wus, res   *archive

	// cursor is the last job id listed; jobs before it come round again
	// when a list reaches the end of the table.
	cursor int64
}

// New returns db_purge, creating the archive directory. Call Close when
// done, to close the archive files.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	now := deps.Now
	if now == nil {
		now = time.Now
	}
	log := deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := deps.Metrics
	if m == nil {
		m = NewMetrics(prometheus.NewRegistry())
	}
	if err := os.MkdirAll(cfg.ArchiveDir, 0o755); err != nil {
		return nil, fmt.Errorf("create archive directory: %w", err)
	}
	return &Service{st: deps.Store, cfg: cfg, log: log, m: m, now: now,
		wus: &archive{dir: cfg.ArchiveDir, prefix: "wu_archive", maxRows: cfg.MaxArchiveRows, now: now},
		res: &archive{dir: cfg.ArchiveDir, prefix: "result_archive", maxRows: cfg.MaxArchiveRows, now: now},
	}, nil
}

// Close closes the archive files.
func (s *Service) Close() error {
	return errors.Join(s.wus.close(), s.res.close())
}

// RunOnce purges the old trickle messages and throughput rows, archives
// and deletes one batch of purgeable jobs with their instances, and, when
// that was less than a batch, folds the status page's count rows. It
// returns how many jobs it purged.
func (s *Service) RunOnce(ctx context.Context) (int, error) {
	if err := s.purgeTrickles(ctx); err != nil {
		return 0, err
	}
	if err := s.purgeThroughput(ctx); err != nil {
		return 0, err
	}
	n, err := s.purge(ctx)
	if err != nil || n >= s.cfg.Batch {
		return n, err
	}
	// Caught up: fold the count rows now, not while purging hard, so the
	// daemon's memory peaks with its batches alone.
	return n, s.foldCounts(ctx)
}

// archiveChunk is how many jobs' instances a pass lists, encodes and
// compresses at a time: db_purge's memory follows it, not --batch, so a
// backlog of full batches costs no more memory than a trickle of jobs.
const archiveChunk = 100

// purge archives and deletes one batch of purgeable jobs with their
// instances, and returns how many jobs it purged.
func (s *Service) purge(ctx context.Context) (int, error) {
	wus, err := s.list(ctx)
	if err != nil || len(wus) == 0 {
		return 0, err
	}
	ids := make([]int64, len(wus))
	for i, wu := range wus {
		ids[i] = wu.ID
	}
	// Archive first, durably; delete after. See the package comment.
	nw, err := s.wus.write(len(wus), func(buf *bytes.Buffer, i int) { appendRecord(buf, "workunit", wus[i]) })
	s.m.archiveBytes.WithLabelValues("workunit").Add(float64(nw))
	if err == nil {
		err = s.wus.sync()
	}
	if err != nil {
		return 0, err
	}
	s.m.archived.WithLabelValues("workunit").Add(float64(len(wus)))
	s.enumerated += len(wus)
	var nr int64
	var results []store.PurgedResult
	for chunk := range slices.Chunk(ids, archiveChunk) {
		rs, err := s.st.ResultListByWorkunitIDs(ctx, chunk)
		if err != nil {
			return 0, err
		}
		n, err := s.res.write(len(rs), func(buf *bytes.Buffer, i int) { appendRecord(buf, "result", rs[i]) })
		nr += n
		s.m.archiveBytes.WithLabelValues("result").Add(float64(n))
		if err != nil {
			return 0, err
		}
		for _, r := range rs {
			results = append(results, store.PurgedResultOf(r))
		}
	}
	if err := s.res.sync(); err != nil {
		return 0, err
	}
	s.enumerated += len(results)
	s.m.archived.WithLabelValues("result").Add(float64(len(results)))

	c, err := s.st.WorkunitPurge(ctx, store.PurgeParams{WorkunitIDs: ids, Results: results})
	if err != nil {
		// Conflict or not, nothing was deleted; the rows stay and are
		// archived again by a later pass, if they are still purgeable
		// then (a late report puts its instance's files back to delete).
		return 0, err
	}
	s.m.deleted.WithLabelValues("workunit").Add(float64(c.Workunits))
	s.m.deleted.WithLabelValues("result").Add(float64(c.Results))
	s.m.deleted.WithLabelValues("workunit_user").Add(float64(c.WorkunitUsers))
	s.m.deleted.WithLabelValues("workunit_shared_file").Add(float64(c.SharedRefs))
	s.log.Info("purged jobs", "workunits", c.Workunits, "results", c.Results,
		"workunit_users", c.WorkunitUsers, "archive_bytes", nw+nr)
	return int(c.Workunits), nil
}

// list returns up to a batch of purgeable jobs after the cursor and moves
// the cursor to the last one. A list that reaches the end of the table
// wraps the cursor to 0 and, if it started past 0, goes on from 0 in the
// same pass for the rest of the batch.
func (s *Service) list(ctx context.Context) ([]row.Workunit, error) {
	p := store.PurgeListParams{AfterID: s.cursor, ModTimeMax: s.now().Add(-s.cfg.MinAge).Unix(),
		Mod: s.cfg.Mod, ModIndex: s.cfg.ModIndex, Limit: s.cfg.Batch}
	wus, err := s.st.WorkunitListPurgeable(ctx, p)
	if err != nil {
		return nil, err
	}
	if len(wus) == p.Limit {
		s.cursor = wus[len(wus)-1].ID
		return wus, nil
	}
	from := s.cursor
	s.cursor = 0
	if from == 0 {
		return wus, nil
	}
	p.AfterID, p.Limit = 0, p.Limit-len(wus)
	more, err := s.st.WorkunitListPurgeable(ctx, p)
	if err != nil {
		return nil, err
	}
	for _, wu := range more {
		if wu.ID > from {
			break // listed already, or purgeable since: the next round's
		}
		wus = append(wus, wu)
		s.cursor = wu.ID
	}
	return wus, nil
}

// TakeEnumerated returns the rows this daemon's passes listed since the
// last call (daemon.Enumerator).
func (s *Service) TakeEnumerated() int {
	n := s.enumerated
	s.enumerated = 0
	return n
}
