package filedeleter

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

const (
	kindInput  = "input"
	kindOutput = "output"
	kindShared = "shared" // shared input files and their gzip'd copies
	kindOrphan = "orphan" // errors of the orphan sweep
)

// Store is what the file deleter needs from the database.
type Store interface {
	WorkunitListFileDeleteReady(ctx context.Context, p store.FileDeleteListParams) ([]store.FileDeleteRow, error)
	ResultListFileDeleteReady(ctx context.Context, p store.FileDeleteListParams) ([]store.FileDeleteRow, error)
	WorkunitFileDeleteFinish(ctx context.Context, p store.FileDeleteFinishParams) (int64, error)
	ResultFileDeleteFinish(ctx context.Context, p store.FileDeleteFinishParams) (int64, error)
	ResultNamesExisting(ctx context.Context, names []string) ([]string, error)
	SharedFileMarkDeleting(ctx context.Context, p store.SharedFileDeleteParams) (int64, error)
	SharedFileListDeleting(ctx context.Context, p store.SharedFileDeleteParams) ([]row.SharedFile, error)
	SharedFileMarkDeleted(ctx context.Context, ids []int64) (int64, error)
}

// Config is the file deleter's configuration; each setting has the rules
// of its flag.
type Config struct {
	// DownloadDir holds input files (--download-dir); UploadDir holds
	// output files (--upload-dir).
	DownloadDir, UploadDir string
	// Fanout is the project's number of hashed sub-directories (--fanout).
	Fanout int
	// Mod and ModIndex pick this replica's rows: store.Partition(id, Mod) = ModIndex
	// (--mod, --mod-index).
	Mod, ModIndex int
	// Batch is the most workunits, and the most results, handled per pass
	// (--batch).
	Batch int
	// Workers is how many files are deleted at once; 0 means 4 (no flag).
	// Deleting is a system call per file that may wait on the file system
	// (a network mount especially), so a few run side by side.
	Workers int
	// OrphanAge turns on the orphan sweep (orphans.go): an uploaded file
	// unchanged for this long that no result row names is deleted. 0 turns
	// the sweep off (--orphan-age).
	OrphanAge time.Duration
	// OrphanEvery is the least time between the starts of two orphan
	// sweeps (--orphan-every).
	OrphanEvery time.Duration
	// UploadGrace is the scheduler's upload grace, 0 for none: an
	// instance's upload certificates authorise uploads until its report
	// deadline plus this (keys.UploadCertificate). It must match the
	// scheduler's, or outputs are deleted while a certificate can still
	// create them again. The program reads --upload-grace as the scheduler
	// does (0: the default, negative: none) and passes the result.
	UploadGrace time.Duration
	// SharedFileGrace is how long a shared file no unfinished job refers
	// to is kept after a job last referred to it (or it was staged), so
	// that a file staged for jobs not submitted yet is not deleted first
	// (--shared-file-grace); 0 keeps it no longer.
	SharedFileGrace time.Duration
}

// Validate returns every problem with c, each naming its flag.
func (c Config) Validate() error {
	errs := config.CheckPartition(c.Mod, c.ModIndex, c.Batch)
	if c.DownloadDir == "" {
		errs = append(errs, fmt.Errorf("--%s is empty", config.FlagDownloadDir))
	}
	if c.UploadDir == "" {
		errs = append(errs, fmt.Errorf("--%s is empty", config.FlagUploadDir))
	}
	if err := config.CheckFanout(c.Fanout); err != nil {
		errs = append(errs, err)
	}
	if c.Workers < 0 {
		errs = append(errs, fmt.Errorf("workers %d: want 0 (the default) or more", c.Workers))
	}
	if c.OrphanAge < 0 {
		errs = append(errs, fmt.Errorf("--orphan-age %s: want 0 (off) or a positive duration", c.OrphanAge))
	}
	if c.OrphanEvery <= 0 {
		errs = append(errs, fmt.Errorf("--orphan-every %s: want a positive duration", c.OrphanEvery))
	}
	if c.UploadGrace < 0 {
		errs = append(errs, fmt.Errorf("--upload-grace %s: want 0 (none) or a positive duration", c.UploadGrace))
	}
	if c.SharedFileGrace < 0 {
		errs = append(errs, fmt.Errorf("--shared-file-grace %s: want 0 (none) or a positive duration", c.SharedFileGrace))
	}
	return errors.Join(errs...)
}

// Deps are the file deleter's collaborators.
type Deps struct {
	Store   Store
	Log     *slog.Logger     // nil: discard
	Metrics *Metrics         // nil: registered nowhere
	Now     func() time.Time // nil: time.Now
}

