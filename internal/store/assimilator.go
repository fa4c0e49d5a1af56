package store

import (
	"context"
	"fmt"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// WorkunitListAssimilateParams selects jobs ready for assimilation.
type WorkunitListAssimilateParams struct {
	AppID int64
	// Mod and ModIndex select this replica's jobs: id % Mod = ModIndex.
	Mod, ModIndex int
	// AfterID pages through the jobs: only ids above it are returned, so a
	// caller can step past jobs it chose to skip (0 starts at the first).
	AfterID int64
	Limit   int
}

const workunitListAssimilate = `SELECT ` + WorkunitColumns + ` FROM workunit
WHERE appid = ? AND assimilate_state = ? AND id > ? AND id % ? = ?
ORDER BY id
LIMIT ?`

// WorkunitListAssimilate returns up to p.Limit of app p.AppID's jobs with
// assimilate_state READY and id above p.AfterID, by id.
func (s *Store) WorkunitListAssimilate(ctx context.Context, p WorkunitListAssimilateParams) ([]row.Workunit, error) {
	var out []row.Workunit
	err := withRetry(ctx, func() error {
		out = nil
		return s.db.SelectContext(ctx, &out, workunitListAssimilate, p.AppID, state.AssimilateReady,
			p.AfterID, p.Mod, p.ModIndex, p.Limit)
	})
	if err != nil {
		return nil, fmt.Errorf("list workunits to assimilate: %w", err)
	}
	return out, nil
}

const workunitMarkAssimilated = `UPDATE workunit SET assimilate_state = ?,
transition_time = LEAST(transition_time - 1, ?), mod_time = ?
WHERE id = ? AND assimilate_state = ?`

// WorkunitMarkAssimilated records that job id was handed to the project and
// triggers the transitioner (which then marks its files for deletion). It
// returns ErrConflict if the job was not READY.
func (s *Store) WorkunitMarkAssimilated(ctx context.Context, id, now int64) error {
	n, err := s.exec(ctx, workunitMarkAssimilated, state.AssimilateDone, now, now, id, state.AssimilateReady)
	if err != nil {
		return fmt.Errorf("mark workunit %d assimilated: %w", id, err)
	}
	if n == 0 {
		return ErrConflict
	}
	return nil
}
