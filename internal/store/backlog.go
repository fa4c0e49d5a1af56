package store

import (
	"context"
	"fmt"

	"github.com/taskserver/taskserver/internal/state"
)

// The backlog counts feed the daemons' backlog gauges. Each reads one
// index range (EXPLAIN shows "Using index", no table rows) and stops at a
// limit, so a huge backlog costs a bounded scan: past the limit the gauge
// shows the limit, which is enough to say the backlog is growing.
const (
	workunitCountDue = `SELECT COUNT(*) FROM (SELECT 1 FROM workunit
WHERE transition_time <= ? LIMIT ?) t`
	resultCountUnsent = `SELECT COUNT(*) FROM (SELECT 1 FROM result
WHERE server_state = ? LIMIT ?) t`
	workunitCountNeedValidate = `SELECT COUNT(*) FROM (SELECT 1 FROM workunit
WHERE appid = ? AND need_validate = 1 LIMIT ?) t`
	workunitCountAssimilateReady = `SELECT COUNT(*) FROM (SELECT 1 FROM workunit
WHERE appid = ? AND assimilate_state = ? LIMIT ?) t`
	workunitCountFileDeleteReady = `SELECT COUNT(*) FROM (SELECT 1 FROM workunit
WHERE file_delete_state = ? LIMIT ?) t`
	resultCountFileDeleteReady = `SELECT COUNT(*) FROM (SELECT 1 FROM result
WHERE file_delete_state = ? LIMIT ?) t`
)

// BacklogCountParams bounds a backlog count.
type BacklogCountParams struct {
	// AppID selects the app, for the counts that are per app.
	AppID int64
	// Now is the Unix time a transition is due by (WorkunitCountDue).
	Now int64
	// Limit caps the count; must be positive.
	Limit int
}

func (s *Store) countBacklog(ctx context.Context, what, query string, p BacklogCountParams, args ...any) (int64, error) {
	if p.Limit <= 0 {
		return 0, fmt.Errorf("count %s: limit %d must be positive", what, p.Limit)
	}
	var n int64
	if err := s.db.GetContext(ctx, &n, query, append(args, p.Limit)...); err != nil {
		return 0, fmt.Errorf("count %s: %w", what, err)
	}
	return n, nil
}

// ResultCountFileDeleteReady counts instances whose output files await
// deletion, up to p.Limit.
func (s *Store) ResultCountFileDeleteReady(ctx context.Context, p BacklogCountParams) (int64, error) {
	return s.countBacklog(ctx, "results awaiting file deletion", resultCountFileDeleteReady, p, int(state.FileDeleteReady))
}

// ResultCountUnsent counts unsent instances, up to p.Limit.
func (s *Store) ResultCountUnsent(ctx context.Context, p BacklogCountParams) (int64, error) {
	return s.countBacklog(ctx, "unsent results", resultCountUnsent, p, int(state.ServerUnsent))
}

// WorkunitCountAssimilateReady counts p.AppID's jobs ready to assimilate,
// up to p.Limit.
func (s *Store) WorkunitCountAssimilateReady(ctx context.Context, p BacklogCountParams) (int64, error) {
	return s.countBacklog(ctx, "jobs awaiting assimilation", workunitCountAssimilateReady, p, p.AppID, int(state.AssimilateReady))
}

// WorkunitCountDue counts jobs due for transition at p.Now, up to p.Limit.
func (s *Store) WorkunitCountDue(ctx context.Context, p BacklogCountParams) (int64, error) {
	return s.countBacklog(ctx, "jobs due for transition", workunitCountDue, p, p.Now)
}

// WorkunitCountFileDeleteReady counts jobs whose input files await
// deletion, up to p.Limit.
func (s *Store) WorkunitCountFileDeleteReady(ctx context.Context, p BacklogCountParams) (int64, error) {
	return s.countBacklog(ctx, "jobs awaiting file deletion", workunitCountFileDeleteReady, p, int(state.FileDeleteReady))
}

// WorkunitCountNeedValidate counts p.AppID's jobs awaiting validation, up
// to p.Limit.
func (s *Store) WorkunitCountNeedValidate(ctx context.Context, p BacklogCountParams) (int64, error) {
	return s.countBacklog(ctx, "jobs awaiting validation", workunitCountNeedValidate, p, p.AppID)
}
