package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// Backlog is how much unsent work an app has, in instances.
type Backlog struct {
	// UnsentResults counts results of the app with server_state = UNSENT.
	UnsentResults int64 `db:"unsent_results"`
	// PendingResults is the sum of target_nresults over the app's jobs that
	// have no instances yet (created, awaiting the transitioner): each will
	// become that many unsent results.
	PendingResults int64 `db:"pending_results"`
}

// Total is the backlog counted in unsent instances, present and to come.
func (b Backlog) Total() int64 { return b.UnsentResults + b.PendingResults }

// workunitCountBacklog reads both counts in one statement so they come from
// one snapshot: counted separately, a transitioner commit in between could
// make a job vanish from both (it had no results for the first count, and has
// them by the second). A job without instances is by construction still due
// for transition (transition_time <= now), which lets the second count use
// wu_transition_time instead of scanning the app's jobs.
const workunitCountBacklog = `SELECT
  (SELECT COUNT(*) FROM result r JOIN workunit w ON w.id = r.workunitid
   WHERE r.server_state = ? AND w.appid = ?) AS unsent_results,
  (SELECT COALESCE(SUM(w.target_nresults), 0) FROM workunit w
   WHERE w.transition_time <= ? AND w.appid = ?
     AND NOT EXISTS (SELECT 1 FROM result r WHERE r.workunitid = w.id)) AS pending_results`

// WorkunitCountBacklog returns app appID's unsent backlog at time now.
func (s *Store) WorkunitCountBacklog(ctx context.Context, appID int64, now int64) (Backlog, error) {
	var b Backlog
	err := s.withRetry(ctx, func() error {
		return s.db.GetContext(ctx, &b, workunitCountBacklog, int(state.ServerUnsent), appID, now, appID)
	})
	if err != nil {
		return b, fmt.Errorf("count backlog of app %d: %w", appID, err)
	}
	return b, nil
}

// workunitInsertMulti is workunitInsert with positional placeholders, for
// many rows in one statement.
const workunitInsertMulti = `INSERT INTO workunit (create_time, appid, name, xml_doc, batch, rsc_fpops_est,
rsc_fpops_bound, rsc_memory_bound, rsc_disk_bound, need_validate, canonical_resultid, canonical_credit,
transition_time, delay_bound, error_mask, file_delete_state, assimilate_state, hr_class, opaque,
min_quorum, target_nresults, max_error_results, max_total_results, max_success_results, priority, mod_time,
hold_reason, hold_time, fixed_credit, replication_quorum, known_answer_id, tail_copies, output_template_id) VALUES `

const workunitInsertTuple = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// WorkunitInsertBatch adds jobs, with the shared files they use (refs, may
// be nil), in one transaction: either all of them exist
// afterwards or none do, which is what lets the work generator tell after a
// crash whether a batch it was writing got in. The rows go in with one
// multi-row INSERT per few hundred jobs.
func (s *Store) WorkunitInsertBatch(ctx context.Context, wus []row.Workunit, refs SharedRefs) error {
	if len(wus) == 0 {
		return nil
	}
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		if err := transChunks(len(wus), func(lo, hi int) error {
			args := make([]any, 0, (hi-lo)*33)
			for _, w := range wus[lo:hi] {
				args = append(args, w.CreateTime, w.AppID, w.Name, w.XMLDoc, w.Batch, w.RscFpopsEst,
					w.RscFpopsBound, w.RscMemoryBound, w.RscDiskBound, w.NeedValidate, w.CanonicalResultID,
					w.CanonicalCredit, w.TransitionTime, w.DelayBound, w.ErrorMask, w.FileDeleteState,
					w.AssimilateState, w.HRClass, w.Opaque, w.MinQuorum, w.TargetNResults, w.MaxErrorResults,
					w.MaxTotalResults, w.MaxSuccessResults, w.Priority, w.ModTime, w.HoldReason, w.HoldTime,
					w.FixedCredit, w.ReplicationQuorum, w.KnownAnswerID, w.TailCopies, w.OutputTemplateID)
			}
			_, err := tx.ExecContext(ctx, workunitInsertMulti+transValues(workunitInsertTuple, hi-lo), args...)
			return err
		}); err != nil {
			return err
		}
		return insertSharedRefs(ctx, tx, refs, latestCreateTime(wus))
	})
	if err != nil {
		return fmt.Errorf("insert %d workunits: %w", len(wus), err)
	}
	return nil
}

const workunitGetByName = `SELECT ` + WorkunitColumns + ` FROM workunit WHERE name = ?`

// WorkunitGetByName returns the job called name, or ErrNotFound.
func (s *Store) WorkunitGetByName(ctx context.Context, name string) (row.Workunit, error) {
	var wu row.Workunit
	err := s.db.GetContext(ctx, &wu, workunitGetByName, name)
	if errors.Is(err, sql.ErrNoRows) {
		return wu, fmt.Errorf("workunit %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return wu, fmt.Errorf("get workunit %q: %w", name, err)
	}
	return wu, nil
}

const workunitCountByNamePrefix = `SELECT COUNT(*) FROM workunit WHERE appid = ? AND name LIKE ? AND known_answer_id = 0`

// WorkunitCountByNamePrefix counts app appID's jobs whose name starts with
// prefix (taken literally), known-answer jobs left out: they are named like
// the jobs they were created with. It uses the unique index on name.
func (s *Store) WorkunitCountByNamePrefix(ctx context.Context, appID int64, prefix string) (int64, error) {
	var n int64
	err := s.db.GetContext(ctx, &n, workunitCountByNamePrefix, appID, likePrefix(prefix))
	if err != nil {
		return 0, fmt.Errorf("count workunits named %q*: %w", prefix, err)
	}
	return n, nil
}

// likePrefix turns a literal prefix into a LIKE pattern matching it.
func likePrefix(p string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return r.Replace(p) + "%"
}

// latestCreateTime is the creation time of new jobs, for the shared files they use.
func latestCreateTime(wus []row.Workunit) int64 {
	var t int64
	for _, w := range wus {
		t = max(t, w.CreateTime)
	}
	return t
}
