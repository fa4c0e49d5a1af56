package feeder

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/shmcache"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// deadPid is the claimer the tests' Alive function reports dead.
const deadPid = 666

// bundle is one test's database, cache, feeder and clock.
type bundle struct {
	t     *testing.T
	ctx   context.Context
	st    *store.Store
	cache *shmcache.Cache
	f     *Service
	q     *countingStore // the feeder's store, counting its queries
	now   time.Time
	appID int64
	wus   int
}

type setupOpts struct {
	slots          int
	batch          int
	mod, modIndex  int
	tablesInterval time.Duration
	refillAt       int
}

func setup(t *testing.T, o setupOpts) *bundle {
	t.Helper()
	b := &bundle{t: t, ctx: context.Background(), st: storetest.New(t), now: time.Unix(1_700_000_000, 0)}
	cache, err := shmcache.Create(filepath.Join(t.TempDir(), "cache"), o.slots)
	if err != nil {
		t.Fatalf("shmcache.Create: %v", err)
	}
	t.Cleanup(func() { cache.Close() })
	b.cache = cache
	b.appID = b.addApp("demo", false)
	cfg := validConfig(o.slots)
	cfg.Mod, cfg.ModIndex, cfg.RefillAt = max(o.mod, 1), o.modIndex, o.refillAt
	cfg.ReclaimAfter = time.Minute
	if o.batch > 0 {
		cfg.Batch = o.batch
	}
	if o.tablesInterval > 0 {
		cfg.TablesInterval = o.tablesInterval
	}
	b.q = &countingStore{Store: b.st}
	b.f = mustNew(t, cfg, Deps{Store: b.q, Cache: cache, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now: func() time.Time { return b.now }, Alive: func(pid int32) bool { return pid != deadPid }})
	return b
}

// validConfig is the flags' defaults for a cache of slots slots.
func validConfig(slots int) Config {
	return Config{Mod: 1, Batch: 500, Slots: slots, ReclaimAfter: 60 * time.Second, TablesInterval: 10 * time.Second}
}

// mustNew is New for a valid cfg.
func mustNew(t testing.TB, cfg Config, deps Deps) *Service {
	t.Helper()
	f, err := New(cfg, deps)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return f
}

func (b *bundle) addApp(name string, deprecated bool) int64 {
	b.t.Helper()
	id := storetest.App(b.t, b.st, storetest.AppOptions{CreateTime: 1, Name: name, UserFriendlyName: name, Deprecated: deprecated, Weight: 1}).ID
	return id
}

// addResult inserts a job of app appID with one instance in server state ss
// and returns the instance's id.
func (b *bundle) addResult(appID int64, ss state.ServerState, priority int) int64 {
	b.t.Helper()
	b.wus++
	name := fmt.Sprintf("wu%d", b.wus)
	wuID := storetest.Job(b.t, b.st, storetest.JobOptions{CreateTime: 1, App: appID, Name: name,
		RscFpopsEst: 1e12, RscMemoryBound: 1e8, RscDiskBound: 1e9, DelayBound: 3600, HRClass: 2,
		Priority: priority, MinQuorum: 1, TargetNResults: 1}).ID
	id := storetest.Instance(b.t, b.st, storetest.InstanceOptions{CreateTime: 1, Job: wuID, ServerState: ss,
		Name: name + "_0", App: appID, Priority: priority}).ID
	return id
}

func (b *bundle) addUnsent(n int) []int64 {
	b.t.Helper()
	var ids []int64
	for i := 0; i < n; i++ {
		ids = append(ids, b.addResult(b.appID, state.ServerUnsent, 0))
	}
	return ids
}

func (b *bundle) runOnce(want int) {
	b.t.Helper()
	n, err := b.f.RunOnce(b.ctx)
	if err != nil {
		b.t.Fatalf("RunOnce: %v", err)
	}
	if n != want {
		b.t.Fatalf("RunOnce filled %d slots, want %d (cache now %v)", n, want, b.cached())
	}
}

// cached returns the result ids in non-empty slots, sorted; it fails the
// test if one appears twice.
func (b *bundle) cached() []int64 {
	b.t.Helper()
	var ids []int64
	for i := 0; i < b.cache.NSlots(); i++ {
		if st, e := b.cache.Slot(i); st != shmcache.SlotEmpty {
			if slices.Contains(ids, e.ResultID) {
				b.t.Fatalf("result %d is in two slots", e.ResultID)
			}
			ids = append(ids, e.ResultID)
		}
	}
	slices.Sort(ids)
	return ids
}

func (b *bundle) wantCached(want ...int64) {
	b.t.Helper()
	slices.Sort(want)
	if got := b.cached(); !slices.Equal(got, want) {
		b.t.Fatalf("cached results = %v, want %v", got, want)
	}
}

