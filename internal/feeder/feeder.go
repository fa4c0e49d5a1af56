package feeder

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/shmcache"
	"github.com/taskserver/taskserver/internal/store"
)

// Store is what the feeder reads from the database.
type Store interface {
	PlatformList(ctx context.Context) ([]store.Platform, error)
	AppList(ctx context.Context) ([]store.App, error)
	AppVersionList(ctx context.Context) ([]store.AppVersion, error)
	ResultListUnsentForCache(ctx context.Context, p store.FeederListParams) ([]store.UnsentResult, error)
	ResultListUnsentByPriority(ctx context.Context, p store.FeederListParams) ([]store.UnsentResult, error)
}

// Config tunes a Feeder.
type Config struct {
	// Mod and ModIndex pick the results this feeder caches: id % Mod =
	// ModIndex. Mod 0 means 1.
	Mod, ModIndex int
	// Batch is the number of rows per enumeration query; 0 means 500.
	Batch int
	// ReclaimAfter is how long a scheduler may hold a slot BUSY before the
	// feeder takes it back; 0 means 60s.
	ReclaimAfter time.Duration
	// TablesInterval is how often the static tables are reloaded from the
	// database (and republished if they changed); 0 means 10s.
	TablesInterval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Alive reports whether a claimer process exists; nil means
	// shmcache.ProcessAlive.
	Alive func(pid int32) bool
}

// Feeder fills one shared-memory cache from the database.
type Feeder struct {
	st    Store
	cache *shmcache.Cache
	cfg   Config
	log   *slog.Logger
	m     *metrics

	cursor     int64            // id of the last result looked at in id order
	tables     *shmcache.Tables // last published; nil: none yet by this process
	tablesLoad time.Time        // when the tables were last read
	deprecated map[int64]bool   // apps whose results are not cached, as of tablesLoad
	pid        int32            // claimer id of the feeder's own evictions
}

