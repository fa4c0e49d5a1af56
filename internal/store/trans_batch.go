package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// The transitioner's batched write: the transitions of a whole pass in one
// transaction of a handful of statements, instead of one transaction of
// several statements per job. The guarantees of WorkunitTransition hold per
// job: a job triggered since it was read, or one of whose instances changed,
// is left untouched (ErrConflict for that job alone) while the others are
// written.

// workunitLockTransition locks the batch's job rows, in id order (the order
// every batched writer keeps), and reads the guard.
const workunitLockTransition = `SELECT id, transition_time FROM workunit WHERE id IN (?) ORDER BY id FOR UPDATE`

// resultLockTransition locks the instances the batch changes and reads what
// their changes are conditional on.
const resultLockTransition = `SELECT id, server_state, file_delete_state FROM result WHERE id IN (?) ORDER BY id FOR UPDATE`

// resultInsertNew inserts new instances with the columns the transitioner
// sets; the others take their defaults, the values WorkunitTransition's
// insert of a zero Result wrote.
const resultInsertNew = `INSERT INTO result (create_time, workunitid, server_state, name, xml_doc_in,
xml_doc_out, stderr_out, batch, appid, priority, random, mod_time, send_flags) VALUES `

const resultInsertNewTuple = `(?, ?, ?, ?, ?, '', '', ?, ?, ?, ?, ?, ?)`

// workunitTransitionUpdate writes the jobs of a batch. chk is 1 when an
// instance may have been sent since the job was read (it had an unsent
// one): only then is the new transition_time held down to the deadline of
// an instance sent meanwhile, as in workunitTransition. The guard on
// transition_time repeats what the lock read; the rows are locked, so it
// cannot fail here.
var workunitTransitionUpdate = rowsUpdate{query: `UPDATE workunit w
SET w.need_validate = {nv}, w.error_mask = w.error_mask | {em}, w.hold_reason = {hr}, w.hold_time = {ht},
w.assimilate_state = GREATEST(w.assimilate_state, {ast}), w.file_delete_state = GREATEST(w.file_delete_state, {fds}),
w.transition_time = IF({chk} = 0, {tt}, LEAST({tt}, COALESCE((SELECT MIN(r.report_deadline) FROM result r
    WHERE r.workunitid = w.id AND r.server_state = ` + stateInProgress + ` AND r.report_deadline > {nw}), ` + noTransition + `))),
w.mod_time = {nw}
WHERE {keys} AND w.transition_time = {rtt}`, key: []string{"w.id"},
	cols: []string{"id", "rtt", "nw", "nv", "em", "hr", "ht", "ast", "fds", "tt", "chk"}}

// resultTransitionUpdate writes the instances of a batch.
var resultTransitionUpdate = rowsUpdate{query: `UPDATE result r
SET r.server_state = {ss}, r.outcome = {oc}, r.file_delete_state = {fds}, r.mod_time = {mt}
WHERE {keys}`, key: []string{"r.id"}, cols: []string{"id", "ss", "oc", "fds", "mt"}}

// errBatchFallback stops a batch whose failure may be one job's own (a
// duplicate instance name, a value the server refuses): the batch is then
// written job by job, so that job cannot hold the others back.
var errBatchFallback = errors.New("batch write refused")

// WorkunitTransitionBatch applies the transitions ps in one transaction and
// returns, for each, nil when it was written or ErrConflict when its job was
// triggered, or one of its instances changed, since it was read: that job is
// left as it was (still due) and the rest are written. The transaction locks
// the jobs in id order, then the instances to change, compares what was read
// in Go, and writes the unchanged jobs with one multi-row statement per
// kind: insert new instances, update jobs, update instances.
//
// If the server refuses the batch for a reason that may belong to one job (a
// duplicate instance name, a value too long), nothing of it is written and
// each job is written on its own with WorkunitTransition, so one bad job
// fails alone. The error is for the batch as a whole (nothing written, every
// job still due); a job's own failure in that fallback comes back in its
// slot.
func (s *Store) WorkunitTransitionBatch(ctx context.Context, ps []WorkunitTransitionParams) ([]error, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	seen := make(map[int64]int, len(ps))
	for i, p := range ps {
		if _, dup := seen[p.ID]; dup {
			return nil, fmt.Errorf("transition %d workunits: workunit %d given twice", len(ps), p.ID)
		}
		seen[p.ID] = i
	}
	var out []error
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		out = make([]error, len(ps))
		return transitionBatch(ctx, tx, ps, seen, out)
	})
	if errors.Is(err, errBatchFallback) {
		for i, p := range ps {
			out[i] = s.WorkunitTransition(ctx, p)
		}
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("transition %d workunits: %w", len(ps), err)
	}
	return out, nil
}