// send plays a scheduler sending the result in slot i: claim, mark it sent in
// the database, release.
func (b *bundle) send(i int) int64 {
	b.t.Helper()
	cl, ok := b.cache.Claim(i, 100, b.now.Unix())
	if !ok {
		b.t.Fatalf("Claim(%d) = false", i)
	}
	if _, err := b.st.DB().ExecContext(b.ctx, `UPDATE result SET server_state = ? WHERE id = ?`,
		int(state.ServerInProgress), cl.Entry.ResultID); err != nil {
		b.t.Fatal(err)
	}
	if !b.cache.Release(cl) {
		b.t.Fatalf("Release(slot %d) = false", i)
	}
	return cl.Entry.ResultID
}

// slotOf returns the slot holding result id.
func (b *bundle) slotOf(id int64) int {
	b.t.Helper()
	for i := 0; i < b.cache.NSlots(); i++ {
		if st, e := b.cache.Slot(i); st != shmcache.SlotEmpty && e.ResultID == id {
			return i
		}
	}
	b.t.Fatalf("result %d is not cached", id)
	return -1
}

func TestFillsExactlyTheUnsentResults(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{slots: 16})
	unsent := b.addUnsent(4)
	b.addResult(b.appID, state.ServerInProgress, 0)
	b.addResult(b.appID, state.ServerOver, 0)
	b.addResult(b.appID, state.ServerInactive, 0)
	old := b.addApp("old", true)
	b.addResult(old, state.ServerUnsent, 0) // deprecated app: never cached

	b.runOnce(4)
	b.wantCached(unsent...)
	st, e := b.cache.Slot(b.slotOf(unsent[0]))
	wu, _ := b.st.ResultGet(b.ctx, unsent[0])
	want := shmcache.Entry{ResultID: unsent[0], WorkunitID: wu.WorkunitID, AppID: b.appID, RscFpopsEst: 1e12,
		RscMemoryBound: 1e8, RscDiskBound: 1e9, DelayBound: 3600, HRClass: 2}
	if st != shmcache.SlotPresent || e != want {
		t.Fatalf("slot of result %d = %v %+v, want present %+v", unsent[0], st, e, want)
	}
	if hb := b.cache.Heartbeat(); hb != b.now.Unix() {
		t.Fatalf("Heartbeat = %d, want %d", hb, b.now.Unix())
	}

	// Nothing new: a second pass adds nothing and caches nothing twice.
	b.runOnce(0)
	b.wantCached(unsent...)

	if got := testutil.ToFloat64(b.f.m.fills); got != 4 {
		t.Errorf("fills_total = %v, want 4", got)
	}
	if got := testutil.ToFloat64(b.f.m.slots.WithLabelValues("present")); got != 4 {
		t.Errorf("slots{state=present} = %v, want 4", got)
	}
	if got := testutil.ToFloat64(b.f.m.fillRatio); got != 4.0/16 {
		t.Errorf("cache_fill_ratio = %v, want %v", got, 4.0/16)
	}
}

func TestRespectsMod(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{slots: 32, mod: 3, modIndex: 1})
	var want []int64
	ids := b.addUnsent(12)
	for _, id := range ids {
		if store.Partition(id, 3) == 1 {
			want = append(want, id)
		}
	}
	if len(want) == 0 || len(want) == len(ids) {
		t.Fatalf("instances %v: %d of them hash to partition 1 of 3; the test needs some in and some out", ids, len(want))
	}
	b.runOnce(len(want))
	b.wantCached(want...)
}

func TestRefillsAfterRelease(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{slots: 2})
	ids := b.addUnsent(4)
	b.runOnce(2)
	b.wantCached(ids[0], ids[1])
	b.runOnce(0)
	b.send(b.slotOf(ids[0]))
	b.runOnce(1)
	b.wantCached(ids[1], ids[2])
	b.send(b.slotOf(ids[1]))
	b.send(b.slotOf(ids[2]))
	b.runOnce(1)
	b.wantCached(ids[3])
}

// A result skipped while the cache was full, or put back in the database's
// unsent set later, comes round again when the cursor wraps.
func TestCursorWrapsSoNoResultStarves(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{slots: 3, batch: 2})
	r := b.addUnsent(7)

	b.runOnce(3)
	b.wantCached(r[0], r[1], r[2])
	// r0's scheduler dies holding it; r1 and r2 are sent.
	if _, ok := b.cache.Claim(b.slotOf(r[0]), deadPid, b.now.Unix()); !ok {
		t.Fatal("Claim r0 failed")
	}
	b.send(b.slotOf(r[1]))
	b.send(b.slotOf(r[2]))

	// The dead claim is reclaimed, and the cursor moves on past r2.
	b.now = b.now.Add(time.Second)
	b.runOnce(3)
	b.wantCached(r[3], r[4], r[5])
	if got := testutil.ToFloat64(b.f.m.reclaims); got != 1 {
		t.Fatalf("reclaims_total = %v, want 1", got)
	}
	for _, id := range []int64{r[3], r[4], r[5]} {
		b.send(b.slotOf(id))
	}

	// r6 is after the cursor; r0, still unsent, is found after the wrap.
	b.runOnce(2)
	b.wantCached(r[6], r[0])
}

