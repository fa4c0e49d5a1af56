package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/taskserver/taskserver/internal/row"
)

// WorkunitColumns is the column list for reading a Workunit, exported so
// tests can build their own queries with it.
const WorkunitColumns = `id, create_time, appid, name, COALESCE(xml_doc, '') AS xml_doc, batch, rsc_fpops_est,
rsc_fpops_bound, rsc_memory_bound, rsc_disk_bound, need_validate, canonical_resultid, canonical_credit,
transition_time, delay_bound, error_mask, file_delete_state, assimilate_state, hr_class, opaque,
min_quorum, target_nresults, max_error_results, max_total_results, max_success_results, priority, mod_time,
hold_reason, hold_time, fixed_credit, replication_quorum, known_answer_id, tail_copies, output_template_id`

const workunitInsert = `INSERT INTO workunit (create_time, appid, name, xml_doc, batch, rsc_fpops_est,
rsc_fpops_bound, rsc_memory_bound, rsc_disk_bound, need_validate, canonical_resultid, canonical_credit,
transition_time, delay_bound, error_mask, file_delete_state, assimilate_state, hr_class, opaque,
min_quorum, target_nresults, max_error_results, max_total_results, max_success_results, priority, mod_time,
hold_reason, hold_time, fixed_credit, replication_quorum, known_answer_id, tail_copies, output_template_id)
VALUES (:create_time, :appid, :name, :xml_doc, :batch, :rsc_fpops_est,
:rsc_fpops_bound, :rsc_memory_bound, :rsc_disk_bound, :need_validate, :canonical_resultid, :canonical_credit,
:transition_time, :delay_bound, :error_mask, :file_delete_state, :assimilate_state, :hr_class, :opaque,
:min_quorum, :target_nresults, :max_error_results, :max_total_results, :max_success_results, :priority, :mod_time,
:hold_reason, :hold_time, :fixed_credit, :replication_quorum, :known_answer_id, :tail_copies, :output_template_id)`

// WorkunitGet returns job id, or ErrNotFound.
func (s *Store) WorkunitGet(ctx context.Context, id int64) (row.Workunit, error) {
	var wu row.Workunit
	err := s.db.GetContext(ctx, &wu, `SELECT `+WorkunitColumns+` FROM workunit WHERE id = ?`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return wu, fmt.Errorf("workunit %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return wu, fmt.Errorf("get workunit %d: %w", id, err)
	}
	return wu, nil
}

// ResultColumns is the column list for reading a Result.
const ResultColumns = `id, create_time, workunitid, server_state, outcome, client_state, hostid, userid,
report_deadline, sent_time, received_time, name, cpu_time, COALESCE(xml_doc_in, '') AS xml_doc_in,
COALESCE(xml_doc_out, '') AS xml_doc_out, COALESCE(stderr_out, '') AS stderr_out, batch, file_delete_state,
validate_state, claimed_credit, granted_credit, opaque, random, app_version_num, appid, exit_status,
teamid, priority, mod_time, elapsed_time, app_version_id, send_flags, flops_estimate`

const resultInsert = `INSERT INTO result (create_time, workunitid, server_state, outcome, client_state, hostid,
userid, report_deadline, sent_time, received_time, name, cpu_time, xml_doc_in, xml_doc_out, stderr_out, batch,
file_delete_state, validate_state, claimed_credit, granted_credit, opaque, random, app_version_num, appid,
exit_status, teamid, priority, mod_time, elapsed_time, app_version_id, send_flags)
VALUES (:create_time, :workunitid, :server_state, :outcome, :client_state, :hostid,
:userid, :report_deadline, :sent_time, :received_time, :name, :cpu_time, :xml_doc_in, :xml_doc_out, :stderr_out, :batch,
:file_delete_state, :validate_state, :claimed_credit, :granted_credit, :opaque, :random, :app_version_num, :appid,
:exit_status, :teamid, :priority, :mod_time, :elapsed_time, :app_version_id, :send_flags)`

// ResultGet returns instance id, or ErrNotFound.
func (s *Store) ResultGet(ctx context.Context, id int64) (row.Result, error) {
	var r row.Result
	err := s.db.GetContext(ctx, &r, `SELECT `+ResultColumns+` FROM result WHERE id = ?`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("result %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("get result %d: %w", id, err)
	}
	return r, nil
}

// ResultListByWorkunit returns every instance of job wuid, by id.
func (s *Store) ResultListByWorkunit(ctx context.Context, wuid int64) ([]row.Result, error) {
	var out []row.Result
	err := s.db.SelectContext(ctx, &out, `SELECT `+ResultColumns+` FROM result WHERE workunitid = ? ORDER BY id`, wuid)
	if err != nil {
		return nil, fmt.Errorf("list results of workunit %d: %w", wuid, err)
	}
	return out, nil
}