// transitionBatch is WorkunitTransitionBatch's transaction. It sets out[i]
// to ErrConflict for each job it leaves alone.
func transitionBatch(ctx context.Context, tx *sqlx.Tx, ps []WorkunitTransitionParams, index map[int64]int, out []error) error {
	ids := make([]int64, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	slices.Sort(ids)
	q, args, err := sqlx.In(workunitLockTransition, ids)
	if err != nil {
		return err
	}
	found := make([]bool, len(ps))
	if err := eachRow(ctx, tx, q, args, func(rows *sqlx.Rows) error {
		var id, tt int64
		if err := rows.Scan(&id, &tt); err != nil {
			return err
		}
		if i, ok := index[id]; ok {
			found[i] = true
			if tt != ps[i].ReadTransitionTime {
				out[i] = ErrConflict
			}
		}
		return nil
	}); err != nil {
		return err
	}
	for i := range ps {
		if !found[i] {
			out[i] = ErrConflict // deleted meanwhile
		}
	}

	// The instances to change, each with the job it belongs to.
	type change struct {
		job int
		c   ResultTransition
	}
	byResult := map[int64]change{}
	for i, p := range ps {
		if out[i] != nil {
			continue
		}
		for _, c := range p.Changes {
			byResult[c.ID] = change{job: i, c: c}
		}
	}
	if len(byResult) > 0 {
		rids := slices.Sorted(func(yield func(int64) bool) {
			for id := range byResult {
				if !yield(id) {
					return
				}
			}
		})
		q, args, err := sqlx.In(resultLockTransition, rids)
		if err != nil {
			return err
		}
		seen := make(map[int64]bool, len(rids))
		if err := eachRow(ctx, tx, q, args, func(rows *sqlx.Rows) error {
			var id int64
			var ss state.ServerState
			var fds state.FileDeleteState
			if err := rows.Scan(&id, &ss, &fds); err != nil {
				return err
			}
			seen[id] = true
			if ch := byResult[id]; ss != ch.c.FromServerState || fds != ch.c.FromFileDeleteState {
				out[ch.job] = ErrConflict
			}
			return nil
		}); err != nil {
			return err
		}
		for id, ch := range byResult {
			if !seen[id] {
				out[ch.job] = ErrConflict
			}
		}
	}

	var newRows []row.Result
	var jobs []int
	type timedChange struct {
		c   ResultTransition
		now int64
	}
	var changes []timedChange
	for i, p := range ps {
		if out[i] != nil {
			continue
		}
		jobs = append(jobs, i)
		newRows = append(newRows, p.NewResults...)
		for _, c := range p.Changes {
			changes = append(changes, timedChange{c: c, now: p.Now})
		}
	}
	if len(jobs) == 0 {
		return nil
	}
	if err := transChunks(len(newRows), func(lo, hi int) error {
		args := make([]any, 0, (hi-lo)*11)
		for _, r := range newRows[lo:hi] {
			args = append(args, r.CreateTime, r.WorkunitID, r.ServerState, r.Name, r.XMLDocIn, r.Batch, r.AppID,
				r.Priority, r.Random, r.ModTime, r.SendFlags)
		}
		_, err := tx.ExecContext(ctx, resultInsertNew+transValues(resultInsertNewTuple, hi-lo), args...)
		return refusal(err)
	}); err != nil {
		return err
	}
	if err := transChunks(len(jobs), func(lo, hi int) error {
		rows := make([][]any, 0, hi-lo)
		for _, i := range jobs[lo:hi] {
			p := ps[i]
			chk := 1
			if p.NoUnsentRead {
				chk = 0
			}
			rows = append(rows, []any{p.ID, p.ReadTransitionTime, p.Now, p.NeedValidate, p.ErrorMask, p.HoldReason,
				p.HoldTime, p.AssimilateState, p.FileDeleteState, p.TransitionTime, chk})
		}
		q, args := workunitTransitionUpdate.expand(rows)
		_, err := tx.ExecContext(ctx, q, args...)
		return refusal(err)
	}); err != nil {
		return err
	}
	return transChunks(len(changes), func(lo, hi int) error {
		rows := make([][]any, 0, hi-lo)
		for _, tc := range changes[lo:hi] {
			c := tc.c
			rows = append(rows, []any{c.ID, c.ServerState, c.Outcome, c.FileDeleteState, tc.now})
		}
		q, args := resultTransitionUpdate.expand(rows)
		_, err := tx.ExecContext(ctx, q, args...)
		return refusal(err)
	})
}

// refusal turns a server error that may belong to one row of a multi-row
// write into errBatchFallback. Deadlocks and lock-wait timeouts stay as they
// are (inTx retries the batch), and so do connection failures (the pass
// fails and the jobs stay due).
func refusal(err error) error {
	var me *mysql.MySQLError
	if err == nil || retryable(err) || !errors.As(err, &me) {
		return err
	}
	return fmt.Errorf("%w: %w", errBatchFallback, err)
}

// eachRow runs query in tx and calls fn for every row.
func eachRow(ctx context.Context, tx *sqlx.Tx, query string, args []any, fn func(*sqlx.Rows) error) error {
	rows, err := tx.QueryxContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