// With the cache full, the cursor stops at the last result cached; the next
// pass goes on from there rather than starting over.
func TestCursorResumesAfterFullCache(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{slots: 2, batch: 10})
	r := b.addUnsent(5)
	b.runOnce(2)
	b.wantCached(r[0], r[1])
	if b.f.cursor != r[1] {
		t.Fatalf("cursor after a full cache = %d, want %d (the last result cached)", b.f.cursor, r[1])
	}
	// r0 is not sent but released (its slot emptied): the pass still takes
	// r2 first, since it is next in the cycle.
	cl, _ := b.cache.Claim(b.slotOf(r[0]), 100, b.now.Unix())
	b.cache.Release(cl)
	b.runOnce(1)
	b.wantCached(r[1], r[2])
}

func TestHighPriorityFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{slots: 2})
	r := b.addUnsent(3)
	urgent := b.addResult(b.appID, state.ServerUnsent, 5)
	b.runOnce(2)
	b.wantCached(urgent, r[0])
}

func TestTablesRepublishedWhenChanged(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{slots: 1, tablesInterval: 10 * time.Second})
	if _, _, err := b.cache.Tables(); err == nil {
		t.Fatal("Tables before the first pass: no error, want ErrNoTables")
	}
	b.runOnce(0)
	tb, gen1, err := b.cache.Tables()
	if err != nil || len(tb.Apps) != 1 || tb.Apps[0].Name != "demo" || len(tb.AppVersions) != 0 {
		t.Fatalf("Tables after the first pass = %+v, %v; want the demo app and no versions", tb, err)
	}
	pid := storetest.Platform(t, b.st, storetest.PlatformOptions{CreateTime: 1, Name: "x86_64-pc-linux-gnu", UserFriendlyName: "Linux"}).ID
	storetest.AppVersion(t, b.st, storetest.AppVersionOptions{CreateTime: 1, App: b.appID, VersionNum: 100, Platform: pid, XMLDoc: "<app_version/>"})

	b.now = b.now.Add(5 * time.Second) // within the interval: not reloaded
	b.runOnce(0)
	if _, gen, _ := b.cache.Tables(); gen != gen1 {
		t.Fatalf("tables generation moved from %d to %d before the reload interval", gen1, gen)
	}
	b.now = b.now.Add(6 * time.Second)
	b.runOnce(0)
	tb, gen2, err := b.cache.Tables()
	if err != nil || gen2 == gen1 || len(tb.AppVersions) != 1 || len(tb.Platforms) != 1 {
		t.Fatalf("Tables after reload = %+v, gen %d, %v; want the new version and platform, a generation other than %d", tb, gen2, err, gen1)
	}
	b.now = b.now.Add(11 * time.Second) // reloaded, unchanged: not republished
	b.runOnce(0)
	if _, gen, _ := b.cache.Tables(); gen != gen2 {
		t.Fatalf("tables generation moved from %d to %d with nothing changed", gen2, gen)
	}
	if got := testutil.ToFloat64(b.f.m.tablesPublishes); got != 2 {
		t.Fatalf("tables_publishes_total = %v, want 2", got)
	}
}

// A restarted feeder keeps the slots it finds and does not cache their
// results a second time.
func TestRestartKeepsCachedResults(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{slots: 4})
	r := b.addUnsent(3)
	b.runOnce(3)
	path := b.cache.Path()
	b.cache.Close()
	cache, err := shmcache.Create(path, 4)
	if err != nil {
		t.Fatalf("Create after restart: %v", err)
	}
	defer cache.Close()
	f := mustNew(t, validConfig(4), Deps{Store: b.st, Cache: cache, Now: func() time.Time { return b.now }})
	if n, err := f.RunOnce(b.ctx); err != nil || n != 0 {
		t.Fatalf("RunOnce after restart = %d, %v; want 0 filled", n, err)
	}
	b.cache = cache
	b.wantCached(r...)
}

// When an app is deprecated its cached results are evicted and its unsent
// results no longer cached, once the tables are reloaded.
func TestDeprecatedAppEvicted(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{slots: 4, tablesInterval: time.Second})
	other := b.addApp("other", false)
	keep := b.addResult(other, state.ServerUnsent, 0)
	drop := b.addUnsent(2)
	b.runOnce(3)
	b.wantCached(keep, drop[0], drop[1])
	if _, err := b.st.DB().ExecContext(b.ctx, `UPDATE app SET deprecated = 1 WHERE id = ?`, b.appID); err != nil {
		t.Fatal(err)
	}
	b.addUnsent(1)
	b.now = b.now.Add(2 * time.Second)
	b.runOnce(0)
	b.wantCached(keep)
}

