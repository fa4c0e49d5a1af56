package filedeleter

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

const (
	kindInput  = "input"
	kindOutput = "output"
)

// Store is what the file deleter needs from the database.
type Store interface {
	WorkunitListFileDeleteReady(ctx context.Context, p store.FileDeleteListParams) ([]store.Workunit, error)
	ResultListFileDeleteReady(ctx context.Context, p store.FileDeleteListParams) ([]store.Result, error)
	WorkunitFileDeleteFinish(ctx context.Context, id int64, to state.FileDeleteState, now int64) error
	ResultFileDeleteFinish(ctx context.Context, id int64, to state.FileDeleteState, now int64) error
}

// Config is the file deleter's configuration.
type Config struct {
	// DownloadDir holds input files; UploadDir holds output files.
	DownloadDir, UploadDir string
	// Fanout is the project's number of hashed sub-directories.
	Fanout int
	// Mod and ModIndex pick this replica's rows.
	Mod, ModIndex int
	// Batch is the most workunits, and the most results, handled per pass.
	Batch int
}

// Service is the file deleter.
type Service struct {
	st  Store
	cfg Config
	log *slog.Logger
	m   *Metrics
	now func() time.Time
}

// New returns a file deleter. now is the clock (time.Now in production).
func New(st Store, cfg Config, log *slog.Logger, m *Metrics, now func() time.Time) *Service {
	if now == nil {
		now = time.Now
	}
	if cfg.Mod < 1 {
		cfg.Mod = 1
	}
	if cfg.Batch < 1 {
		panic("filedeleter: batch must be at least 1")
	}
	return &Service{st: st, cfg: cfg, log: log, m: m, now: now}
}

// passStats is what one pass did, for its log line.
type passStats struct {
	rows, deleted, missing, errors int
}

// RunOnce handles up to a batch of READY workunits and up to a batch of
// READY results, and returns how many rows it handled.
func (s *Service) RunOnce(ctx context.Context) (int, error) {
	p := store.FileDeleteListParams{Mod: s.cfg.Mod, ModIndex: s.cfg.ModIndex, Limit: s.cfg.Batch}
	var ps passStats
	wus, err := s.st.WorkunitListFileDeleteReady(ctx, p)
	if err != nil {
		return 0, err
	}
	for _, wu := range wus {
		if err := s.handleWorkunit(ctx, wu, &ps); err != nil {
			return ps.rows, err
		}
	}
	results, err := s.st.ResultListFileDeleteReady(ctx, p)
	if err != nil {
		return ps.rows, err
	}
	for _, r := range results {
		if err := s.handleResult(ctx, r, &ps); err != nil {
			return ps.rows, err
		}
	}
	if ps.rows > 0 {
		s.log.Info("deleted files", "workunits", len(wus), "results", len(results),
			"files_deleted", ps.deleted, "files_missing", ps.missing, "errors", ps.errors)
	}
	return ps.rows, nil
}

func (s *Service) handleWorkunit(ctx context.Context, wu store.Workunit, ps *passStats) error {
	var names []string
	doc, err := jobxml.ParseWorkunit(wu.XMLDoc)
	if err == nil {
		for _, in := range doc.Inputs {
			names = append(names, in.Name)
		}
	}
	to := s.deleteAll(s.cfg.DownloadDir, kindInput, names, err, ps, "workunit_id", wu.ID)
	err = s.st.WorkunitFileDeleteFinish(ctx, wu.ID, to, s.now().Unix())
	return s.finished("workunit", to, err, ps)
}

func (s *Service) handleResult(ctx context.Context, r store.Result, ps *passStats) error {
	var names []string
	outs, err := jobxml.ParseResult(r.XMLDocIn)
	if err == nil {
		for _, out := range outs {
			names = append(names, out.Name)
		}
	}
	to := s.deleteAll(s.cfg.UploadDir, kindOutput, names, err, ps, "result_id", r.ID)
	err = s.st.ResultFileDeleteFinish(ctx, r.ID, to, s.now().Unix())
	return s.finished("result", to, err, ps)
}

// deleteAll deletes files names under root and returns the row's new state:
// DONE if every file is gone (deleted now or absent already), ERROR if the
// row's XML could not be read (parseErr) or a file could not be deleted.
func (s *Service) deleteAll(root, kind string, names []string, parseErr error, ps *passStats, idKey string, id int64) state.FileDeleteState {
	if parseErr != nil {
		s.m.errors.WithLabelValues(kind).Inc()
		ps.errors++
		s.log.Warn("unreadable file list", idKey, id, "error", parseErr)
		return state.FileDeleteError
	}
	to := state.FileDeleteDone
	for _, name := range names {
		err := deleteFile(root, name, s.cfg.Fanout)
		switch {
		case err == nil:
			s.m.filesDeleted.WithLabelValues(kind).Inc()
			ps.deleted++
		case errors.Is(err, fs.ErrNotExist):
			s.m.filesMissing.WithLabelValues(kind).Inc()
			ps.missing++
		default:
			s.m.errors.WithLabelValues(kind).Inc()
			ps.errors++
			s.log.Warn("cannot delete file", idKey, id, "file", name, "error", err)
			to = state.FileDeleteError
		}
	}
	return to
}

// finished accounts for a row whose mark was attempted. A conflict means
// another replica or an operator moved the row on first: not an error.
func (s *Service) finished(table string, to state.FileDeleteState, err error, ps *passStats) error {
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	if err != nil {
		return err
	}
	outcome := "done"
	if to == state.FileDeleteError {
		outcome = "error"
	}
	s.m.rows.WithLabelValues(table, outcome).Inc()
	ps.rows++
	return nil
}

func deleteFile(root, name string, fan int) error {
	path, err := fanout.Path(root, name, fan)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("delete %s: %w", path, err)
	}
	return nil
}