// Service is the file deleter.
type Service struct {
	enumerated int // rows listed since TakeEnumerated
	st         Store
	cfg        Config
	log        *slog.Logger
	m          *Metrics
	now        func() time.Time

	// Cursors: the last workunit and result id listed. Rows before them
	// come round again when a list reaches the end of its table.
	wuCursor, resCursor int64

	orphans orphanSweep
	// tombs leaves the tombstones of outputs deleted while their
	// certificates are good.
	tombs *outputfile.Tombstoner
}

// New returns a file deleter.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	s := &Service{st: deps.Store, cfg: cfg, log: deps.Log, m: deps.Metrics, now: deps.Now}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.m == nil {
		s.m = NewMetrics(prometheus.NewRegistry())
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.tombs = outputfile.NewTombstoner(cfg.UploadDir, s.now)
	return s, nil
}

// item is one row of a pass: its files and what became of them.
type item struct {
	table    string // "workunit" or "result"
	id       int64
	files    []file
	parseErr error
	// certExpiry is when a result's upload certificates stop authorising
	// uploads; zero for a workunit.
	certExpiry time.Time
	// Set by the deleting worker.
	deleted, missing, errors int
}

// RunOnce handles up to a batch of READY workunits and up to a batch of
// READY results, then deletes up to a batch of shared files no job needs
// any more (shared.go), then runs a step of the orphan sweep if one is
// under way or due, and returns how many rows it moved (out of READY, and
// shared files to deleted; orphans deleted are not rows: they do not keep
// the loop from its idle sleep, which keeps the sweep at a low rate).
func (s *Service) RunOnce(ctx context.Context) (int, error) {
	moved, err := s.handleReady(ctx)
	if err != nil {
		return moved, err
	}
	shared, err := s.deleteShared(ctx)
	moved += shared
	if err != nil {
		return moved, err
	}
	return moved, s.sweepOrphans(ctx)
}

// handleReady deletes the files of up to a batch of READY rows of each
// table and marks them. It deletes every file of the pass first and then
// marks the rows, one statement per table and outcome; a crash in between
// leaves rows READY whose files are gone, which the next pass finds missing
// and marks DONE.
func (s *Service) handleReady(ctx context.Context) (int, error) {
	wus, err := s.list(ctx, s.st.WorkunitListFileDeleteReady, &s.wuCursor)
	if err != nil {
		return 0, err
	}
	results, err := s.list(ctx, s.st.ResultListFileDeleteReady, &s.resCursor)
	if err != nil {
		return 0, err
	}
	s.enumerated += len(wus) + len(results)
	if len(wus)+len(results) == 0 {
		return 0, nil
	}
	items := make([]item, 0, len(wus)+len(results))
	for _, wu := range wus {
		files, err := inputFiles(wu.XMLDoc)
		items = append(items, item{table: tableWorkunit, id: wu.ID, files: files, parseErr: err})
	}
	for _, r := range results {
		files, err := outputFiles(r.XMLDoc)
		items = append(items, item{table: tableResult, id: r.ID, files: files, parseErr: err,
			certExpiry: time.Unix(r.ReportDeadline, 0).Add(max(s.cfg.UploadGrace, 0))})
	}
	s.deleteFiles(items, s.now())

	var deleted, missing, errs int
	ids := map[string]map[state.FileDeleteState][]int64{tableWorkunit: {}, tableResult: {}}
	for i := range items {
		it := &items[i]
		to := state.FileDeleteDone
		if it.parseErr != nil || it.errors > 0 {
			to = state.FileDeleteError
		}
		ids[it.table][to] = append(ids[it.table][to], it.id)
		deleted += it.deleted
		missing += it.missing
		errs += it.errors
	}
	now := s.now().Unix()
	moved := 0
	for _, table := range []string{tableWorkunit, tableResult} {
		finish := s.st.WorkunitFileDeleteFinish
		if table == tableResult {
			finish = s.st.ResultFileDeleteFinish
		}
		for _, to := range []state.FileDeleteState{state.FileDeleteDone, state.FileDeleteError} {
			if len(ids[table][to]) == 0 {
				continue
			}
			n, err := finish(ctx, store.FileDeleteFinishParams{IDs: ids[table][to], To: to, Now: now})
			if err != nil {
				return moved, err
			}
			s.m.rows.WithLabelValues(table, outcome(to)).Add(float64(n))
			moved += int(n)
		}
	}
	s.log.Info("deleted files", "workunits", len(wus), "results", len(results),
		"files_deleted", deleted, "files_missing", missing, "errors", errs)
	return moved, nil
}