func TestSendFlagsReachTheCache(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{slots: 4})
	plain := b.addResult(b.appID, state.ServerUnsent, 0)
	tail := b.addResult(b.appID, state.ServerUnsent, 1000)
	if _, err := b.st.DB().ExecContext(b.ctx, `UPDATE result SET send_flags = ? WHERE id = ?`, row.SendReliableOnly, tail); err != nil {
		t.Fatal(err)
	}
	b.runOnce(2)
	if _, e := b.cache.Slot(b.slotOf(tail)); e.Flags != row.SendReliableOnly || e.Priority != 1000 {
		t.Fatalf("slot of a reliable-only instance = %+v, want Flags %d and priority 1000", e, row.SendReliableOnly)
	}
	if _, e := b.cache.Slot(b.slotOf(plain)); e.Flags != 0 {
		t.Fatalf("slot of a plain instance = %+v, want Flags 0", e)
	}
}

// runOnceQueries runs a pass that must fill want slots and returns how many
// queries it sent.
func (b *bundle) runOnceQueries(want int) int64 {
	b.t.Helper()
	before := b.q.n.Load()
	b.runOnce(want)
	return b.q.n.Load() - before
}

// A few freed slots wait for more (or for MaxWait) so that each query
// fills many; RefillAt free slots are filled at once.
func TestQueriesOnlyWhenEnoughSlotsAreFree(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{slots: 8, refillAt: 4, tablesInterval: time.Hour})
	r := b.addUnsent(20)
	if q := b.runOnceQueries(8); q == 0 {
		t.Fatal("first pass over an empty cache sent no query")
	}
	for _, id := range r[:3] {
		b.send(b.slotOf(id))
	}
	if q := b.runOnceQueries(0); q != 0 {
		t.Fatalf("pass with 3 of RefillAt 4 slots free sent %d queries, want none", q)
	}
	b.now = b.now.Add(time.Second) // MaxWait
	if q := b.runOnceQueries(3); q == 0 {
		t.Fatal("pass after MaxWait filled 3 slots without a query")
	}
	b.wantCached(r[3:11]...)
	for _, id := range r[3:7] {
		b.send(b.slotOf(id))
	}
	b.runOnce(4) // RefillAt slots free: at once, no waiting
	b.wantCached(r[7:15]...)
	if q := b.runOnceQueries(0); q != 0 {
		t.Fatalf("pass over a full cache sent %d queries, want none", q)
	}
}

// Once every unsent result is cached, the feeder asks again only after
// MaxWait however many slots are free: no polling of an empty backlog.
func TestExhaustedBacklogIsPolledOncePerMaxWait(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{slots: 8, tablesInterval: time.Hour})
	r := b.addUnsent(2)
	b.runOnce(2)
	later := b.addUnsent(1)
	for i := 0; i < 3; i++ {
		if q := b.runOnceQueries(0); q != 0 {
			t.Fatalf("pass %d after the backlog ran out sent %d queries, want none before MaxWait", i, q)
		}
	}
	b.now = b.now.Add(time.Second)
	b.runOnce(1)
	b.wantCached(r[0], r[1], later[0])
}

// The beta flags of apps and versions reach the schedulers through the
// published tables, and marking one beta republishes them.
func TestBetaFlagsPublished(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{slots: 1, tablesInterval: 10 * time.Second})
	pid := storetest.Platform(t, b.st, storetest.PlatformOptions{CreateTime: 1, Name: "x86_64-pc-linux-gnu", UserFriendlyName: "Linux"}).ID
	storetest.AppVersion(t, b.st, storetest.AppVersionOptions{CreateTime: 1, App: b.appID, VersionNum: 100, Platform: pid,
		XMLDoc: "<app_version/>", Beta: true})
	b.runOnce(0)
	tb, gen1, err := b.cache.Tables()
	if err != nil || len(tb.AppVersions) != 1 || !tb.AppVersions[0].Beta || len(tb.Apps) != 1 || tb.Apps[0].Beta {
		t.Fatalf("Tables = %+v, %v; want a beta version of an app that is not a beta", tb, err)
	}
	storetest.Exec(t, b.st, `UPDATE app SET beta = 1 WHERE id = ?`, b.appID)
	b.now = b.now.Add(11 * time.Second)
	b.runOnce(0)
	tb, gen2, err := b.cache.Tables()
	if err != nil || gen2 == gen1 || !tb.Apps[0].Beta {
		t.Fatalf("Tables after the app became a beta = %+v, gen %d (was %d), %v; want it republished, beta", tb.Apps, gen2, gen1, err)
	}
}
