package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/hostav"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/scheduler/decide"
)

// hostAppVersionColumns is row.HostAppVersion's column list.
const hostAppVersionColumns = `host_id, app_version_id, et_n, et_avg, et_var, et_median, turnaround_n, turnaround_avg,
consecutive_valid, max_jobs_per_day, n_jobs_today, day, n_errors, n_valid`

// havJSON is a host's host_app_version rows as one JSON value, a scalar
// subquery of the scheduler's joined per-request read (one round trip):
// an array of arrays in hostAppVersionJSONOrder, NULL for none. Doubles
// come out at full precision on MariaDB and MySQL.
const havJSON = `(SELECT JSON_ARRAYAGG(JSON_ARRAY(app_version_id, et_n, et_avg, et_var, et_median, turnaround_n,
turnaround_avg, consecutive_valid, max_jobs_per_day, n_jobs_today, day, n_errors, n_valid))
FROM host_app_version WHERE host_id = ?)`

// parseHostAppVersions reads havJSON's value for host hostID.
func parseHostAppVersions(hostID int64, doc []byte) ([]row.HostAppVersion, error) {
	if len(doc) == 0 {
		return nil, nil
	}
	var rows [][13]float64
	if err := json.Unmarshal(doc, &rows); err != nil {
		return nil, fmt.Errorf("host %d: read host_app_version rows: %w", hostID, err)
	}
	out := make([]row.HostAppVersion, len(rows))
	for i, r := range rows {
		out[i] = row.HostAppVersion{HostID: hostID, AppVersionID: int64(r[0]), EtN: int(r[1]), EtAvg: r[2],
			EtVar: r[3], EtMedian: r[4], TurnaroundN: int(r[5]), TurnaroundAvg: r[6], ConsecutiveValid: int(r[7]),
			MaxJobsPerDay: int(r[8]), NJobsToday: int(r[9]), Day: int64(r[10]), NErrors: int(r[11]), NValid: int(r[12])}
	}
	return out, nil
}

const hostAppVersionListByHosts = `SELECT ` + hostAppVersionColumns + ` FROM host_app_version WHERE host_id IN (?)
ORDER BY host_id, app_version_id`

// HostAppVersionListByHost returns what host hostID has shown of each app
// version it ran, by version id (negative generalized ids first).
func (s *Store) HostAppVersionListByHost(ctx context.Context, hostID int64) ([]row.HostAppVersion, error) {
	return selectIn[row.HostAppVersion](ctx, s, fmt.Sprintf("list host_app_version of host %d", hostID),
		hostAppVersionListByHosts, []int64{hostID})
}

const havSchedInsert = `INSERT INTO host_app_version (host_id, app_version_id, n_jobs_today, day, n_errors,
max_jobs_per_day) VALUES `

// havSchedUpdate applies a scheduler batch's sends and errors to a row that
// exists, relative to what it holds (concurrent batches and the validator
// lose nothing): jobs today add up on the same day and start again on a
// later one (never go back to an earlier one: another scheduler's clock);
// errors shrink the quota as hostav.ShrinkQuota does (its three arguments
// are the project quota), end the valid streak and add to n_errors.
// Assignments run left to right, so each reads the columns before this
// statement or VALUES().
const havSchedUpdate = ` ON DUPLICATE KEY UPDATE
n_jobs_today = IF(VALUES(day) = day, n_jobs_today + VALUES(n_jobs_today),
  IF(VALUES(day) > day, VALUES(n_jobs_today), n_jobs_today)),
day = GREATEST(day, VALUES(day)),
max_jobs_per_day = IF(VALUES(n_errors) = 0 OR ? <= 0, max_jobs_per_day,
  GREATEST(1, LEAST(IF(max_jobs_per_day <= 0, ?, max_jobs_per_day), ?) - VALUES(n_errors))),
consecutive_valid = IF(VALUES(n_errors) > 0, 0, consecutive_valid),
n_errors = n_errors + VALUES(n_errors)`

// schedWriteHostAppVersions writes a scheduler batch's host_app_version
// deltas (sorted by key: the lock order), creating the rows it needs;
// quota is the project's daily quota per instance.
func schedWriteHostAppVersions(ctx context.Context, tx *sqlx.Tx, deltas []decide.HostAppVersionDelta, quota int) error {
	if len(deltas) == 0 {
		return nil
	}
	rows := make([][]any, len(deltas))
	for i, d := range deltas {
		rows[i] = []any{d.HostID, d.AppVersionID, d.Sent, d.Day, d.Errors, hostav.ShrinkQuota(0, quota, d.Errors)}
	}
	if err := insertRows(ctx, tx, havSchedInsert, 6, rows, havSchedUpdate, quota, quota, quota); err != nil {
		return fmt.Errorf("write %d host_app_version rows: %w", len(rows), err)
	}
	return nil
}
