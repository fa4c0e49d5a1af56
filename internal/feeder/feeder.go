package feeder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/shmcache"
	"github.com/taskserver/taskserver/internal/store"
)

// Store is what the feeder reads from the database.
type Store interface {
	PlatformList(ctx context.Context) ([]row.Platform, error)
	AppList(ctx context.Context) ([]row.App, error)
	AppVersionList(ctx context.Context) ([]row.AppVersion, error)
	ResultListUnsentForCache(ctx context.Context, p store.FeederListParams) ([]store.UnsentResult, error)
	ResultListUnsentByPriority(ctx context.Context, p store.FeederListParams) ([]store.UnsentResult, error)
}

// Config is the feeder's configuration; each setting has the rules of its
// flag.
type Config struct {
	// Mod and ModIndex pick the results this feeder caches:
	// store.Partition(id, Mod) = ModIndex (--mod, --mod-index), so feeders
	// of separate caches never offer one instance twice.
	Mod, ModIndex int
	// Batch is the number of rows per enumeration query (--batch).
	Batch int
	// Slots is the number of cache slots (--slots): the program creates the
	// cache with this many, and New refuses a cache of another size.
	Slots int
	// ReclaimAfter is how long a scheduler may hold a slot BUSY before the
	// feeder takes it back (--reclaim-after).
	ReclaimAfter time.Duration
	// TablesInterval is how often the static tables are reloaded from the
	// database, and republished if they changed (--tables-interval).
	TablesInterval time.Duration
	// RefillAt is how many EMPTY slots make a pass query the database at
	// once; 0 means a quarter of the slots, at most Batch, at least 1
	// (--refill-at). Fewer empty slots wait up to MaxWait, so that each
	// query fills many slots instead of the one or two schedulers freed
	// since the last.
	RefillAt int
	// MaxWait bounds how long EMPTY slots wait for a query when fewer than
	// RefillAt, and how long the feeder waits before asking again after a
	// query found no more unsent results; 0 means 1s (no flag).
	MaxWait time.Duration
}

// Validate returns every problem with c, each naming its flag.
func (c Config) Validate() error {
	errs := config.CheckPartition(c.Mod, c.ModIndex, c.Batch)
	if c.Slots < 1 || c.Slots > shmcache.MaxSlots {
		errs = append(errs, fmt.Errorf("--slots %d: want 1..%d", c.Slots, shmcache.MaxSlots))
	}
	if c.ReclaimAfter < time.Second {
		errs = append(errs, fmt.Errorf("--reclaim-after %s: want at least 1s", c.ReclaimAfter))
	}
	if c.RefillAt < 0 || c.RefillAt > c.Slots {
		errs = append(errs, fmt.Errorf("--refill-at %d: want 0..--slots", c.RefillAt))
	}
	if c.TablesInterval <= 0 {
		errs = append(errs, fmt.Errorf("--tables-interval %s: want a positive duration", c.TablesInterval))
	}
	if c.MaxWait < 0 {
		errs = append(errs, fmt.Errorf("max wait %s: want 0 (the default) or a positive duration", c.MaxWait))
	}
	return errors.Join(errs...)
}

// Deps are the feeder's collaborators.
type Deps struct {
	Store Store
	// Cache is the shared-memory cache the feeder fills, of Config.Slots
	// slots.
	Cache   *shmcache.Cache
	Log     *slog.Logger     // nil: discard
	Metrics *Metrics         // nil: registered nowhere
	Now     func() time.Time // nil: time.Now
	// Alive reports whether a claimer process exists; nil means
	// shmcache.ProcessAlive.
	Alive func(pid int32) bool
}

// Service fills one shared-memory cache from the database.
type Service struct {
	enumerated int // rows listed since TakeEnumerated
	st         Store
	cache      *shmcache.Cache
	cfg        Config
	log        *slog.Logger
	m          *Metrics
	now        func() time.Time
	alive      func(pid int32) bool

	cursor     int64            // id of the last result looked at in id order
	tables     *shmcache.Tables // last published; nil: none yet by this process
	tablesLoad time.Time        // when the tables were last read
	deprecated map[int64]bool   // apps whose results are not cached, as of tablesLoad
	pid        int32            // claimer id of the feeder's own evictions

	lastQuery time.Time // when the unsent results were last enumerated
	exhausted bool      // that enumeration ended with slots still EMPTY
}

// New returns a feeder of deps.Cache.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if n := deps.Cache.NSlots(); n != cfg.Slots {
		return nil, fmt.Errorf("feeder: cache %s has %d slots, want --slots %d", deps.Cache.Path(), n, cfg.Slots)
	}
	if cfg.RefillAt == 0 {
		cfg.RefillAt = max(1, min(cfg.Slots/4, cfg.Batch))
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = time.Second
	}
	f := &Service{st: deps.Store, cache: deps.Cache, cfg: cfg, log: deps.Log, m: deps.Metrics, now: deps.Now,
		alive: deps.Alive, pid: int32(os.Getpid())}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if f.m == nil {
		f.m = NewMetrics(prometheus.NewRegistry())
	}
	if f.now == nil {
		f.now = time.Now
	}
	if f.alive == nil {
		f.alive = shmcache.ProcessAlive
	}
	return f, nil
}

