package store

import (
	"context"
	"fmt"

	"github.com/taskserver/taskserver/internal/state"
)

// FileDeleteListParams selects rows whose files are ready for deletion.
type FileDeleteListParams struct {
	// Mod and ModIndex pick this replica's rows: id % Mod = ModIndex.
	Mod, ModIndex int
	// Limit bounds the rows returned.
	Limit int
}

const workunitListFileDeleteReady = `SELECT ` + WorkunitColumns + ` FROM workunit
WHERE file_delete_state = ? AND id % ? = ? ORDER BY id LIMIT ?`

// WorkunitListFileDeleteReady returns jobs whose input files may be deleted
// (file_delete_state = READY), by id.
func (s *Store) WorkunitListFileDeleteReady(ctx context.Context, p FileDeleteListParams) ([]Workunit, error) {
	var out []Workunit
	err := withRetry(ctx, func() error {
		out = out[:0]
		return s.db.SelectContext(ctx, &out, workunitListFileDeleteReady,
			int(state.FileDeleteReady), max(p.Mod, 1), p.ModIndex, p.Limit)
	})
	if err != nil {
		return nil, fmt.Errorf("list workunits ready for file deletion: %w", err)
	}
	return out, nil
}

const resultListFileDeleteReady = `SELECT ` + ResultColumns + ` FROM result
WHERE file_delete_state = ? AND id % ? = ? ORDER BY id LIMIT ?`

// ResultListFileDeleteReady returns instances whose output files may be
// deleted (file_delete_state = READY), by id.
func (s *Store) ResultListFileDeleteReady(ctx context.Context, p FileDeleteListParams) ([]Result, error) {
	var out []Result
	err := withRetry(ctx, func() error {
		out = out[:0]
		return s.db.SelectContext(ctx, &out, resultListFileDeleteReady,
			int(state.FileDeleteReady), max(p.Mod, 1), p.ModIndex, p.Limit)
	})
	if err != nil {
		return nil, fmt.Errorf("list results ready for file deletion: %w", err)
	}
	return out, nil
}

const workunitFileDeleteFinish = `UPDATE workunit SET file_delete_state = ?, mod_time = ?
WHERE id = ? AND file_delete_state = ?`

// WorkunitFileDeleteFinish moves job id from READY to to (DONE or ERROR) at
// time now. If the job is no longer READY it returns ErrConflict.
func (s *Store) WorkunitFileDeleteFinish(ctx context.Context, id int64, to state.FileDeleteState, now int64) error {
	n, err := s.exec(ctx, workunitFileDeleteFinish, int(to), now, id, int(state.FileDeleteReady))
	if err != nil {
		return fmt.Errorf("set file_delete_state of workunit %d: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("workunit %d file_delete_state: %w", id, ErrConflict)
	}
	return nil
}

const resultFileDeleteFinish = `UPDATE result SET file_delete_state = ?, mod_time = ?
WHERE id = ? AND file_delete_state = ?`

// ResultFileDeleteFinish moves instance id from READY to to (DONE or ERROR)
// at time now. If the instance is no longer READY it returns ErrConflict.
func (s *Store) ResultFileDeleteFinish(ctx context.Context, id int64, to state.FileDeleteState, now int64) error {
	n, err := s.exec(ctx, resultFileDeleteFinish, int(to), now, id, int(state.FileDeleteReady))
	if err != nil {
		return fmt.Errorf("set file_delete_state of result %d: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("result %d file_delete_state: %w", id, ErrConflict)
	}
	return nil
}
