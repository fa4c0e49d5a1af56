package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/taskserver/taskserver/internal/row"
)

var hostGetByCPID = `SELECT ` + hostSelect + ` FROM host WHERE userid = ? AND host_cpid = ?
ORDER BY id DESC LIMIT 1`

// HostGetByCPID returns user userID's newest host whose client said its
// cross-project host id is cpid, or ErrNotFound. A client that was detached
// and attached again comes back with no host id but the same cpid; finding
// its old row keeps one computer from becoming many. The search runs over
// the user's hosts only (index host_userid), so one user can never take
// over another's host by quoting its cpid.
func (s *Store) HostGetByCPID(ctx context.Context, userID int64, cpid string) (row.Host, error) {
	var h row.Host
	err := s.db.GetContext(ctx, &h, hostGetByCPID, userID, cpid)
	if errors.Is(err, sql.ErrNoRows) {
		return h, ErrNotFound
	}
	if err != nil {
		return h, fmt.Errorf("get host of user %d by cpid: %w", userID, err)
	}
	return h, nil
}