// RunOnce runs one pass and returns the number of slots it filled. It
// queries the database only when RefillAt slots are EMPTY, or fewer have
// waited MaxWait; and after a query that found every unsent result cached,
// not again before MaxWait. A pass that does not query reads only the
// shared memory, so a busy dispatch costs the database one enumeration per
// RefillAt instances sent, and a full or idle cache costs it nothing.
func (f *Service) RunOnce(ctx context.Context) (int, error) {
	now := f.now()
	if err := f.publishTables(ctx, now); err != nil {
		return 0, err
	}
	f.cache.SetHeartbeat(now.Unix())
	reclaimed := f.cache.ReclaimStale(now.Unix(), int64(f.cfg.ReclaimAfter/time.Second), f.alive)
	f.m.reclaims.Add(float64(reclaimed))

	free, counts := f.scan(now.Unix())
	f.m.setSlots(counts)
	if !f.due(now, len(free)) {
		return 0, nil
	}
	// The set of cached results is taken before querying: a scheduler marks
	// a result sent in the database before it releases the slot, so a result
	// missing from the set is either still unsent or already gone from the
	// query's answer.
	cached := f.cachedSet()
	f.lastQuery = now
	filled, left, err := f.fill(ctx, cached, free)
	f.exhausted = err == nil && left > 0
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

// due reports whether a pass that found free EMPTY slots should query the
// database for unsent results.
func (f *Service) due(now time.Time, free int) bool {
	waited := now.Sub(f.lastQuery) >= f.cfg.MaxWait
	switch {
	case free == 0:
		return false
	case f.exhausted:
		// Every unsent result was cached or looked at: new ones come only
		// from the transitioner, which MaxWait of delay does not hurt.
		return waited
	default:
		return free >= f.cfg.RefillAt || waited
	}
}

// publishTables reloads the static tables every TablesInterval and
// publishes them if they differ from what this process last published (or
// it has published nothing yet, as after a restart).
func (f *Service) publishTables(ctx context.Context, now time.Time) error {
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

// scan reads every slot's state and returns the EMPTY slots and the count
// of slots by state. Entries of apps deprecated since they were cached are
// taken out (claimed and released as a scheduler would), since no scheduler
// will ever send them.
func (f *Service) scan(now int64) ([]int, [shmcache.NumStates]int) {
	var counts [shmcache.NumStates]int
	var free []int
	for i := 0; i < f.cache.NSlots(); i++ {
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
		}
	}
	return free, counts
}

// cachedSet returns the results in slots that are not EMPTY.
func (f *Service) cachedSet() map[int64]bool {
	n := f.cache.NSlots()
	cached := make(map[int64]bool, n)
	for i := 0; i < n; i++ {
		if st, e := f.cache.Slot(i); st != shmcache.SlotEmpty && e.ResultID != 0 {
			cached[e.ResultID] = true
		}
	}
	return cached
}

// fill puts uncached unsent results into the free slots: first those with
// priority > 0, then in id order from the cursor, wrapping to 0 at the end
// of the table, until the slots are full or every unsent result has been
// looked at once this pass. It returns the slots filled and the free slots
// left. Each query asks for as many rows as there are free slots (at most
// Batch), so none is read in vain while the cursor runs ahead of the cached
// results; once it meets cached ones (after a wrap) it asks for Batch rows
// to get past them in few queries.
func (f *Service) fill(ctx context.Context, cached map[int64]bool, free []int) (filled, left int, err error) {
	skipped := false
	// put caches r in the next free slot; it reports whether slots remain.
	put := func(r store.UnsentResult) bool {
		if cached[r.ID] || f.deprecated[r.AppID] {
			skipped = true
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
	params := store.FeederListParams{Mod: f.cfg.Mod, ModIndex: f.cfg.ModIndex, Limit: min(f.cfg.Batch, len(free))}

	rows, err := f.st.ResultListUnsentByPriority(ctx, params)
	if err != nil {
		return filled, len(free), err
	}
	f.m.rows.Add(float64(len(rows)))
	f.enumerated += len(rows)
	for _, r := range rows {
		if !put(r) {
			return filled, 0, nil
		}
	}

	start := f.cursor
	wrapped := start == 0 // starting from 0, the end of the table is the end of the cycle
	for {
		skipped = false
		params.AfterID = f.cursor
		rows, err := f.st.ResultListUnsentForCache(ctx, params)
		if err != nil {
			return filled, len(free), err
		}
		f.m.rows.Add(float64(len(rows)))
		f.enumerated += len(rows)
		for _, r := range rows {
			if wrapped && start != 0 && r.ID > start {
				return filled, len(free), nil // came round to where this pass began
			}
			f.cursor = r.ID
			if !put(r) {
				return filled, 0, nil
			}
		}
		if len(rows) < params.Limit {
			f.cursor = 0
			if wrapped {
				return filled, len(free), nil
			}
			wrapped = true
		}
		if skipped {
			params.Limit = f.cfg.Batch
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

// TakeEnumerated returns the rows this daemon's passes listed since the
// last call (daemon.Enumerator).
func (f *Service) TakeEnumerated() int {
	n := f.enumerated
	f.enumerated = 0
	return n
}
