package store

import (
	"context"
	"fmt"

	"github.com/taskserver/taskserver/internal/state"
)

// The status page's reads (package statuspage). They are for an operator
// looking at the project, not for daemons. Its throughput is counted as it
// happens (throughput.go).

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
