package store

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// PurgeListParams selects finished jobs to purge.
type PurgeListParams struct {
	// AfterID is the caller's cursor: only jobs with a larger id are
	// returned, so that a pass does not step again over the jobs earlier
	// passes deleted (or found not yet purgeable).
	AfterID int64
	// ModTimeMax is the newest mod_time a job may have (now - grace period).
	ModTimeMax int64
	// Mod and ModIndex pick this replica's jobs: Partition(id, Mod) = ModIndex.
	Mod, ModIndex int
	// Limit bounds the jobs returned.
	Limit int
}

// workunitListPurgeable: a job may go once its input files are deleted
// (file_delete_state = DONE), it is older than the grace period, and every
// instance is OVER with no file deletion pending: file_delete_state DONE, or
// INIT (never marked, so it never had files to delete; the transitioner
// marks every instance READY when it marks the job, so in practice this is
// an instance the job never needed). An instance READY (files not deleted
// yet) or ERROR (files the file deleter could not delete) keeps its job, so
// that no file is orphaned with no row left to say it exists.
//
// The test on the instances is an anti-join (LEFT JOIN … IS NULL), which
// MariaDB runs as a lookup on res_wuid for each job it walks, in id order
// from the cursor, stopping at the limit. The walk is wu_file_delete's
// (file_delete_state, then id, the primary key every secondary index
// ends with), forced: on its own estimates the optimizer took wu_purge's
// (file_delete_state, mod_time) range at 10^6 jobs and sorted every job
// in it by id for each batch. NOT EXISTS it turns into NOT IN
// and materializes, reading the whole result table before the first job
// comes back (1.3–1.7 s per batch of 1,000 at 800,000 instances); a count
// in a dependent subquery is a lookup per job too, but each is a subquery
// execution of its own, which cost make bench's purge phase 1.7–2× the
// database CPU of the anti-join. The lookup is res_wuid's, forced too: when
// the statistics said res_wuid told jobs apart badly and the join's
// condition matched few instances (every one over, its files deleted, as
// in make bench's purge phase), MariaDB read those few through an index
// merge into a join buffer, and then read and sorted every candidate job
// for each batch (Using temporary; Using filesort): the phase's database
// CPU swung from 9 to 39 s between runs of one commit.
var workunitListPurgeable = `SELECT ` + workunitColumnsW + ` FROM workunit w FORCE INDEX (wu_file_delete)
LEFT JOIN result r FORCE INDEX (res_wuid) ON r.workunitid = w.id AND NOT (r.server_state = ? AND r.file_delete_state IN (?, ?))
WHERE w.file_delete_state = ? AND w.mod_time <= ? AND w.id > ? AND ` + partitionFilter("w.id") + `
  AND r.id IS NULL
ORDER BY w.id LIMIT ?`

// WorkunitListPurgeable returns finished jobs with id > p.AfterID that
// db_purge may archive and delete, by id.
func (s *Store) WorkunitListPurgeable(ctx context.Context, p PurgeListParams) ([]row.Workunit, error) {
	var out []row.Workunit
	err := s.withRetry(ctx, func() error {
		out = out[:0]
		return s.db.SelectContext(ctx, &out, workunitListPurgeable,
			int(state.ServerOver), int(state.FileDeleteInit), int(state.FileDeleteDone),
			int(state.FileDeleteDone), p.ModTimeMax, p.AfterID, max(p.Mod, 1), p.ModIndex, p.Limit)
	})
	if err != nil {
		return nil, fmt.Errorf("list purgeable workunits: %w", err)
	}
	return out, nil
}

const resultListByWorkunitIDs = `SELECT ` + ResultColumns + ` FROM result WHERE workunitid IN (?) ORDER BY id`

// ResultListByWorkunitIDs returns every instance of the given jobs, by id.
func (s *Store) ResultListByWorkunitIDs(ctx context.Context, wuids []int64) ([]row.Result, error) {
	return selectIn[row.Result](ctx, s, "list results of workunits", resultListByWorkunitIDs, wuids)
}

// PurgeParams names the rows of one purge batch.
type PurgeParams struct {
	// WorkunitIDs are the jobs to delete, with all their instances.
	WorkunitIDs []int64
	// Results are the instances the caller archived for those jobs, as
	// archived; the purge refuses to delete any other set of instances, or
	// one that changed since.
	Results []PurgedResult
}

// PurgedResult is what the purge compares of an archived instance with the
// row it deletes: every column a writer changes when an instance of a
// finished job is still touched, above all a late report (received_time,
// outcome, file_delete_state put back to READY).
type PurgedResult struct {
	ID              int64                 `db:"id"`
	ServerState     state.ServerState     `db:"server_state"`
	Outcome         state.Outcome         `db:"outcome"`
	ValidateState   state.ValidateState   `db:"validate_state"`
	FileDeleteState state.FileDeleteState `db:"file_delete_state"`
	ReceivedTime    int64                 `db:"received_time"`
	ModTime         int64                 `db:"mod_time"`
}

