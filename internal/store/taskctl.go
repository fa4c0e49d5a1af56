package store

import (
	"context"
	"fmt"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// ResultStateCount is how many results are in one (server_state, outcome)
// pair.
type ResultStateCount struct {
	ServerState state.ServerState `db:"server_state"`
	Outcome     state.Outcome     `db:"outcome"`
	Count       int64             `db:"n"`
}

const resultCountByState = `SELECT server_state, outcome, COUNT(*) AS n FROM result
GROUP BY server_state, outcome ORDER BY server_state, outcome`

// ResultCountByState counts results by server_state and outcome; pairs with
// no results are left out.
func (s *Store) ResultCountByState(ctx context.Context) ([]ResultStateCount, error) {
	var out []ResultStateCount
	if err := s.db.SelectContext(ctx, &out, resultCountByState); err != nil {
		return nil, fmt.Errorf("count results by state: %w", err)
	}
	return out, nil
}

// ResultQueues counts results waiting on a daemon.
type ResultQueues struct {
	Total           int64 `db:"total"`
	FileDeleteReady int64 `db:"file_delete_ready"`
	FileDeleteError int64 `db:"file_delete_error"`
}

const resultCountQueues = `SELECT COUNT(*) AS total,
  COALESCE(SUM(CASE WHEN file_delete_state = ? THEN 1 ELSE 0 END), 0) AS file_delete_ready,
  COALESCE(SUM(CASE WHEN file_delete_state = ? THEN 1 ELSE 0 END), 0) AS file_delete_error
FROM result`

// ResultCountQueues counts results waiting for the file deleter, and those
// it gave up on.
func (s *Store) ResultCountQueues(ctx context.Context) (ResultQueues, error) {
	var q ResultQueues
	err := s.db.GetContext(ctx, &q, resultCountQueues, int(state.FileDeleteReady), int(state.FileDeleteError))
	if err != nil {
		return q, fmt.Errorf("count result queues: %w", err)
	}
	return q, nil
}

// WorkunitQueues counts jobs waiting on each daemon.
type WorkunitQueues struct {
	Total           int64 `db:"total"`
	NeedTransition  int64 `db:"need_transition"`
	NeedValidate    int64 `db:"need_validate"`
	NeedAssimilate  int64 `db:"need_assimilate"`
	FileDeleteReady int64 `db:"file_delete_ready"`
	FileDeleteError int64 `db:"file_delete_error"`
	FileDeleteDone  int64 `db:"file_delete_done"`
	Failed          int64 `db:"failed"`
	// Held counts jobs on hold (hold_reason set), waiting for the operator.
	Held int64 `db:"held"`
}

// workunitCountQueues scans the table once; it is for the operator tool,
// not for daemons.
const workunitCountQueues = `SELECT COUNT(*) AS total,
  COALESCE(SUM(CASE WHEN transition_time <= ? THEN 1 ELSE 0 END), 0) AS need_transition,
  COALESCE(SUM(CASE WHEN need_validate = 1 THEN 1 ELSE 0 END), 0) AS need_validate,
  COALESCE(SUM(CASE WHEN assimilate_state = ? THEN 1 ELSE 0 END), 0) AS need_assimilate,
  COALESCE(SUM(CASE WHEN file_delete_state = ? THEN 1 ELSE 0 END), 0) AS file_delete_ready,
  COALESCE(SUM(CASE WHEN file_delete_state = ? THEN 1 ELSE 0 END), 0) AS file_delete_error,
  COALESCE(SUM(CASE WHEN file_delete_state = ? THEN 1 ELSE 0 END), 0) AS file_delete_done,
  COALESCE(SUM(CASE WHEN error_mask <> 0 THEN 1 ELSE 0 END), 0) AS failed,
  COALESCE(SUM(CASE WHEN hold_reason <> 0 THEN 1 ELSE 0 END), 0) AS held
FROM workunit`

// WorkunitCountQueues counts jobs due for the transitioner at time now,
// waiting for the validator, the assimilator and the file deleter, with
// deleted files (purgeable once old enough), failed, and on hold.
func (s *Store) WorkunitCountQueues(ctx context.Context, now int64) (WorkunitQueues, error) {
	var q WorkunitQueues
	err := s.db.GetContext(ctx, &q, workunitCountQueues, now, int(state.AssimilateReady),
		int(state.FileDeleteReady), int(state.FileDeleteError), int(state.FileDeleteDone))
	if err != nil {
		return q, fmt.Errorf("count workunit queues: %w", err)
	}
	return q, nil
}

const platformGetByName = `SELECT ` + platformColumns + ` FROM platform WHERE name = ?`

// PlatformGetByName returns the platform called name, or ErrNotFound.
func (s *Store) PlatformGetByName(ctx context.Context, name string) (row.Platform, error) {
	var out []row.Platform
	if err := s.db.SelectContext(ctx, &out, platformGetByName, name); err != nil {
		return row.Platform{}, fmt.Errorf("get platform %q: %w", name, err)
	}
	if len(out) == 0 {
		return row.Platform{}, fmt.Errorf("platform %q: %w", name, ErrNotFound)
	}
	return out[0], nil
}
