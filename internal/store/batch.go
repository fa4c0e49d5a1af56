package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// batchColumns reads a Batch; a NULL idempotency key reads as "".
const batchColumns = `id, create_time, appid, userid, name, description, COALESCE(idempotency_key, '') AS idempotency_key,
state, njobs, completion_time, cancel_time`

// batchInsert stores an empty idempotency key as NULL, so batches without a
// key never collide on UNIQUE(userid, idempotency_key).
const batchInsert = `INSERT INTO batch (create_time, appid, userid, name, description, idempotency_key, state, njobs,
completion_time, cancel_time)
VALUES (:create_time, :appid, :userid, :name, :description, NULLIF(:idempotency_key, ''), :state, :njobs,
:completion_time, :cancel_time)`

// lifecycleChunk bounds the jobs one cancel or requeue statement changes, so
// an operation on a large batch is many short statements, not one long lock.
const lifecycleChunk = 500

// BatchGet returns batch id, or ErrNotFound.
func (s *Store) BatchGet(ctx context.Context, id int64) (row.Batch, error) {
	return s.batchGetBy(ctx, fmt.Sprintf("batch %d", id), `SELECT `+batchColumns+` FROM batch WHERE id = ?`, id)
}

// BatchGetByName returns the batch called name, or ErrNotFound.
func (s *Store) BatchGetByName(ctx context.Context, name string) (row.Batch, error) {
	return s.batchGetBy(ctx, fmt.Sprintf("batch %q", name), `SELECT `+batchColumns+` FROM batch WHERE name = ?`, name)
}

// BatchGetByKey returns user userID's batch submitted with idempotency key
// key, or ErrNotFound (always for an empty key).
func (s *Store) BatchGetByKey(ctx context.Context, userID int64, key string) (row.Batch, error) {
	if key == "" {
		return row.Batch{}, fmt.Errorf("batch with an empty idempotency key: %w", ErrNotFound)
	}
	return s.batchGetBy(ctx, "batch by idempotency key",
		`SELECT `+batchColumns+` FROM batch WHERE userid = ? AND idempotency_key = ?`, userID, key)
}

func (s *Store) batchGetBy(ctx context.Context, what, query string, args ...any) (row.Batch, error) {
	var b row.Batch
	err := s.db.GetContext(ctx, &b, query, args...)
	if errors.Is(err, sql.ErrNoRows) {
		return b, fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	if err != nil {
		return b, fmt.Errorf("get %s: %w", what, err)
	}
	return b, nil
}

// BatchListParams selects batches.
type BatchListParams struct {
	// UserID keeps only this user's batches, unless AllUsers.
	UserID   int64
	AllUsers bool
	// State keeps only batches in this state; 0 keeps all.
	State row.BatchState
	// AfterID pages: only batches with a larger id.
	AfterID int64
	// Limit bounds the rows; 0 means 100.
	Limit int
}

const batchList = `SELECT ` + batchColumns + ` FROM batch
WHERE (? OR userid = ?) AND (? = 0 OR state = ?) AND id > ?
ORDER BY id
LIMIT ?`

// BatchList returns the batches p selects, by id.
func (s *Store) BatchList(ctx context.Context, p BatchListParams) ([]row.Batch, error) {
	if p.Limit <= 0 {
		p.Limit = 100
	}
	var out []row.Batch
	err := s.db.SelectContext(ctx, &out, batchList, p.AllUsers, p.UserID, int(p.State), int(p.State), p.AfterID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list batches: %w", err)
	}
	return out, nil
}

// BatchInsertParams is a batch with all its jobs.
type BatchInsertParams struct {
	// Batch is the row to insert; its ID is ignored, NJobs is set to
	// len(Jobs) and State to BatchInProgress.
	Batch row.Batch
	// Jobs are the batch's jobs; their Batch is set to the new batch's id.
	Jobs []row.Workunit
	// Extra are jobs inserted in the same transaction but outside the batch
	// (known-answer jobs mixed in); their Batch is left as given.
	Extra []row.Workunit
	// Shared are the shared files the jobs use.
	Shared SharedRefs
}

// BatchInsertWithJobs inserts a batch and its jobs in one transaction, so a
// batch is never seen half made, and returns the stored batch and true. If
// the submitter already made a batch with the same idempotency key, nothing
// is written and that batch is returned with false. Another collision (the
// batch name or a job name taken) is ErrDuplicate, and nothing is written.
func (s *Store) BatchInsertWithJobs(ctx context.Context, p BatchInsertParams) (row.Batch, bool, error) {
	b := p.Batch
	b.ID = 0
	b.NJobs = len(p.Jobs)
	b.State = row.BatchInProgress
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.NamedExecContext(ctx, batchInsert, b)
		if err != nil {
			return err
		}
		if b.ID, err = res.LastInsertId(); err != nil {
			return err
		}
		for i := range p.Jobs {
			wu := p.Jobs[i]
			wu.Batch = b.ID
			if _, err := tx.NamedExecContext(ctx, workunitInsert, wu); err != nil {
				return fmt.Errorf("workunit %q: %w", wu.Name, err)
			}
		}
		for i := range p.Extra {
			if _, err := tx.NamedExecContext(ctx, workunitInsert, p.Extra[i]); err != nil {
				return fmt.Errorf("workunit %q: %w", p.Extra[i].Name, err)
			}
		}
		return insertSharedRefs(ctx, tx, p.Shared, max(latestCreateTime(p.Jobs), latestCreateTime(p.Extra)))
	})
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1062 { // ER_DUP_ENTRY
		// The unique index decided; a read now sees the winner's commit.
		if b.IdempotencyKey != "" {
			old, gerr := s.BatchGetByKey(ctx, b.UserID, b.IdempotencyKey)
			if gerr == nil {
				return old, false, nil
			}
			if !errors.Is(gerr, ErrNotFound) {
				return row.Batch{}, false, gerr
			}
		}
		return row.Batch{}, false, fmt.Errorf("insert batch %q: %w: %v", b.Name, ErrDuplicate, err)
	}
	if err != nil {
		return row.Batch{}, false, fmt.Errorf("insert batch %q with %d jobs: %w", b.Name, len(p.Jobs), err)
	}
	return b, true, nil
}

