package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

const resultListByIDs = `SELECT ` + ResultColumns + ` FROM result WHERE id IN (?) ORDER BY id`

// ResultListByIDs returns the instances with the given ids, by id; ids that
// do not exist are skipped.
func (s *Store) ResultListByIDs(ctx context.Context, ids []int64) ([]row.Result, error) {
	return selectIn[row.Result](ctx, s, "list results by id", resultListByIDs, ids)
}

const workunitListByIDs = `SELECT ` + WorkunitColumns + ` FROM workunit WHERE id IN (?) ORDER BY id`

// WorkunitListByIDs returns the jobs with the given ids, by id; ids that do
// not exist are skipped.
func (s *Store) WorkunitListByIDs(ctx context.Context, ids []int64) ([]row.Workunit, error) {
	return selectIn[row.Workunit](ctx, s, "list workunits by id", workunitListByIDs, ids)
}

// HostResult is an instance in progress on a host, with the job fields the
// scheduler needs to estimate the host's queue and to resend lost work.
type HostResult struct {
	ID             int64   `db:"id"`
	Name           string  `db:"name"`
	WorkunitID     int64   `db:"workunitid"`
	AppID          int64   `db:"appid"`
	ReportDeadline int64   `db:"report_deadline"`
	SentTime       int64   `db:"sent_time"`
	AppVersionID   int64   `db:"app_version_id"`
	AppVersionNum  int     `db:"app_version_num"`
	RscFpopsEst    float64 `db:"rsc_fpops_est"`
	// JobDone is set when the job already has a canonical result or an
	// error: the instance is no longer needed.
	JobDone bool `db:"job_done"`
	// XMLDocIn and FileDeleteState serve a report of the instance without
	// reading it again by name.
	XMLDocIn        string                `db:"xml_doc_in"`
	FileDeleteState state.FileDeleteState `db:"file_delete_state"`
}

const resultListHostInProgress = `SELECT r.id, r.name, r.workunitid, w.appid, r.report_deadline, r.sent_time,
r.app_version_id, r.app_version_num, w.rsc_fpops_est, (w.canonical_resultid <> 0 OR w.error_mask <> 0) AS job_done,
COALESCE(r.xml_doc_in, '') AS xml_doc_in, r.file_delete_state
FROM result r JOIN workunit w ON w.id = r.workunitid
WHERE r.hostid = ? AND r.server_state = ?
ORDER BY r.id LIMIT ?`

// ResultListHostInProgress returns up to limit instances IN_PROGRESS on host
// hostID, by id (index res_host_state).
func (s *Store) ResultListHostInProgress(ctx context.Context, hostID int64, limit int) ([]HostResult, error) {
	var out []HostResult
	err := s.hotSelect(ctx, &out, resultListHostInProgress, hostID, state.ServerInProgress, limit)
	if err != nil {
		return nil, fmt.Errorf("list results in progress on host %d: %w", hostID, err)
	}
	return out, nil
}

// detachBatch bounds the instances ResultDetachHost reads per query.
const detachBatch = 500

// hostInProgress is an instance in progress on a host, by id.
type hostInProgress struct {
	ID         int64 `db:"id"`
	WorkunitID int64 `db:"workunitid"`
}

const resultListHostInProgressAfter = `SELECT id, workunitid FROM result
WHERE hostid = ? AND server_state = ? AND id > ? ORDER BY id LIMIT ?`

// The "- 1" makes the value change on every detach even when it already is
// at most now: the transitioner clears transition_time with an update
// conditional on the value it read, so a trigger that left the value alone
// could be lost.
const workunitTrigger = `UPDATE workunit SET transition_time = LEAST(transition_time - 1, ?) WHERE id = ?`

const resultDetach = `UPDATE result SET server_state = ?, outcome = ?, received_time = ?, mod_time = ?
WHERE id = ? AND hostid = ? AND server_state = ?`

// ResultDetachHost sets every instance IN_PROGRESS on host hostID to
// OVER/CLIENT_DETACHED and wakes each one's job, so the transitioner replaces
// them at once instead of waiting for their deadlines: the client that had
// them attached anew and lost them. Each instance is its own short
// transaction (job locked first); one that left IN_PROGRESS meanwhile is
// skipped. It returns how many it marked.
func (s *Store) ResultDetachHost(ctx context.Context, hostID, now int64) (int, error) {
	n := 0
	var after int64
	for {
		var rows []hostInProgress
		if err := s.db.SelectContext(ctx, &rows, resultListHostInProgressAfter, hostID, state.ServerInProgress,
			after, detachBatch); err != nil {
			return n, fmt.Errorf("list results in progress on host %d: %w", hostID, err)
		}
		for _, r := range rows {
			after = r.ID
			err := s.inTx(ctx, func(tx *sqlx.Tx) error {
				if _, err := tx.ExecContext(ctx, workunitTrigger, now, r.WorkunitID); err != nil {
					return err
				}
				return execChanged(ctx, tx, ErrConflict, resultDetach, state.ServerOver, state.OutcomeClientDetached,
					now, now, r.ID, hostID, state.ServerInProgress)
			})
			switch {
			case err == nil:
				n++
			case errors.Is(err, ErrConflict):
			default:
				return n, fmt.Errorf("mark result %d of host %d detached: %w", r.ID, hostID, err)
			}
		}
		if len(rows) < detachBatch {
			return n, nil
		}
	}
}
