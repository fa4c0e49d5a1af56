package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/hostav"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/scheduler/decide"
	"github.com/taskserver/taskserver/internal/state"
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

// mergeHostAppVersionDeltas returns a and b as one list in key order (the
// lock order), a key in both summed: jobs of the same day add up, a later
// day's replace an earlier day's.
func mergeHostAppVersionDeltas(a, b []decide.HostAppVersionDelta) []decide.HostAppVersionDelta {
	if len(b) == 0 {
		return a
	}
	type key [2]int64
	at := make(map[key]int, len(a)+len(b))
	var out []decide.HostAppVersionDelta
	for _, list := range [][]decide.HostAppVersionDelta{a, b} {
		for _, d := range list {
			k := key{d.HostID, d.AppVersionID}
			i, ok := at[k]
			if !ok {
				at[k] = len(out)
				out = append(out, d)
				continue
			}
			m := &out[i]
			m.Errors += d.Errors
			switch {
			case d.Sent == 0:
			case m.Sent == 0 || d.Day > m.Day:
				m.Sent, m.Day = d.Sent, d.Day
			case d.Day == m.Day:
				m.Sent += d.Sent
			}
		}
	}
	slices.SortFunc(out, func(x, y decide.HostAppVersionDelta) int {
		return cmp.Or(cmp.Compare(x.HostID, y.HostID), cmp.Compare(x.AppVersionID, y.AppVersionID))
	})
	return out
}

// schedWriteHostAppVersions writes a scheduler batch's host_app_version
// deltas (sorted by key: the lock order), creating the rows it needs;
// quota is the project's daily quota per instance.
func schedWriteHostAppVersions(w *stmtBatch, deltas []decide.HostAppVersionDelta, quota int) {
	rows := make([][]any, len(deltas))
	for i, d := range deltas {
		rows[i] = []any{d.HostID, d.AppVersionID, d.Sent, d.Day, d.Errors, hostav.ShrinkQuota(0, quota, d.Errors)}
	}
	w.insertRows(havSchedInsert, 6, rows, havSchedUpdate, quota, quota, quota)
}

// havValidateRead reads, for the instances a validation judges (locked
// already), what their host_app_version rows learn from a verdict.
const havValidateRead = `SELECT r.id, r.hostid, r.appid, r.app_version_id, r.elapsed_time, r.sent_time, r.received_time,
w.rsc_fpops_est FROM result r JOIN workunit w ON w.id = r.workunitid WHERE r.id IN (?)`

type havJudged struct {
	ID           int64   `db:"id"`
	HostID       int64   `db:"hostid"`
	AppID        int64   `db:"appid"`
	AppVersionID int64   `db:"app_version_id"`
	ElapsedTime  float64 `db:"elapsed_time"`
	SentTime     int64   `db:"sent_time"`
	ReceivedTime int64   `db:"received_time"`
	RscFpopsEst  float64 `db:"rsc_fpops_est"`
}

// havValidateCreate creates the rows a validation needs (a host that got
// its job before host_app_version existed has none) and locks them all, in
// key order: ON DUPLICATE KEY UPDATE takes the exclusive lock at once,
// where INSERT IGNORE would take a shared one that the read's FOR UPDATE
// then upgrades (a deadlock between two validators).
const havValidateCreate = `INSERT INTO host_app_version (host_id, app_version_id) VALUES `

const havValidateCreateSuffix = ` ON DUPLICATE KEY UPDATE host_id = host_id`

const havValidateLock = `SELECT ` + hostAppVersionColumns + ` FROM host_app_version
WHERE host_id IN (?) ORDER BY host_id, app_version_id FOR UPDATE`

// havValidateUpdate writes what the verdicts taught. et_* and turnaround_*
// are the validator's alone, written as computed on the locked row;
// n_valid adds up; consecutive_valid and max_jobs_per_day, which the
// scheduler also writes (an error resets and shrinks them), are written
// only if they still hold what the validator read, so a scheduler's
// error that came between (another node of a cluster, where the row lock
// is local) wins over the validator's growth.
var havValidateUpdate = rowsUpdate{query: `UPDATE host_app_version h
SET h.et_n = {n}, h.et_avg = {avg}, h.et_var = {var}, h.et_median = {med}, h.turnaround_n = {tn},
h.turnaround_avg = {ta}, h.n_valid = h.n_valid + {nv},
h.consecutive_valid = IF(h.consecutive_valid = {cv0}, {cv}, h.consecutive_valid),
h.max_jobs_per_day = IF(h.max_jobs_per_day = {m0}, {m}, h.max_jobs_per_day)
WHERE {keys}`, key: []string{"h.host_id", "h.app_version_id"},
	cols: []string{"h", "a", "n", "avg", "var", "med", "tn", "ta", "nv", "cv0", "cv", "m0", "m"}}

