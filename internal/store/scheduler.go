package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/scheduler/decide"
	"github.com/taskserver/taskserver/internal/state"
)

// ErrAlreadySentToUser is decide.ErrAlreadySentToUser, which ResultSend
// returns.
var ErrAlreadySentToUser = decide.ErrAlreadySentToUser

const resultGetByName = `SELECT ` + ResultColumns + ` FROM result WHERE name = ?`

// ResultGetByName returns the instance called name, or ErrNotFound.
func (s *Store) ResultGetByName(ctx context.Context, name string) (row.Result, error) {
	var r row.Result
	err := s.db.GetContext(ctx, &r, resultGetByName, name)
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("result %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("get result %q: %w", name, err)
	}
	return r, nil
}

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

// TurnaroundWeight is decide.TurnaroundWeight, which ResultReport computes
// with in SQL.
const TurnaroundWeight = decide.TurnaroundWeight

// ResultReportParams is what a host reported about one instance it was sent.
type ResultReportParams struct {
	ResultID   int64
	WorkunitID int64
	HostID     int64
	// FromState and FromOutcome are the instance's state as read: IN_PROGRESS
	// (outcome INIT; FromState 0 means this), or, for a late report, OVER
	// with an outcome LateOutcome accepts. The update happens only if the
	// row still has them.
	FromState   state.ServerState
	FromOutcome state.Outcome
	Outcome     state.Outcome
	ClientState state.ClientState
	ExitStatus  int
	CPUTime     float64
	ElapsedTime float64
	StderrOut   string
	XMLDocOut   string
	// ClaimedCredit is the credit the host's own speed claims for the work.
	ClaimedCredit float64
	// Turnaround is the seconds from send to report; a positive value with
	// a SUCCESS outcome is folded into host.avg_turnaround.
	Turnaround float64
	Now        int64
}

// LateOutcome is decide.LateOutcome, which ResultReport checks.
var LateOutcome = decide.LateOutcome

// The "- 1" makes the value change on every report even when it already is
// at most now: the transitioner clears transition_time with an update
// conditional on the value it read, so a trigger that left the value alone
// could be lost.
const workunitTrigger = `UPDATE workunit SET transition_time = LEAST(transition_time - 1, ?) WHERE id = ?`

// workunitLockDone locks the job first (the lock order every program uses)
// and reads whether it is done: failed, or assimilated.
const workunitLockDone = `SELECT (error_mask <> 0 OR assimilate_state = ?) FROM workunit WHERE id = ? FOR UPDATE`

// A late report can come after the file deleter went over the instance's
// files: putting file_delete_state back from DONE to READY has the output
// just uploaded deleted too, instead of left behind.
const resultReport = `UPDATE result SET server_state = ?, outcome = ?, client_state = ?, exit_status = ?,
cpu_time = ?, elapsed_time = ?, received_time = ?, stderr_out = ?, xml_doc_out = ?, validate_state = ?,
claimed_credit = ?, mod_time = ?,
file_delete_state = IF(file_delete_state = ?, ?, file_delete_state)
WHERE id = ? AND hostid = ? AND server_state = ? AND outcome = ?`

const hostReportError = `UPDATE host SET error_streak = error_streak + 1, consecutive_valid = 0 WHERE id = ?`

const hostReportTurnaround = `UPDATE host SET avg_turnaround =
IF(avg_turnaround > 0, avg_turnaround * ? + ? * ?, ?) WHERE id = ?`

// ResultReport records a reported instance as OVER with its outcome and
// wakes its job's transitioner, in one transaction: the workunit row is
// locked first (the lock order every program uses), then the instance is
// updated only if it is still on p.HostID in the state p.From* says. If it
// is not, nothing changes and the error is ErrConflict.
//
// A success reported for a job that is already done (an error mask, or
// assimilated) gets validate_state TOO_LATE: nothing will ever validate it.
// The host row is updated in the same transaction: a CLIENT_ERROR adds one
// to error_streak and zeroes consecutive_valid; a SUCCESS folds
// p.Turnaround into avg_turnaround (NextAvgTurnaround).
func (s *Store) ResultReport(ctx context.Context, p ResultReportParams) error {
	if p.FromState == 0 {
		p.FromState, p.FromOutcome = state.ServerInProgress, state.OutcomeInit
	}
	if p.FromState != state.ServerInProgress && (p.FromState != state.ServerOver || !LateOutcome(p.FromOutcome)) {
		return fmt.Errorf("report result %d: an instance %s/%s cannot be reported", p.ResultID, p.FromState, p.FromOutcome)
	}
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var done bool
		err := tx.GetContext(ctx, &done, workunitLockDone, state.AssimilateDone, p.WorkunitID)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if _, err := tx.ExecContext(ctx, workunitTrigger, p.Now, p.WorkunitID); err != nil {
			return err
		}
		vs := state.ValidateInit
		if done && p.Outcome == state.OutcomeSuccess {
			vs = state.ValidateTooLate
		}
		if err := execChanged(ctx, tx, ErrConflict, resultReport, state.ServerOver, p.Outcome, p.ClientState, p.ExitStatus,
			p.CPUTime, p.ElapsedTime, p.Now, p.StderrOut, p.XMLDocOut, vs, p.ClaimedCredit,
			p.Now, state.FileDeleteDone, state.FileDeleteReady, p.ResultID, p.HostID, p.FromState, p.FromOutcome); err != nil {
			return err
		}
		switch {
		case p.Outcome == state.OutcomeClientError:
			if _, err := tx.ExecContext(ctx, hostReportError, p.HostID); err != nil {
				return err
			}
		case p.Outcome == state.OutcomeSuccess && p.Turnaround > 0:
			if _, err := tx.ExecContext(ctx, hostReportTurnaround, 1-TurnaroundWeight, p.Turnaround, TurnaroundWeight,
				p.Turnaround, p.HostID); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, ErrConflict) {
		return ErrConflict
	}
	if err != nil {
		return fmt.Errorf("report result %d: %w", p.ResultID, err)
	}
	return nil
}