// BatchCounts are the counts of one batch's jobs and instances. Each job is
// in exactly one of Done, Errored, Held and Pending.
type BatchCounts struct {
	Jobs int64 `db:"jobs"`
	// Done jobs have a canonical result and no error.
	Done int64 `db:"done"`
	// Errored jobs failed for good (error_mask set), cancelled ones included.
	Errored   int64 `db:"errored"`
	Cancelled int64 `db:"cancelled"`
	// Held jobs exhausted their limits and wait for a requeue.
	Held int64 `db:"held"`
	// Pending jobs are still being worked on.
	Pending     int64 `db:"pending"`
	Assimilated int64 `db:"assimilated"`
	// Credit sums the credit granted per valid result of each done job.
	Credit float64 `db:"credit"`
	// Instances by server state.
	Unsent     int64 `db:"unsent"`
	InProgress int64 `db:"in_progress"`
	Over       int64 `db:"over"`
}

type batchJobCounts struct {
	Batch int64 `db:"batch"`
	BatchCounts
}

// workunitCountByBatch reads the job counts of several batches in one
// GROUP BY over the wu_batch index.
const workunitCountByBatch = `SELECT batch, COUNT(*) AS jobs,
  COALESCE(SUM(CASE WHEN canonical_resultid <> 0 AND error_mask = 0 THEN 1 ELSE 0 END), 0) AS done,
  COALESCE(SUM(CASE WHEN error_mask <> 0 THEN 1 ELSE 0 END), 0) AS errored,
  COALESCE(SUM(CASE WHEN (error_mask & ?) <> 0 THEN 1 ELSE 0 END), 0) AS cancelled,
  COALESCE(SUM(CASE WHEN hold_reason <> 0 AND error_mask = 0 THEN 1 ELSE 0 END), 0) AS held,
  COALESCE(SUM(CASE WHEN canonical_resultid = 0 AND error_mask = 0 AND hold_reason = 0 THEN 1 ELSE 0 END), 0) AS pending,
  COALESCE(SUM(CASE WHEN assimilate_state = ? THEN 1 ELSE 0 END), 0) AS assimilated,
  COALESCE(SUM(CASE WHEN canonical_resultid <> 0 AND error_mask = 0 THEN canonical_credit ELSE 0 END), 0) AS credit
FROM workunit WHERE batch IN (?) GROUP BY batch`

type batchResultCount struct {
	Batch       int64             `db:"batch"`
	ServerState state.ServerState `db:"server_state"`
	Count       int64             `db:"n"`
}

// resultCountByBatch counts the instances of several batches by state, over
// the res_batch index.
const resultCountByBatch = `SELECT batch, server_state, COUNT(*) AS n FROM result
WHERE batch IN (?) GROUP BY batch, server_state`

