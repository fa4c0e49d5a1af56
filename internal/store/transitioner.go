package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// WorkunitResults is a job with all of its instances, by instance id, as the
// joined enumerations (seed 003 §6) read them.
type WorkunitResults struct {
	Workunit row.Workunit
	Results  []row.Result
}

// WorkunitListDueParams selects the jobs due for transition.
type WorkunitListDueParams struct {
	// Now is the current time; jobs with transition_time <= Now are due.
	Now int64
	// Mod and ModIndex select this replica's jobs: Partition(id, Mod) = ModIndex.
	Mod, ModIndex int
	// Limit bounds the rows (job ⋈ instance) read.
	Limit int
}

// workunitListDue is the paper's joined stream narrowed to the columns the
// state machine decides on (see WorkunitListDue). It is ordered by
// transition_time, id: the order of the wu_transition_time key (InnoDB keys
// end with the primary key), so the server walks the due jobs in key order
// and stops at the limit instead of sorting every due job on each pass, and
// the oldest due job comes first.
var workunitListDue = `SELECT w.id, w.appid, w.name, w.batch, w.transition_time, w.canonical_resultid, w.error_mask,
w.file_delete_state, w.assimilate_state, w.min_quorum, w.target_nresults, w.max_error_results, w.max_total_results,
w.max_success_results, w.priority, w.hold_reason, w.hold_time, w.tail_copies, w.output_template_id,
COALESCE(r.id, 0), COALESCE(r.server_state, 0), COALESCE(r.outcome, 0), COALESCE(r.report_deadline, 0),
COALESCE(r.validate_state, 0), COALESCE(r.file_delete_state, 0)
FROM workunit w LEFT JOIN result r ON r.workunitid = w.id
WHERE w.transition_time <= ? AND ` + partitionFilter("w.id") + `
ORDER BY w.transition_time, w.id
LIMIT ?`

// workunitListDueResults re-reads the instances of the job the limit cut.
const workunitListDueResults = `SELECT id, server_state, outcome, report_deadline, validate_state, file_delete_state
FROM result WHERE workunitid = ? ORDER BY id`

