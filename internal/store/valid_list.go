package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// WorkunitListValidateParams selects jobs awaiting validation.
type WorkunitListValidateParams struct {
	AppID int64
	// AfterID skips jobs with an id up to it (0 starts from the first).
	AfterID int64
	// Mod and ModIndex select this replica's jobs: Partition(id, Mod) = ModIndex.
	Mod, ModIndex int
	// Limit bounds the rows (job ⋈ instance) read.
	Limit int
	// AllColumns reads every column of the instances, for a checker that
	// may look at any (a project's own); without it the instances carry
	// only what the validator and the built-in checkers use (see
	// WorkunitListValidate).
	AllColumns bool
}

// validateJobColumns are the job columns validation uses: what chooses the
// candidates and the reference, the quorum and the credit (the FLOP bound
// bounds a claim).
const validateJobColumns = `w.id, w.appid, w.name, w.batch, w.rsc_fpops_est, w.rsc_fpops_bound, w.need_validate, w.canonical_resultid,
w.canonical_credit, w.error_mask, w.file_delete_state, w.assimilate_state, w.min_quorum, w.target_nresults,
w.max_total_results, w.fixed_credit, w.known_answer_id`

// validateResultColumns are the instance columns validation uses, with the
// cheap numbers a checker may want; the COALESCEs read a job without
// matching instances (the LEFT JOIN's NULLs) as instance id 0.
const validateResultColumns = `COALESCE(r.id, 0), COALESCE(r.workunitid, 0), COALESCE(r.server_state, 0),
COALESCE(r.outcome, 0), COALESCE(r.validate_state, 0), COALESCE(r.hostid, 0), COALESCE(r.userid, 0),
COALESCE(r.name, ''), COALESCE(r.xml_doc_in, ''), COALESCE(r.file_delete_state, 0), COALESCE(r.claimed_credit, 0),
COALESCE(r.appid, 0), COALESCE(r.cpu_time, 0), COALESCE(r.elapsed_time, 0), COALESCE(r.exit_status, 0),
COALESCE(r.received_time, 0), COALESCE(r.app_version_id, 0)`

// validateResultMoreColumns are the rest of the instance's columns, read
// with AllColumns.
const validateResultMoreColumns = `, COALESCE(r.create_time, 0), COALESCE(r.client_state, 0),
COALESCE(r.report_deadline, 0), COALESCE(r.sent_time, 0), COALESCE(r.xml_doc_out, ''), COALESCE(r.stderr_out, ''),
COALESCE(r.batch, 0), COALESCE(r.granted_credit, 0), COALESCE(r.opaque, 0), COALESCE(r.random, 0),
COALESCE(r.app_version_num, 0), COALESCE(r.teamid, 0), COALESCE(r.priority, 0), COALESCE(r.mod_time, 0),
COALESCE(r.send_flags, 0)`

// The join keeps only the instances validation looks at: reported
// successes, the candidates and the canonical instance (which is one:
// nothing changes its outcome once it is valid). A job with none
// still comes out, once, so that its need_validate is cleared. The order
// is the job id alone, which the index (appid, need_validate) gives
// without a sort; each job's instances are put in id order in Go.
var workunitListValidateFrom = `
FROM workunit w LEFT JOIN result r ON r.workunitid = w.id
	AND r.server_state = ? AND r.outcome = ?
WHERE w.appid = ? AND w.need_validate = 1 AND w.id > ? AND ` + partitionFilter("w.id") + `
ORDER BY w.id
LIMIT ?`

var workunitListValidate = `SELECT ` + validateJobColumns + `, ` + validateResultColumns + workunitListValidateFrom

var workunitListValidateAll = `SELECT ` + validateJobColumns + `, ` + validateResultColumns +
	validateResultMoreColumns + workunitListValidateFrom

// workunitListValidateOne reads one job's instances, for the job the LIMIT
// cut.
const workunitListValidateOne = `SELECT ` + validateJobColumns + `, ` + validateResultColumns + `
FROM workunit w LEFT JOIN result r ON r.workunitid = w.id
	AND r.server_state = ? AND r.outcome = ?
WHERE w.id = ?`

