package store

import (
	"context"
	"fmt"

	"github.com/taskserver/taskserver/internal/state"
)

// The status page's reads (package statuspage). They are for an operator
// looking at the project, not for daemons: the throughput counts scan the
// result and workunit tables, so the page caches what they return.

// AppResultCount is how many results of one app are in a server state.
type AppResultCount struct {
	// App is the app's name, or "app <id>" for an app no longer listed.
	App   string `db:"app"`
	Count int64  `db:"n"`
}

const resultCountByApp = `SELECT COALESCE(a.name, CONCAT('app ', r.appid)) AS app, COUNT(*) AS n
FROM result r LEFT JOIN app a ON a.id = r.appid
WHERE r.server_state = ?
GROUP BY r.appid, a.name ORDER BY app`

// ResultCountByApp counts the results in server state ss by app. It reads
// the rows through res_server_state, so it is cheap for the states that
// stay small (in progress), not for OVER.
func (s *Store) ResultCountByApp(ctx context.Context, ss state.ServerState) ([]AppResultCount, error) {
	out := []AppResultCount{}
	if err := s.db.SelectContext(ctx, &out, resultCountByApp, int(ss)); err != nil {
		return nil, fmt.Errorf("count %s results by app: %w", ss, err)
	}
	return out, nil
}

// ThroughputParams are the starts of the windows throughput is counted
// over (Unix seconds; both windows end now).
type ThroughputParams struct {
	HourAgo int64
	DayAgo  int64
}

// ResultThroughput counts results reported and validated in two windows.
// The schema has no validation time, so validation uses mod_time: a result
// counts when its last write falls in the window. The writes that follow a
// verdict (the transitioner marking files for deletion, the file deleter)
// come seconds to minutes later, so the count lags by about that much;
// rows db_purge has deleted are not counted.
type ResultThroughput struct {
	ReportedHour  int64
	ReportedDay   int64
	ValidatedHour int64
	ValidatedDay  int64
}

// resultCountThroughput scans result once (no index has received_time or
// mod_time). A result counts as validated once it has a verdict: valid or
// invalid.
const resultCountThroughput = `SELECT
  COALESCE(SUM(received_time >= ?), 0), COALESCE(SUM(received_time >= ?), 0),
  COALESCE(SUM(validate_state IN (?, ?) AND mod_time >= ?), 0),
  COALESCE(SUM(validate_state IN (?, ?) AND mod_time >= ?), 0)
FROM result WHERE received_time >= ? OR mod_time >= ?`

// ResultCountThroughput counts results reported and validated since each
// of p's times.
func (s *Store) ResultCountThroughput(ctx context.Context, p ThroughputParams) (ResultThroughput, error) {
	var t ResultThroughput
	valid, invalid := int(state.ValidateValid), int(state.ValidateInvalid)
	err := s.db.QueryRowxContext(ctx, resultCountThroughput, p.HourAgo, p.DayAgo,
		valid, invalid, p.HourAgo, valid, invalid, p.DayAgo, p.DayAgo, p.DayAgo).
		Scan(&t.ReportedHour, &t.ReportedDay, &t.ValidatedHour, &t.ValidatedDay)
	if err != nil {
		return t, fmt.Errorf("count result throughput: %w", err)
	}
	return t, nil
}

// workunitCountAssimilated scans workunit (no index has mod_time), like
// WorkunitCountQueues.
const workunitCountAssimilated = `SELECT
  COALESCE(SUM(mod_time >= ?), 0), COALESCE(SUM(mod_time >= ?), 0)
FROM workunit WHERE assimilate_state = ? AND mod_time >= ?`

// WorkunitCountAssimilated counts jobs assimilated since each of p's
// times. Like ResultThroughput's validation count it goes by mod_time,
// which the file deleter rewrites shortly after assimilation.
func (s *Store) WorkunitCountAssimilated(ctx context.Context, p ThroughputParams) (hour, day int64, err error) {
	err = s.db.QueryRowxContext(ctx, workunitCountAssimilated, p.HourAgo, p.DayAgo, int(state.AssimilateDone), p.DayAgo).
		Scan(&hour, &day)
	if err != nil {
		return 0, 0, fmt.Errorf("count assimilated workunits: %w", err)
	}
	return hour, day, nil
}
