package store

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// resultListHostGrants reads the newest perHost valid, credited instances
// of each host; the (hostid, server_state) index finds a host's instances.
const resultListHostGrants = `SELECT hostid, granted_credit, rsc_fpops_est FROM (
	SELECT r.hostid, r.granted_credit, w.rsc_fpops_est,
		ROW_NUMBER() OVER (PARTITION BY r.hostid ORDER BY r.id DESC) AS n
	FROM result r JOIN workunit w ON w.id = r.workunitid
	WHERE r.hostid IN (?) AND r.server_state = ? AND r.validate_state = ? AND r.granted_credit > 0
) g WHERE n <= ? ORDER BY hostid, n`

// ResultListHostGrants returns, for each of hostIDs, the grants of its
// newest perHost valid instances with credit, by host and newest first.
func (s *Store) ResultListHostGrants(ctx context.Context, hostIDs []int64, perHost int) ([]row.HostGrant, error) {
	if len(hostIDs) == 0 {
		return nil, nil
	}
	q, args, err := sqlx.In(resultListHostGrants, hostIDs, state.ServerOver, state.ValidateValid, perHost)
	if err != nil {
		return nil, fmt.Errorf("list host grants: %w", err)
	}
	var out []row.HostGrant
	err = s.withRetry(ctx, func() error {
		out = out[:0]
		return s.db.SelectContext(ctx, &out, q, args...)
	})
	if err != nil {
		return nil, fmt.Errorf("list host grants: %w", err)
	}
	return out, nil
}