// WorkunitListDue returns the jobs due for transition, oldest due first,
// each with all its instances by id, read as one job ⋈ instance stream (the
// paper's query). Only the columns the transitioner decides on are read:
// of the job, id, appid, name, batch, transition_time, canonical_resultid,
// error_mask, file_delete_state, assimilate_state, min_quorum,
// target_nresults, the max_*_results, priority, hold_reason, hold_time,
// tail_copies and output_template_id; of each instance, id, server_state, outcome, report_deadline,
// validate_state and file_delete_state. The other fields are zero. When the
// limit cuts the last job's instances, they are read again on their own, so
// a job with more instances than the limit still makes progress.
func (s *Store) WorkunitListDue(ctx context.Context, p WorkunitListDueParams) ([]WorkunitResults, error) {
	var out []WorkunitResults
	rowsRead := 0
	err := s.withRetry(ctx, func() error {
		out, rowsRead = out[:0], 0
		rows, err := s.db.QueryContext(ctx, workunitListDue, p.Now, p.Mod, p.ModIndex, p.Limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var w row.Workunit
			var r row.Result
			if err := rows.Scan(&w.ID, &w.AppID, &w.Name, &w.Batch, &w.TransitionTime, &w.CanonicalResultID,
				&w.ErrorMask, &w.FileDeleteState, &w.AssimilateState, &w.MinQuorum, &w.TargetNResults,
				&w.MaxErrorResults, &w.MaxTotalResults, &w.MaxSuccessResults, &w.Priority, &w.HoldReason,
				&w.HoldTime, &w.TailCopies, &w.OutputTemplateID, &r.ID, &r.ServerState, &r.Outcome, &r.ReportDeadline,
				&r.ValidateState, &r.FileDeleteState); err != nil {
				return err
			}
			rowsRead++
			if n := len(out); n == 0 || out[n-1].Workunit.ID != w.ID {
				out = append(out, WorkunitResults{Workunit: w})
			}
			if r.ID != 0 {
				r.WorkunitID = w.ID
				last := &out[len(out)-1]
				last.Results = append(last.Results, r)
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list due workunits: %w", err)
	}
	// The join's order within a job is the instance key's, which is by id,
	// but only the job order is asked of the server.
	for i := range out {
		rs := out[i].Results
		if !slices.IsSortedFunc(rs, byResultID) {
			slices.SortFunc(rs, byResultID)
		}
	}
	if rowsRead >= p.Limit && len(out) > 0 {
		last := &out[len(out)-1]
		var rs []row.Result
		err := s.withRetry(ctx, func() error {
			rs = nil
			return s.db.SelectContext(ctx, &rs, workunitListDueResults, last.Workunit.ID)
		})
		if err != nil {
			return nil, fmt.Errorf("list due workunits: %w", err)
		}
		for i := range rs {
			rs[i].WorkunitID = last.Workunit.ID
		}
		last.Results = rs
	}
	return out, nil
}

func byResultID(a, b row.Result) int { return cmp.Compare(a.ID, b.ID) }

var workunitOldestDue = `SELECT MIN(transition_time) FROM workunit WHERE transition_time <= ? AND ` + partitionFilter("id")

// WorkunitOldestDue returns the smallest transition_time of this replica's
// due jobs, and false when none is due.
func (s *Store) WorkunitOldestDue(ctx context.Context, now int64, mod, modIndex int) (int64, bool, error) {
	var v sql.NullInt64
	err := s.withRetry(ctx, func() error {
		return s.db.GetContext(ctx, &v, workunitOldestDue, now, mod, modIndex)
	})
	if err != nil {
		return 0, false, fmt.Errorf("oldest due workunit: %w", err)
	}
	return v.Int64, v.Valid, nil
}

// ResultTransition is the new state of one instance, written only if the
// instance is still as it was read.
type ResultTransition struct {
	ID int64
	// FromServerState and FromFileDeleteState are the values read.
	FromServerState     state.ServerState
	FromFileDeleteState state.FileDeleteState
	ServerState         state.ServerState
	Outcome             state.Outcome
	FileDeleteState     state.FileDeleteState
}

// WorkunitTransitionParams is one job's transition.
type WorkunitTransitionParams struct {
	ID int64
	// ReadTransitionTime is the transition_time the job was read with; if it
	// changed, someone triggered the job meanwhile and the transition is void.
	ReadTransitionTime int64
	// Now is the current time, stored as mod_time.
	Now int64
	// The job's new values. ErrorMask is ORed in; AssimilateState and
	// FileDeleteState never move a job backwards.
	NeedValidate bool
	ErrorMask    state.ErrorMask
	// HoldReason and HoldTime are written as given: a hold is set, kept or
	// cleared only by a decision on the job as read, which the guard on
	// transition_time keeps current (a requeue or cancel triggers the job).
	HoldReason      state.ErrorMask
	HoldTime        int64
	AssimilateState state.AssimilateState
	FileDeleteState state.FileDeleteState
	TransitionTime  int64
	// NoUnsentRead says the job was read with no unsent instance, so none
	// can have been sent since: WorkunitTransitionBatch then skips looking
	// for one. The zero value always looks.
	NoUnsentRead bool
	// NewResults are inserted as given.
	NewResults []row.Result
	// Changes are applied in order, each conditional on the state read.
	Changes []ResultTransition
}

// workunitTransition is guarded by the transition_time read: every program
// that changes what the transitioner looks at also moves transition_time. The
// new transition_time is also held down to the deadline of any instance sent
// after the job was read: a scheduler's LEAST(transition_time, deadline) does
// not change a transition_time already due, so the guard would not see it.
const workunitTransition = `UPDATE workunit SET need_validate = ?, error_mask = error_mask | ?,
hold_reason = ?, hold_time = ?,
assimilate_state = GREATEST(assimilate_state, ?), file_delete_state = GREATEST(file_delete_state, ?),
transition_time = LEAST(?, COALESCE((SELECT MIN(r.report_deadline) FROM result r
    WHERE r.workunitid = ? AND r.server_state = ? AND r.report_deadline > ?), ?)),
mod_time = ?
WHERE id = ? AND transition_time = ?`

const resultTransition = `UPDATE result SET server_state = ?, outcome = ?, file_delete_state = ?, mod_time = ?
WHERE id = ? AND server_state = ? AND file_delete_state = ?`

// WorkunitTransition applies one transition in one short transaction: the
// job row first (the lock order every program keeps), then new instances,
// then instance changes. If the job was triggered since it was read, an
// instance changed, or a new instance's name exists already, nothing is
// written and ErrConflict is returned: the job is due again and the next
// pass reads it afresh.
func (s *Store) WorkunitTransition(ctx context.Context, p WorkunitTransitionParams) error {
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		if err := execChanged(ctx, tx, ErrConflict, workunitTransition, p.NeedValidate, p.ErrorMask,
			p.HoldReason, p.HoldTime, p.AssimilateState,
			p.FileDeleteState, p.TransitionTime, p.ID, state.ServerInProgress, p.Now, state.NoTransition,
			p.Now, p.ID, p.ReadTransitionTime); err != nil {
			return err
		}
		for _, r := range p.NewResults {
			if _, err := tx.NamedExecContext(ctx, resultInsert, r); err != nil {
				var me *mysql.MySQLError
				if errors.As(err, &me) && me.Number == 1062 { // duplicate result name
					return ErrConflict
				}
				return err
			}
		}
		for _, c := range p.Changes {
			if err := execChanged(ctx, tx, ErrConflict, resultTransition, c.ServerState, c.Outcome, c.FileDeleteState, p.Now,
				c.ID, c.FromServerState, c.FromFileDeleteState); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, ErrConflict) {
		return ErrConflict
	}
	if err != nil {
		return fmt.Errorf("transition workunit %d: %w", p.ID, err)
	}
	return nil
}