const workunitListValidateOneAll = `SELECT ` + validateJobColumns + `, ` + validateResultColumns +
	validateResultMoreColumns + `
FROM workunit w LEFT JOIN result r ON r.workunitid = w.id
	AND r.server_state = ? AND r.outcome = ?
WHERE w.id = ?`

// WorkunitListValidate returns app p.AppID's jobs with need_validate set
// and an id above p.AfterID, by id, each with its reported successes (its
// canonical instance among them) by id, read as one job ⋈ instance stream of at
// most p.Limit rows (a job the limit cuts is read again whole). It reads
// only the columns validation uses: of the job, those named in
// validateJobColumns; of each instance, those in validateResultColumns, or
// all of them with p.AllColumns.
func (s *Store) WorkunitListValidate(ctx context.Context, p WorkunitListValidateParams) ([]WorkunitResults, error) {
	list, one := workunitListValidate, workunitListValidateOne
	if p.AllColumns {
		list, one = workunitListValidateAll, workunitListValidateOneAll
	}
	var out []WorkunitResults
	var rowsRead int
	err := s.withRetry(ctx, func() error {
		var err error
		out, rowsRead, err = s.scanValidate(ctx, p.AllColumns, list, state.ServerOver, state.OutcomeSuccess,
			p.AppID, p.AfterID, p.Mod, p.ModIndex, p.Limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list workunits to validate: %w", err)
	}
	if rowsRead >= p.Limit && len(out) > 0 {
		last := &out[len(out)-1]
		err := s.withRetry(ctx, func() error {
			again, _, err := s.scanValidate(ctx, p.AllColumns, one, state.ServerOver, state.OutcomeSuccess, last.Workunit.ID)
			if err == nil && len(again) == 1 {
				last.Results = again[0].Results
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("list workunits to validate: workunit %d: %w", last.Workunit.ID, err)
		}
	}
	return out, nil
}

// scanValidate runs one of the listing queries and groups its rows by job.
func (s *Store) scanValidate(ctx context.Context, all bool, query string, args ...any) ([]WorkunitResults, int, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var out []WorkunitResults
	n := 0
	for rows.Next() {
		var w row.Workunit
		var r row.Result
		dest := []any{&w.ID, &w.AppID, &w.Name, &w.Batch, &w.RscFpopsEst, &w.RscFpopsBound, &w.NeedValidate, &w.CanonicalResultID,
			&w.CanonicalCredit, &w.ErrorMask, &w.FileDeleteState, &w.AssimilateState, &w.MinQuorum, &w.TargetNResults,
			&w.MaxTotalResults, &w.FixedCredit, &w.KnownAnswerID,
			&r.ID, &r.WorkunitID, &r.ServerState, &r.Outcome, &r.ValidateState, &r.HostID, &r.UserID, &r.Name,
			&r.XMLDocIn, &r.FileDeleteState, &r.ClaimedCredit, &r.AppID, &r.CPUTime, &r.ElapsedTime, &r.ExitStatus,
			&r.ReceivedTime, &r.AppVersionID}
		if all {
			dest = append(dest, &r.CreateTime, &r.ClientState, &r.ReportDeadline, &r.SentTime, &r.XMLDocOut,
				&r.StderrOut, &r.Batch, &r.GrantedCredit, &r.Opaque, &r.Random, &r.AppVersionNum, &r.TeamID,
				&r.Priority, &r.ModTime, &r.SendFlags)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, 0, err
		}
		n++
		if k := len(out); k == 0 || out[k-1].Workunit.ID != w.ID {
			out = append(out, WorkunitResults{Workunit: w})
		}
		if r.ID != 0 {
			last := &out[len(out)-1]
			last.Results = append(last.Results, r)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	for i := range out {
		slices.SortFunc(out[i].Results, func(a, b row.Result) int { return cmp.Compare(a.ID, b.ID) })
	}
	return out, n, nil
}