// validateHostAppVersions applies the verdicts of results to their hosts'
// host_app_version rows, inside the validation's transaction (after the
// instances, users and hosts: the lock order every writer of the table
// keeps): a VALID result is hostav.AddValid (elapsed_time over the job's
// rsc_fpops_est, turnaround received_time - sent_time), an INVALID one
// hostav.AddInvalid; other verdicts teach nothing. quota is the project's
// daily quota per instance (the cap of the quota's growth).
func validateHostAppVersions(ctx context.Context, tx *sqlx.Tx, quota int, results []ResultValidation) error {
	verdict := map[int64]state.ValidateState{}
	var ids []int64
	for _, r := range results {
		if r.HostID != 0 && (r.ValidateState == state.ValidateValid || r.ValidateState == state.ValidateInvalid) {
			verdict[r.ID] = r.ValidateState
			ids = append(ids, r.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	judged, err := txSelectIn[havJudged](ctx, tx, havValidateRead, ids)
	if err != nil {
		return fmt.Errorf("read judged results' host_app_version inputs: %w", err)
	}
	// In the order the verdicts came, so a streak counts as it happened.
	byID := make(map[int64]havJudged, len(judged))
	for _, j := range judged {
		byID[j.ID] = j
	}
	type key [2]int64
	var keys []key
	seen := map[key]bool{}
	var hostIDs []int64
	for _, id := range ids {
		j, ok := byID[id]
		if !ok || j.HostID == 0 {
			continue
		}
		k := key{j.HostID, hostav.Key(j.AppVersionID, j.AppID)}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
			hostIDs = append(hostIDs, j.HostID)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := cmp.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return cmp.Compare(a[1], b[1])
	})
	create := make([][]any, len(keys))
	for i, k := range keys {
		create[i] = []any{k[0], k[1]}
	}
	if err := insertRows(ctx, tx, havValidateCreate, 2, create, havValidateCreateSuffix); err != nil {
		return fmt.Errorf("create host_app_version rows: %w", err)
	}
	locked, err := txSelectIn[row.HostAppVersion](ctx, tx, havValidateLock, uniq(hostIDs))
	if err != nil {
		return fmt.Errorf("lock host_app_version rows: %w", err)
	}
	read := map[key]row.HostAppVersion{}
	for _, h := range locked {
		read[key{h.HostID, h.AppVersionID}] = h
	}
	now := make(map[key]row.HostAppVersion, len(keys))
	for k := range seen {
		now[k] = read[k]
	}
	for _, id := range ids {
		j, ok := byID[id]
		if !ok || j.HostID == 0 {
			continue
		}
		k := key{j.HostID, hostav.Key(j.AppVersionID, j.AppID)}
		if verdict[id] == state.ValidateValid {
			turnaround := 0.0
			if j.SentTime > 0 && j.ReceivedTime > j.SentTime {
				turnaround = float64(j.ReceivedTime - j.SentTime)
			}
			now[k] = hostav.AddValid(now[k], j.ElapsedTime, j.RscFpopsEst, turnaround, quota)
		} else {
			now[k] = hostav.AddInvalid(now[k])
		}
	}
	rows := make([][]any, 0, len(keys))
	for _, k := range keys {
		was, h := read[k], now[k]
		rows = append(rows, []any{k[0], k[1], h.EtN, h.EtAvg, h.EtVar, h.EtMedian, h.TurnaroundN, h.TurnaroundAvg,
			h.NValid - was.NValid, was.ConsecutiveValid, h.ConsecutiveValid, was.MaxJobsPerDay, h.MaxJobsPerDay})
	}
	if err := execRows(ctx, tx, havValidateUpdate, rows, -1); err != nil {
		return fmt.Errorf("write host_app_version rows: %w", err)
	}
	return nil
}