// BatchCountJobs returns the job and instance counts of the given batches,
// with two GROUP BY queries whatever their number; a batch without jobs has
// zero counts.
func (s *Store) BatchCountJobs(ctx context.Context, ids []int64) (map[int64]BatchCounts, error) {
	out := make(map[int64]BatchCounts, len(ids))
	for _, id := range ids {
		out[id] = BatchCounts{}
	}
	if len(ids) == 0 {
		return out, nil
	}
	q, args, err := sqlx.In(workunitCountByBatch, int(state.ErrCancelled), int(state.AssimilateDone), ids)
	if err != nil {
		return nil, fmt.Errorf("count batch jobs: %w", err)
	}
	var jobs []batchJobCounts
	if err := s.db.SelectContext(ctx, &jobs, q, args...); err != nil {
		return nil, fmt.Errorf("count batch jobs: %w", err)
	}
	for _, j := range jobs {
		out[j.Batch] = j.BatchCounts
	}
	results, err := selectIn[batchResultCount](ctx, s, "count batch instances", resultCountByBatch, ids)
	if err != nil {
		return nil, err
	}
	for _, r := range results {
		c := out[r.Batch]
		switch r.ServerState {
		case state.ServerUnsent:
			c.Unsent += r.Count
		case state.ServerInProgress:
			c.InProgress += r.Count
		case state.ServerOver:
			c.Over += r.Count
		}
		out[r.Batch] = c
	}
	return out, nil
}

// cancelCond holds for a job a cancel can still stop: no canonical result,
// not handed to the assimilator, not cancelled already (16 is
// state.ErrCancelled; TestWorkunitCancel checks the bit).
const cancelCond = `canonical_resultid = 0 AND assimilate_state = 0 AND (error_mask & 16) = 0`

// workunitCancel marks jobs cancelled and triggers the transitioner, which
// retires their unsent instances and readies them for assimilation; the
// scheduler aborts the instances in progress. A hold is lifted: a cancelled
// job is finished.
const workunitCancel = `UPDATE workunit SET error_mask = error_mask | 16, hold_reason = 0,
transition_time = LEAST(transition_time - 1, ?), mod_time = ?
WHERE id IN (?) AND ` + cancelCond

const workunitListCancellable = `SELECT id FROM workunit WHERE batch = ? AND id > ? AND ` + cancelCond + `
ORDER BY id LIMIT ?`

// WorkunitCancel cancels job id at time now. It returns ErrConflict if the
// job is past cancelling (it has a canonical result, was assimilated, or is
// cancelled already).
func (s *Store) WorkunitCancel(ctx context.Context, id, now int64) error {
	n, err := s.updateIDs(ctx, workunitCancel, []any{now, now}, []int64{id}, nil)
	if err != nil {
		return fmt.Errorf("cancel workunit %d: %w", id, err)
	}
	if n == 0 {
		return ErrConflict
	}
	return nil
}

const batchMarkCancelled = `UPDATE batch SET cancel_time = ?, state = ? WHERE id = ? AND state = ?`

// BatchCancel cancels batch id at time now: the batch goes to state
// cancelled, then its jobs that can still be stopped are cancelled in short
// chunks. It returns the number of jobs cancelled. Cancelling a cancelled
// batch is allowed and finishes a cancel that was interrupted; a batch that
// is done is ErrConflict.
func (s *Store) BatchCancel(ctx context.Context, id, now int64) (int64, error) {
	n, err := s.exec(ctx, batchMarkCancelled, now, row.BatchCancelled, id, row.BatchInProgress)
	if err != nil {
		return 0, fmt.Errorf("cancel batch %d: %w", id, err)
	}
	if n == 0 {
		b, err := s.BatchGet(ctx, id)
		if err != nil {
			return 0, err
		}
		if b.State != row.BatchCancelled {
			return 0, ErrConflict
		}
	}
	return s.chunkedWith(ctx, fmt.Sprintf("cancel jobs of batch %d", id),
		func(after int64) (string, []any) {
			return workunitListCancellable, []any{id, after, lifecycleChunk}
		}, workunitCancel, []any{now, now}, nil)
}

// requeueSet gives a held job its budget again and releases it; the
// transitioner then creates instances as for a new job.
const requeueSet = `UPDATE workunit SET hold_reason = 0, hold_time = 0,
max_error_results = max_error_results + max_error_results,
max_total_results = max_total_results + max_total_results,
max_success_results = max_success_results + max_success_results,
transition_time = LEAST(transition_time - 1, ?), mod_time = ?`

const workunitRequeue = requeueSet + `
WHERE id IN (?) AND hold_reason <> 0 AND (hold_reason & ?) <> 0`