// list returns up to a batch of READY rows after *cursor and moves the
// cursor to the last one. A list that reaches the end of the table wraps
// the cursor to 0 and, if it started past 0, goes on from 0 in the same pass
// for the rest of the batch, so that rows made READY behind the cursor wait
// at most one round.
func (s *Service) list(ctx context.Context, fn func(context.Context, store.FileDeleteListParams) ([]store.FileDeleteRow, error), cursor *int64) ([]store.FileDeleteRow, error) {
	p := store.FileDeleteListParams{AfterID: *cursor, Mod: s.cfg.Mod, ModIndex: s.cfg.ModIndex, Limit: s.cfg.Batch}
	rows, err := fn(ctx, p)
	if err != nil {
		return nil, err
	}
	if len(rows) == p.Limit {
		*cursor = rows[len(rows)-1].ID
		return rows, nil
	}
	from := *cursor
	*cursor = 0
	if from == 0 {
		return rows, nil
	}
	p.AfterID, p.Limit = 0, p.Limit-len(rows)
	more, err := fn(ctx, p)
	if err != nil {
		return nil, err
	}
	for _, r := range more {
		if r.ID > from {
			break // listed already, or made READY since: the next round's
		}
		rows = append(rows, r)
		*cursor = r.ID
	}
	return rows, nil
}

const (
	tableWorkunit = "workunit"
	tableResult   = "result"
)

func outcome(to state.FileDeleteState) string {
	if to == state.FileDeleteError {
		return "error"
	}
	return "done"
}

// deleteFiles deletes the files of items with cfg.Workers goroutines, each
// taking whole items, and records in each item what became of its files.
func (s *Service) deleteFiles(items []item, now time.Time) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(s.cfg.Workers, len(items)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(items) {
					return
				}
				s.deleteItem(&items[i], now)
			}
		}()
	}
	wg.Wait()
}

// deleteItem deletes the files of it. A file already absent (deleted by a
// pass that crashed before marking its row) is not an error. An output
// whose upload certificate is still good at now is replaced by a
// tombstone (outputfile.Tombstoner), also where there was none: otherwise
// the certificate could create it again, and nothing would count it.
func (s *Service) deleteItem(it *item, now time.Time) {
	kind, root, idKey := kindInput, s.cfg.DownloadDir, "workunit_id"
	if it.table == tableResult {
		kind, root, idKey = kindOutput, s.cfg.UploadDir, "result_id"
	}
	if it.parseErr != nil {
		s.m.errors.WithLabelValues(kind).Inc()
		it.errors++
		s.log.Warn("unreadable file list", idKey, it.id, "error", it.parseErr)
		return
	}
	tombstone := it.certExpiry.After(now)
	for _, f := range it.files {
		var err error
		if tombstone {
			err = s.tombstone(root, f.name, it.certExpiry)
		} else {
			err = deleteFile(root, f, s.cfg.Fanout)
		}
		s.count(kind, err, &it.deleted, &it.missing, &it.errors, idKey, it.id, f)
	}
}

// count records what became of file f, of kind kind, deleted with error
// err: in the metrics, in *deleted, *missing or *errs, and in the log if it
// could not be deleted. idKey and id name its row for the log.
func (s *Service) count(kind string, err error, deleted, missing, errs *int, idKey string, id int64, f file) {
	switch {
	case err == nil:
		s.m.filesDeleted.WithLabelValues(kind).Inc()
		*deleted++
	case errors.Is(err, fs.ErrNotExist):
		s.m.filesMissing.WithLabelValues(kind).Inc()
		*missing++
	default:
		s.m.errors.WithLabelValues(kind).Inc()
		*errs++
		s.log.Warn("cannot delete file", idKey, id, "file", f.String(), "error", err)
	}
}

// tombstone leaves a tombstone of the output name until expires, and
// returns fs.ErrNotExist if there was no file before.
func (s *Service) tombstone(root, name string, expires time.Time) error {
	path, err := fanout.Path(root, name, s.cfg.Fanout)
	if err != nil {
		return err
	}
	existed, err := s.tombs.Leave(path, expires)
	if err != nil {
		return err
	}
	s.m.tombstones.Inc()
	if !existed {
		return fs.ErrNotExist
	}
	return nil
}

// deleteFile deletes f from under root.
func deleteFile(root string, f file, fan int) error {
	path, err := fanout.Path(root, f.name, fan)
	if err != nil {
		return err
	}
	path += f.suffix
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("delete %s: %w", path, err)
	}
	return nil
}

// TakeEnumerated returns the rows this daemon's passes listed since the
// last call (daemon.Enumerator).
func (s *Service) TakeEnumerated() int {
	n := s.enumerated
	s.enumerated = 0
	return n
}
