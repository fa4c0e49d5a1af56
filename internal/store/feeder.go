package store

import (
	"context"
	"fmt"

	"github.com/taskserver/taskserver/internal/state"
)

// UnsentResult is an unsent instance with the fields of its job that the
// scheduler matches hosts on: what the feeder puts in a cache slot.
type UnsentResult struct {
	ID             int64   `db:"id"`
	WorkunitID     int64   `db:"workunitid"`
	AppID          int64   `db:"appid"`
	RscFpopsEst    float64 `db:"rsc_fpops_est"`
	RscMemoryBound float64 `db:"rsc_memory_bound"`
	RscDiskBound   float64 `db:"rsc_disk_bound"`
	DelayBound     int64   `db:"delay_bound"`
	Priority       int32   `db:"priority"`
	HRClass        int32   `db:"hr_class"`
	// SendFlags is result.send_flags (SendReliableOnly).
	SendFlags int32 `db:"send_flags"`
}

// FeederListParams selects unsent instances for the feeder's cache.
type FeederListParams struct {
	// AfterID is the cursor: only instances with a larger id are returned.
	// ResultListUnsentByPriority ignores it.
	AfterID int64
	// Mod and ModIndex pick this feeder's instances: Partition(id, Mod) = ModIndex.
	Mod, ModIndex int
	// Limit bounds the rows returned.
	Limit int
}

// unsentColumns and unsentFrom are the paper's joined enumeration: each
// instance comes with its job's fields in one row. Deprecated apps are left
// to the caller, which has the app table at hand: joining app here makes
// MariaDB sort the whole unsent set instead of reading res_feeder in order
// and stopping at the limit.
const unsentColumns = `SELECT r.id, r.workunitid, w.appid, w.rsc_fpops_est, w.rsc_memory_bound,
w.rsc_disk_bound, w.delay_bound, r.priority, w.hr_class, r.send_flags`

const unsentFrom = `
FROM result r
JOIN workunit w ON w.id = r.workunitid
WHERE r.server_state = ?`

var resultListUnsentForCache = unsentColumns + unsentFrom + ` AND r.id > ? AND ` + partitionFilter("r.id") + `
ORDER BY r.id LIMIT ?`

// ResultListUnsentForCache returns unsent instances (server_state = UNSENT)
// with id > p.AfterID, by id, joined with their jobs. A result shorter than
// p.Limit means the end of the table was reached: the caller wraps its cursor
// to 0 so every unsent instance comes round.
func (s *Store) ResultListUnsentForCache(ctx context.Context, p FeederListParams) ([]UnsentResult, error) {
	var out []UnsentResult
	err := s.withRetry(ctx, func() error {
		out = out[:0]
		return s.db.SelectContext(ctx, &out, resultListUnsentForCache,
			int(state.ServerUnsent), p.AfterID, max(p.Mod, 1), p.ModIndex, p.Limit)
	})
	if err != nil {
		return nil, fmt.Errorf("list unsent results after %d: %w", p.AfterID, err)
	}
	return out, nil
}

var resultListUnsentByPriority = unsentColumns + unsentFrom + ` AND r.priority > 0 AND ` + partitionFilter("r.id") + `
ORDER BY r.priority DESC, r.id LIMIT ?`

// ResultListUnsentByPriority returns the unsent instances of highest
// priority (priority > 0 only), most urgent first, so the feeder can cache
// them ahead of the id-order cycle.
func (s *Store) ResultListUnsentByPriority(ctx context.Context, p FeederListParams) ([]UnsentResult, error) {
	var out []UnsentResult
	err := s.withRetry(ctx, func() error {
		out = out[:0]
		return s.db.SelectContext(ctx, &out, resultListUnsentByPriority,
			int(state.ServerUnsent), max(p.Mod, 1), p.ModIndex, p.Limit)
	})
	if err != nil {
		return nil, fmt.Errorf("list unsent results by priority: %w", err)
	}
	return out, nil
}