const workunitListHeldInBatch = `SELECT id FROM workunit
WHERE batch = ? AND id > ? AND hold_reason <> 0 AND (hold_reason & ?) <> 0
ORDER BY id LIMIT ?`

const workunitListHeldForReason = `SELECT id FROM workunit
WHERE hold_reason <> 0 AND (hold_reason & ?) <> 0 AND id > ?
ORDER BY id LIMIT ?`

// anyReason matches every hold reason.
const anyReason = state.ErrorMask(1<<31 - 1)

// WorkunitRequeue releases held job id at time now (see requeueSet). It
// returns ErrConflict if the job is not held.
func (s *Store) WorkunitRequeue(ctx context.Context, id, now int64) error {
	n, err := s.updateIDs(ctx, workunitRequeue, []any{now, now}, []int64{id}, []any{int(anyReason)})
	if err != nil {
		return fmt.Errorf("requeue workunit %d: %w", id, err)
	}
	if n == 0 {
		return ErrConflict
	}
	return nil
}

// WorkunitRequeueBatch releases the held jobs of batch id whose hold reason
// has a bit of reason (0: any reason), in short chunks, and returns how many.
func (s *Store) WorkunitRequeueBatch(ctx context.Context, id int64, reason state.ErrorMask, now int64) (int64, error) {
	if reason == 0 {
		reason = anyReason
	}
	return s.chunkedWith(ctx, fmt.Sprintf("requeue jobs of batch %d", id),
		func(after int64) (string, []any) {
			return workunitListHeldInBatch, []any{id, after, int(reason), lifecycleChunk}
		}, workunitRequeue, []any{now, now}, []any{int(reason)})
}

// WorkunitRequeueReason releases every held job whose hold reason has a bit
// of reason, in short chunks, and returns how many.
func (s *Store) WorkunitRequeueReason(ctx context.Context, reason state.ErrorMask, now int64) (int64, error) {
	if reason == 0 {
		return 0, errors.New("requeue by reason: reason is 0")
	}
	return s.chunkedWith(ctx, fmt.Sprintf("requeue jobs held for %s", reason),
		func(after int64) (string, []any) {
			return workunitListHeldForReason, []any{int(reason), after, lifecycleChunk}
		}, workunitRequeue, []any{now, now}, []any{int(reason)})
}

// chunkedWith pages through ids with list(after) and applies update to each
// page: update's arguments are lead, the page's ids (its "IN (?)"), then
// trail. Each page is its own statement, conditional as update says, so a
// job changed concurrently is simply skipped. It returns the rows changed.
func (s *Store) chunkedWith(ctx context.Context, what string, list func(after int64) (string, []any),
	update string, lead, trail []any) (int64, error) {
	var total int64
	after := int64(0)
	for {
		q, args := list(after)
		var ids []int64
		if err := s.db.SelectContext(ctx, &ids, q, args...); err != nil {
			return total, fmt.Errorf("%s: %w", what, err)
		}
		if len(ids) == 0 {
			return total, nil
		}
		n, err := s.updateIDs(ctx, update, lead, ids, trail)
		if err != nil {
			return total, fmt.Errorf("%s: %w", what, err)
		}
		total += n
		after = ids[len(ids)-1]
		if len(ids) < lifecycleChunk {
			return total, nil
		}
	}
}

// updateIDs runs update, whose one "IN (?)" takes ids, with the arguments
// lead before it and trail after it.
func (s *Store) updateIDs(ctx context.Context, update string, lead []any, ids []int64, trail []any) (int64, error) {
	all := make([]any, 0, len(lead)+len(trail)+1)
	all = append(all, lead...)
	all = append(all, ids)
	all = append(all, trail...)
	q, args, err := sqlx.In(update, all...)
	if err != nil {
		return 0, err
	}
	return s.exec(ctx, q, args...)
}

const workunitListByBatch = `SELECT ` + WorkunitColumns + ` FROM workunit WHERE batch = ? AND id > ?
ORDER BY id LIMIT ?`

// WorkunitListByBatch returns up to limit jobs of batch with id > afterID,
// by id.
func (s *Store) WorkunitListByBatch(ctx context.Context, batch, afterID int64, limit int) ([]row.Workunit, error) {
	var out []row.Workunit
	if err := s.db.SelectContext(ctx, &out, workunitListByBatch, batch, afterID, limit); err != nil {
		return nil, fmt.Errorf("list workunits of batch %d: %w", batch, err)
	}
	return out, nil
}
