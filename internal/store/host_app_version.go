package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/taskserver/taskserver/internal/row"
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