// PurgedResultOf is the part of r the purge compares.
func PurgedResultOf(r row.Result) PurgedResult {
	return PurgedResult{ID: r.ID, ServerState: r.ServerState, Outcome: r.Outcome, ValidateState: r.ValidateState,
		FileDeleteState: r.FileDeleteState, ReceivedTime: r.ReceivedTime, ModTime: r.ModTime}
}

// PurgeCounts is how many rows a purge deleted, by table.
type PurgeCounts struct {
	Workunits, Results, WorkunitUsers, SharedRefs int64
}

const (
	purgeLockResults = `SELECT id, server_state, outcome, validate_state, file_delete_state, received_time, mod_time
FROM result WHERE workunitid IN (?) ORDER BY id FOR UPDATE`
	purgeDeleteResults      = `DELETE FROM result WHERE workunitid IN (?)`
	purgeDeleteWorkunitUser = `DELETE FROM workunit_user WHERE workunitid IN (?)`
	purgeDeleteSharedRefs   = `DELETE FROM workunit_shared_file WHERE workunitid IN (?)`
	purgeDeleteWorkunits    = `DELETE FROM workunit WHERE id IN (?) AND file_delete_state = ?`
)

// WorkunitPurge deletes the given jobs, their instances, their
// workunit_user rows and their references to shared files
// (workunit_shared_file) in one transaction. If the rows are not what the caller
// archived (an instance more or less, an instance changed since, or a job
// no longer DONE) it deletes nothing and returns ErrConflict, so no row goes
// unarchived. The instances are read under lock first: a report the
// scheduler recorded between the archive and the delete (a late result,
// acked to its host) must not be deleted as the archive's older copy.
func (s *Store) WorkunitPurge(ctx context.Context, p PurgeParams) (PurgeCounts, error) {
	var c PurgeCounts
	if len(p.WorkunitIDs) == 0 {
		return c, nil
	}
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		c = PurgeCounts{}
		if err := purgeCheckResults(ctx, tx, p); err != nil {
			return err
		}
		n, err := purgeExecIn(ctx, tx, purgeDeleteResults, p.WorkunitIDs)
		if err != nil {
			return err
		}
		if n != int64(len(p.Results)) {
			return fmt.Errorf("%d results deleted, %d archived: %w", n, len(p.Results), ErrConflict)
		}
		c.Results = n
		if c.WorkunitUsers, err = purgeExecIn(ctx, tx, purgeDeleteWorkunitUser, p.WorkunitIDs); err != nil {
			return err
		}
		if c.SharedRefs, err = purgeExecIn(ctx, tx, purgeDeleteSharedRefs, p.WorkunitIDs); err != nil {
			return err
		}
		n, err = purgeExecIn(ctx, tx, purgeDeleteWorkunits, p.WorkunitIDs, int(state.FileDeleteDone))
		if err != nil {
			return err
		}
		if n != int64(len(p.WorkunitIDs)) {
			return fmt.Errorf("%d of %d workunits still purgeable: %w", n, len(p.WorkunitIDs), ErrConflict)
		}
		c.Workunits = n
		return nil
	})
	if err != nil {
		return PurgeCounts{}, fmt.Errorf("purge %d workunits: %w", len(p.WorkunitIDs), err)
	}
	return c, nil
}

// purgeCheckResults locks the instances of p's jobs and returns ErrConflict
// unless they are exactly p.Results.
func purgeCheckResults(ctx context.Context, tx *sqlx.Tx, p PurgeParams) error {
	q, a, err := sqlx.In(purgeLockResults, p.WorkunitIDs)
	if err != nil {
		return err
	}
	var now []PurgedResult
	if err := tx.SelectContext(ctx, &now, q, a...); err != nil {
		return err
	}
	archived := make(map[int64]PurgedResult, len(p.Results))
	for _, r := range p.Results {
		archived[r.ID] = r
	}
	if len(now) != len(archived) {
		return fmt.Errorf("%d results found, %d archived: %w", len(now), len(archived), ErrConflict)
	}
	for _, r := range now {
		if a, ok := archived[r.ID]; !ok || a != r {
			return fmt.Errorf("result %d changed since it was archived: %w", r.ID, ErrConflict)
		}
	}
	return nil
}

// purgeExecIn expands the IN (?) of query for args and runs it in tx.
func purgeExecIn(ctx context.Context, tx *sqlx.Tx, query string, args ...any) (int64, error) {
	q, a, err := sqlx.In(query, args...)
	if err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, q, a...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
