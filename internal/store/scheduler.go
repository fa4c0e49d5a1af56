package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"
	"github.com/taskserver/taskserver/internal/state"
)

// ErrAlreadySentToUser means the job already has an instance that went to
// this user (on any of their hosts): BOINC never lets one volunteer return
// two instances of one job, or they could validate their own forgery.
var ErrAlreadySentToUser = errors.New("job already sent to this user")

const resultGetByName = `SELECT ` + ResultColumns + ` FROM result WHERE name = ?`

// ResultGetByName returns the instance called name, or ErrNotFound.
func (s *Store) ResultGetByName(ctx context.Context, name string) (Result, error) {
	var r Result
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
func (s *Store) ResultListByIDs(ctx context.Context, ids []int64) ([]Result, error) {
	return selectIn[Result](ctx, s, "list results by id", resultListByIDs, ids)
}

const workunitListByIDs = `SELECT ` + WorkunitColumns + ` FROM workunit WHERE id IN (?) ORDER BY id`

// WorkunitListByIDs returns the jobs with the given ids, by id; ids that do
// not exist are skipped.
func (s *Store) WorkunitListByIDs(ctx context.Context, ids []int64) ([]Workunit, error) {
	return selectIn[Workunit](ctx, s, "list workunits by id", workunitListByIDs, ids)
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
}

const resultListHostInProgress = `SELECT r.id, r.name, r.workunitid, w.appid, r.report_deadline, r.sent_time,
r.app_version_id, r.app_version_num, w.rsc_fpops_est, (w.canonical_resultid <> 0 OR w.error_mask <> 0) AS job_done
FROM result r JOIN workunit w ON w.id = r.workunitid
WHERE r.hostid = ? AND r.server_state = ?
ORDER BY r.id LIMIT ?`

// ResultListHostInProgress returns up to limit instances IN_PROGRESS on host
// hostID, by id (index res_host_state).
func (s *Store) ResultListHostInProgress(ctx context.Context, hostID int64, limit int) ([]HostResult, error) {
	var out []HostResult
	err := s.db.SelectContext(ctx, &out, resultListHostInProgress, hostID, state.ServerInProgress, limit)
	if err != nil {
		return nil, fmt.Errorf("list results in progress on host %d: %w", hostID, err)
	}
	return out, nil
}

// ResultReportParams is what a host reported about one instance it was sent.
type ResultReportParams struct {
	ResultID    int64
	WorkunitID  int64
	HostID      int64
	Outcome     state.Outcome
	ClientState state.ClientState
	ExitStatus  int
	CPUTime     float64
	ElapsedTime float64
	StderrOut   string
	XMLDocOut   string
	Now         int64
}

// The "- 1" makes the value change on every report even when it already is
// at most now: the transitioner clears transition_time with an update
// conditional on the value it read, so a trigger that left the value alone
// could be lost.
const workunitTrigger = `UPDATE workunit SET transition_time = LEAST(transition_time - 1, ?) WHERE id = ?`

const resultReport = `UPDATE result SET server_state = ?, outcome = ?, client_state = ?, exit_status = ?,
cpu_time = ?, elapsed_time = ?, received_time = ?, stderr_out = ?, xml_doc_out = ?, validate_state = ?,
mod_time = ?
WHERE id = ? AND hostid = ? AND server_state = ?`

// ResultReport records a reported instance as OVER with its outcome and
// wakes its job's transitioner, in one transaction: the workunit row is
// locked first (the lock order every program uses), then the instance is
// updated only if it is still IN_PROGRESS on p.HostID. If it is not,
// nothing changes and the error is ErrConflict.
func (s *Store) ResultReport(ctx context.Context, p ResultReportParams) error {
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, workunitTrigger, p.Now, p.WorkunitID); err != nil {
			return err
		}
		if err := execChanged(ctx, tx, ErrConflict, resultReport, state.ServerOver, p.Outcome, p.ClientState, p.ExitStatus,
			p.CPUTime, p.ElapsedTime, p.Now, p.StderrOut, p.XMLDocOut, state.ValidateInit,
			p.Now, p.ResultID, p.HostID, state.ServerInProgress); err != nil {
			return err
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

// ResultSendParams is one unsent instance being sent to a host.
type ResultSendParams struct {
	ResultID       int64
	WorkunitID     int64
	HostID         int64
	UserID         int64
	AppVersionID   int64
	AppVersionNum  int
	ReportDeadline int64
	Now            int64
}

const workunitUserInsert = `INSERT IGNORE INTO workunit_user (workunitid, userid, resultid) VALUES (?, ?, ?)`

const workunitWakeBy = `UPDATE workunit SET transition_time = LEAST(transition_time, ?) WHERE id = ?`

const resultSend = `UPDATE result SET server_state = ?, hostid = ?, userid = ?, sent_time = ?,
report_deadline = ?, app_version_id = ?, app_version_num = ?, mod_time = ?
WHERE id = ? AND server_state = ?`

// ResultSend claims an UNSENT instance for a host in one transaction:
//   - it records (job, user) in workunit_user, whose primary key is what
//     keeps two instances of one job from ever reaching one user, even when
//     two of the user's hosts ask at once; a row already there means
//     ErrAlreadySentToUser and nothing changes;
//   - it moves the job's transition_time no later than the deadline, so the
//     transitioner wakes to time the instance out;
//   - it moves the instance to IN_PROGRESS only if it is still UNSENT;
//     otherwise nothing changes and the error is ErrConflict.
func (s *Store) ResultSend(ctx context.Context, p ResultSendParams) error {
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		if err := execChanged(ctx, tx, ErrAlreadySentToUser, workunitUserInsert, p.WorkunitID, p.UserID, p.ResultID); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, workunitWakeBy, p.ReportDeadline, p.WorkunitID); err != nil {
			return err
		}
		if err := execChanged(ctx, tx, ErrConflict, resultSend, state.ServerInProgress, p.HostID, p.UserID, p.Now,
			p.ReportDeadline, p.AppVersionID, p.AppVersionNum, p.Now, p.ResultID, state.ServerUnsent); err != nil {
			return err
		}
		return nil
	})
	if errors.Is(err, ErrConflict) || errors.Is(err, ErrAlreadySentToUser) {
		return err
	}
	if err != nil {
		return fmt.Errorf("send result %d to host %d: %w", p.ResultID, p.HostID, err)
	}
	return nil
}
