package store

import (
	"context"
	"fmt"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// The transitioner's batch pass: batch completion and tail acceleration. Every
// query here reads one batch's jobs through the wu_batch key, never the whole
// workunit table.

// BatchProgress is how far the jobs of one in-progress batch have come.
type BatchProgress struct {
	ID int64 `db:"id"`
	// NJobs counts the batch's jobs.
	NJobs int `db:"njobs"`
	// Unfinished counts the jobs with no canonical instance, no error bit, no
	// hold, and not handed to the assimilator.
	Unfinished int `db:"unfinished"`
	// Assimilated counts the jobs with assimilate_state DONE.
	Assimilated int `db:"assimilated"`
}

// BatchListProgressParams selects a page of in-progress batches.
type BatchListProgressParams struct {
	// AfterID is the last batch id of the previous page; 0 for the first.
	AfterID int64
	// Limit bounds the batches returned.
	Limit int
}

// The page of batches is chosen first (batch_state key), so the counts join
// only that page's jobs (wu_batch key).
const batchListProgress = `SELECT b.id, COUNT(w.id) AS njobs,
COALESCE(SUM(w.canonical_resultid = 0 AND w.error_mask = 0 AND w.hold_reason = 0 AND w.assimilate_state = ?), 0) AS unfinished,
COALESCE(SUM(w.assimilate_state = ?), 0) AS assimilated
FROM (SELECT id FROM batch WHERE state = ? AND id > ? ORDER BY id LIMIT ?) b
LEFT JOIN workunit w ON w.batch = b.id
GROUP BY b.id
ORDER BY b.id`

// BatchListProgress returns a page of the batches in progress, by id, with
// the counts the transitioner's batch pass decides on.
func (s *Store) BatchListProgress(ctx context.Context, p BatchListProgressParams) ([]BatchProgress, error) {
	var out []BatchProgress
	err := s.withRetry(ctx, func() error {
		out = nil
		return s.db.SelectContext(ctx, &out, batchListProgress, state.AssimilateInit, state.AssimilateDone,
			row.BatchInProgress, p.AfterID, p.Limit)
	})
	if err != nil {
		return nil, fmt.Errorf("list batch progress: %w", err)
	}
	return out, nil
}

// The NOT EXISTS re-checks, in the statement that writes, what the caller
// read: a job added or un-assimilated meanwhile keeps the batch open.
const batchMarkDone = `UPDATE batch SET state = ?, completion_time = ?
WHERE id = ? AND state = ?
AND EXISTS (SELECT 1 FROM workunit w WHERE w.batch = ?)
AND NOT EXISTS (SELECT 1 FROM workunit w WHERE w.batch = ? AND w.assimilate_state <> ?)`

// BatchMarkDone marks batch id done at now if it is in progress and has
// jobs, every one of them assimilated; otherwise it changes nothing and
// returns ErrConflict.
func (s *Store) BatchMarkDone(ctx context.Context, id, now int64) error {
	n, err := s.exec(ctx, batchMarkDone, row.BatchDone, now, id, row.BatchInProgress, id, id, state.AssimilateDone)
	if err != nil {
		return fmt.Errorf("mark batch %d done: %w", id, err)
	}
	if n == 0 {
		return ErrConflict
	}
	return nil
}

// WorkunitListTailParams selects a batch's jobs that tail acceleration may
// give one more instance.
type WorkunitListTailParams struct {
	Batch int64
	// Now is the current time (Unix seconds).
	Now int64
	// After is the fraction of the job's delay_bound an instance must have
	// been out for.
	After float64
	// Limit bounds the jobs returned.
	Limit int
}

// TailCandidate is a job that qualifies for a tail copy.
type TailCandidate struct {
	ID int64 `db:"id"`
	// TailCopies is the value read, which WorkunitAddTailCopy is
	// conditional on.
	TailCopies int `db:"tail_copies"`
}

// Unfinished, never accelerated, nothing waiting to be sent (an unsent
// instance would be sent before a new one), an instance out for longer than
// After × delay_bound, and room for one more instance under
// max_total_results. One grouped join over the batch's jobs (wu_batch) and
// their instances (res_wuid): EXISTS subqueries here let MariaDB materialise
// every unsent instance of the table instead.
const workunitListTail = `SELECT w.id, w.tail_copies FROM workunit w JOIN result r ON r.workunitid = w.id
WHERE w.batch = ? AND w.canonical_resultid = 0 AND w.error_mask = 0 AND w.hold_reason = 0
AND w.assimilate_state = ? AND w.tail_copies = 0
GROUP BY w.id, w.tail_copies, w.max_total_results
HAVING SUM(r.server_state IN (?, ?)) = 0
AND SUM(r.server_state = ? AND r.sent_time + ? * w.delay_bound < ?) > 0
AND COUNT(*) < w.max_total_results
ORDER BY w.id
LIMIT ?`

// WorkunitListTail returns the jobs of batch p.Batch that qualify for a tail
// copy, by id.
func (s *Store) WorkunitListTail(ctx context.Context, p WorkunitListTailParams) ([]TailCandidate, error) {
	var out []TailCandidate
	err := s.withRetry(ctx, func() error {
		out = nil
		return s.db.SelectContext(ctx, &out, workunitListTail, p.Batch, state.AssimilateInit,
			state.ServerInactive, state.ServerUnsent, state.ServerInProgress, p.After, p.Now, p.Limit)
	})
	if err != nil {
		return nil, fmt.Errorf("list tail jobs of batch %d: %w", p.Batch, err)
	}
	return out, nil
}

// The trigger makes the transitioner create the extra instance at once.
const workunitAddTailCopy = `UPDATE workunit SET target_nresults = target_nresults + 1,
tail_copies = tail_copies + 1, transition_time = LEAST(transition_time - 1, ?), mod_time = ?
WHERE id = ? AND tail_copies = ? AND canonical_resultid = 0 AND error_mask = 0 AND hold_reason = 0
AND assimilate_state = ?`

// WorkunitAddTailCopy asks for one more instance of job id (tail
// acceleration): target_nresults and tail_copies grow by one and the job is
// triggered. It is conditional on the tail_copies read and on the job still
// being unfinished; otherwise nothing changes and ErrConflict is returned.
func (s *Store) WorkunitAddTailCopy(ctx context.Context, id int64, readTailCopies int, now int64) error {
	n, err := s.exec(ctx, workunitAddTailCopy, now, now, id, readTailCopies, state.AssimilateInit)
	if err != nil {
		return fmt.Errorf("add tail copy to workunit %d: %w", id, err)
	}
	if n == 0 {
		return ErrConflict
	}
	return nil
}