// ErrHRMismatch is decide.ErrHRMismatch, which ResultSend returns.
var ErrHRMismatch = decide.ErrHRMismatch

// ErrCouldntSend is decide.ErrCouldntSend, which ResultSend wraps.
var ErrCouldntSend = decide.ErrCouldntSend

// ResultSendParams is one unsent instance being sent to a host: a
// decide.Send, as SchedulerCommit takes it.
type ResultSendParams = decide.Send

const workunitLockForSend = `SELECT ` + WorkunitColumns + ` FROM workunit WHERE id = ? FOR UPDATE`

const resultCouldntSend = `UPDATE result SET server_state = ?, outcome = ?, mod_time = ?
WHERE id = ? AND server_state = ?`

// hr_class IN (0, ?): a job not yet bound is bound now; the caller skips the
// statement when the job is already of the host's class, since MySQL counts
// an update that changes nothing as no row.
const workunitBindHRClass = `UPDATE workunit SET hr_class = ? WHERE id = ? AND hr_class IN (0, ?)`

const workunitReplicate = `UPDATE workunit SET min_quorum = GREATEST(min_quorum, replication_quorum),
target_nresults = GREATEST(target_nresults, replication_quorum), transition_time = LEAST(transition_time - 1, ?)
WHERE id = ? AND replication_quorum > min_quorum`

const workunitUserInsert = `INSERT IGNORE INTO workunit_user (workunitid, userid, resultid) VALUES (?, ?, ?)`

const workunitWakeBy = `UPDATE workunit SET transition_time = LEAST(transition_time, ?) WHERE id = ?`

const resultSend = `UPDATE result SET server_state = ?, hostid = ?, userid = ?, sent_time = ?,
report_deadline = ?, app_version_id = ?, app_version_num = ?, mod_time = ?
WHERE id = ? AND server_state = ?`

// ResultSend claims an UNSENT instance for a host in one transaction:
//   - it locks the job (the lock order every program uses); if
//     p.CheckWorkunit refuses it, or it is gone, the instance becomes
//     OVER/COULDNT_SEND, the job is woken, and the error wraps
//     ErrCouldntSend;
//   - with p.HRClass it binds the job to the host's class, or fails with
//     ErrHRMismatch;
//   - with p.Replicate it raises the job's quorum (adaptive replication);
//   - it records (job, user) in workunit_user, whose primary key is what
//     keeps two instances of one job from ever reaching one user, even when
//     two of the user's hosts ask at once; a row already there means
//     ErrAlreadySentToUser;
//   - it moves the job's transition_time no later than the deadline, so the
//     transitioner wakes to time the instance out;
//   - it moves the instance to IN_PROGRESS only if it is still UNSENT;
//     otherwise the error is ErrConflict.
//
// On any error but ErrCouldntSend nothing changes.
func (s *Store) ResultSend(ctx context.Context, p ResultSendParams) error {
	var unsendable error
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		unsendable = nil
		var wu row.Workunit
		err := tx.GetContext(ctx, &wu, workunitLockForSend, p.WorkunitID)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			unsendable = fmt.Errorf("workunit %d: %w", p.WorkunitID, ErrNotFound)
		case err != nil:
			return err
		case p.CheckWorkunit != nil:
			unsendable = p.CheckWorkunit(wu)
		}
		if unsendable != nil {
			if _, err := tx.ExecContext(ctx, workunitTrigger, p.Now, p.WorkunitID); err != nil {
				return err
			}
			return execChanged(ctx, tx, ErrConflict, resultCouldntSend, state.ServerOver, state.OutcomeCouldntSend,
				p.Now, p.ResultID, state.ServerUnsent)
		}
		if p.HRClass != 0 && wu.HRClass != p.HRClass {
			if err := execChanged(ctx, tx, ErrHRMismatch, workunitBindHRClass, p.HRClass, p.WorkunitID, p.HRClass); err != nil {
				return err
			}
		}
		if p.Replicate {
			if _, err := tx.ExecContext(ctx, workunitReplicate, p.Now, p.WorkunitID); err != nil {
				return err
			}
		}
		if err := execChanged(ctx, tx, ErrAlreadySentToUser, workunitUserInsert, p.WorkunitID, p.UserID, p.ResultID); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, workunitWakeBy, p.ReportDeadline, p.WorkunitID); err != nil {
			return err
		}
		return execChanged(ctx, tx, ErrConflict, resultSend, state.ServerInProgress, p.HostID, p.UserID, p.Now,
			p.ReportDeadline, p.AppVersionID, p.AppVersionNum, p.Now, p.ResultID, state.ServerUnsent)
	})
	if errors.Is(err, ErrConflict) || errors.Is(err, ErrAlreadySentToUser) || errors.Is(err, ErrHRMismatch) {
		return err
	}
	if err != nil {
		return fmt.Errorf("send result %d to host %d: %w", p.ResultID, p.HostID, err)
	}
	if unsendable != nil {
		return fmt.Errorf("result %d: %w: %w", p.ResultID, ErrCouldntSend, unsendable)
	}
	return nil
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