// New returns a feeder of cache from st. Its metrics are registered on reg.
func New(st Store, cache *shmcache.Cache, cfg Config, log *slog.Logger, reg prometheus.Registerer) *Feeder {
	if cfg.Mod <= 0 {
		cfg.Mod = 1
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	if cfg.ReclaimAfter <= 0 {
		cfg.ReclaimAfter = 60 * time.Second
	}
	if cfg.TablesInterval <= 0 {
		cfg.TablesInterval = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Alive == nil {
		cfg.Alive = shmcache.ProcessAlive
	}
	return &Feeder{st: st, cache: cache, cfg: cfg, log: log, m: newMetrics(reg), pid: int32(os.Getpid())}
}

// RunOnce runs one pass and returns the number of slots it filled.
func (f *Feeder) RunOnce(ctx context.Context) (int, error) {
	now := f.cfg.Now()
	if err := f.publishTables(ctx, now); err != nil {
		return 0, err
	}
	f.cache.SetHeartbeat(now.Unix())
	reclaimed := f.cache.ReclaimStale(now.Unix(), int64(f.cfg.ReclaimAfter/time.Second), f.cfg.Alive)
	f.m.reclaims.Add(float64(reclaimed))

	// The set of cached results is taken before querying: a scheduler marks
	// a result sent in the database before it releases the slot, so a result
	// missing from the set is either still unsent or already gone from the
	// query's answer.
	cached, free, counts := f.scan(now.Unix())
	filled, err := f.fill(ctx, cached, free)
	f.m.fills.Add(float64(filled))
	counts[shmcache.SlotEmpty] -= filled
	counts[shmcache.SlotPresent] += filled
	f.m.setSlots(counts)
	if err != nil {
		return filled, err
	}
	if filled > 0 || reclaimed > 0 {
		f.log.Info("cache refilled", "filled", filled, "reclaimed", reclaimed,
			"empty", counts[shmcache.SlotEmpty], "cursor", f.cursor)
	}
	return filled, nil
}

// publishTables reloads the static tables every TablesInterval and
// publishes them if they differ from what this process last published (or
// it has published nothing yet, as after a restart).
func (f *Feeder) publishTables(ctx context.Context, now time.Time) error {
	if f.tables != nil && now.Sub(f.tablesLoad) < f.cfg.TablesInterval {
		return nil
	}
	var t shmcache.Tables
	var err error
	if t.Platforms, err = f.st.PlatformList(ctx); err != nil {
		return fmt.Errorf("load tables: %w", err)
	}
	if t.Apps, err = f.st.AppList(ctx); err != nil {
		return fmt.Errorf("load tables: %w", err)
	}
	if t.AppVersions, err = f.st.AppVersionList(ctx); err != nil {
		return fmt.Errorf("load tables: %w", err)
	}
	f.tablesLoad = now
	f.deprecated = map[int64]bool{}
	for _, a := range t.Apps {
		if a.Deprecated {
			f.deprecated[a.ID] = true
		}
	}
	if f.tables != nil && reflect.DeepEqual(*f.tables, t) {
		return nil
	}
	if err := f.cache.SetTables(t); err != nil {
		return err
	}
	f.tables = &t
	f.m.tablesPublishes.Inc()
	f.log.Info("published tables", "platforms", len(t.Platforms), "apps", len(t.Apps), "app_versions", len(t.AppVersions))
	return nil
}

// scan reads every slot: the results already cached (in any state but
// EMPTY), the EMPTY slots, and the count of slots by state. Entries of apps
// deprecated since they were cached are taken out (claimed and released as
// a scheduler would), since no scheduler will ever send them.
func (f *Feeder) scan(now int64) (map[int64]bool, []int, [shmcache.NumStates]int) {
	var counts [shmcache.NumStates]int
	n := f.cache.NSlots()
	cached := make(map[int64]bool, n)
	var free []int
	for i := 0; i < n; i++ {
		st, e := f.cache.Slot(i)
		if st == shmcache.SlotPresent && f.deprecated[e.AppID] {
			if cl, ok := f.cache.Claim(i, f.pid, now); ok && f.cache.Release(cl) {
				st = shmcache.SlotEmpty
			}
		}
		if int(st) < len(counts) {
			counts[st]++
		}
		if st == shmcache.SlotEmpty {
			free = append(free, i)
		} else if e.ResultID != 0 {
			cached[e.ResultID] = true
		}
	}
	return cached, free, counts
}

// fill puts uncached unsent results into the free slots: first those with
// priority > 0, then in id order from the cursor, wrapping to 0 at the end
// of the table, until the slots are full or every unsent result has been
// looked at once this pass.
func (f *Feeder) fill(ctx context.Context, cached map[int64]bool, free []int) (int, error) {
	if len(free) == 0 {
		return 0, nil
	}
	filled := 0
	// put caches r in the next free slot; it reports whether slots remain.
	put := func(r store.UnsentResult) bool {
		if cached[r.ID] || f.deprecated[r.AppID] {
			return true
		}
		for len(free) > 0 {
			slot := free[0]
			free = free[1:]
			if f.cache.Fill(slot, entryOf(r)) {
				cached[r.ID] = true
				filled++
				break
			}
		}
		return len(free) > 0
	}
	params := store.FeederListParams{Mod: f.cfg.Mod, ModIndex: f.cfg.ModIndex, Limit: f.cfg.Batch}

	rows, err := f.st.ResultListUnsentByPriority(ctx, params)
	if err != nil {
		return filled, err
	}
	f.m.rows.Add(float64(len(rows)))
	for _, r := range rows {
		if !put(r) {
			return filled, nil
		}
	}

	start := f.cursor
	wrapped := start == 0 // starting from 0, the end of the table is the end of the cycle
	for {
		params.AfterID = f.cursor
		rows, err := f.st.ResultListUnsentForCache(ctx, params)
		if err != nil {
			return filled, err
		}
		f.m.rows.Add(float64(len(rows)))
		for _, r := range rows {
			if wrapped && start != 0 && r.ID > start {
				return filled, nil // came round to where this pass began
			}
			f.cursor = r.ID
			if !put(r) {
				return filled, nil
			}
		}
		if len(rows) < params.Limit {
			f.cursor = 0
			if wrapped {
				return filled, nil
			}
			wrapped = true
		}
	}
}

func entryOf(r store.UnsentResult) shmcache.Entry {
	return shmcache.Entry{
		ResultID:       r.ID,
		WorkunitID:     r.WorkunitID,
		AppID:          r.AppID,
		RscFpopsEst:    r.RscFpopsEst,
		RscMemoryBound: r.RscMemoryBound,
		RscDiskBound:   r.RscDiskBound,
		DelayBound:     r.DelayBound,
		Priority:       r.Priority,
		HRClass:        r.HRClass,
		Flags:          r.SendFlags,
	}
}
