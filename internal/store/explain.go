package store

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
)

const hostPlatformIDs = `SELECT DISTINCT av.platformid FROM result r
JOIN app_version av ON av.id = r.app_version_id
WHERE r.hostid = ? AND r.app_version_id > 0
ORDER BY av.platformid`

// HostPlatformIDs returns the platforms of the app versions host hostID has
// been sent. The host row does not record the platforms its client reports;
// these are the ones it is known to run (taskctl host explain).
func (s *Store) HostPlatformIDs(ctx context.Context, hostID int64) ([]int64, error) {
	var out []int64
	if err := s.db.SelectContext(ctx, &out, hostPlatformIDs, hostID); err != nil {
		return nil, fmt.Errorf("list platforms of host %d: %w", hostID, err)
	}
	return out, nil
}

const workunitUserListSent = `SELECT workunitid FROM workunit_user WHERE userid = ? AND workunitid IN (?)
ORDER BY workunitid`

// WorkunitUserListSent returns which of the jobs wuIDs already had an
// instance sent to user userID (workunit_user rows): the scheduler sends no
// second one.
func (s *Store) WorkunitUserListSent(ctx context.Context, userID int64, wuIDs []int64) ([]int64, error) {
	if len(wuIDs) == 0 {
		return nil, nil
	}
	q, args, err := sqlx.In(workunitUserListSent, userID, wuIDs)
	if err != nil {
		return nil, fmt.Errorf("list jobs sent to user %d: %w", userID, err)
	}
	var out []int64
	if err := s.db.SelectContext(ctx, &out, q, args...); err != nil {
		return nil, fmt.Errorf("list jobs sent to user %d: %w", userID, err)
	}
	return out, nil
}
