package feeder

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/shmcache"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// Dispatch-phase shape: the feeder program's default 1,000 slots and 50ms idle
// sleep, drained at claimRate instances a second as schedulers would.
const (
	benchInstances = 10000
	benchSlots     = 1000
	claimRate      = 2000
	claimTick      = 2 * time.Millisecond
)

// BenchmarkFeederUnderClaims runs the feeder's real loop over a cache that a
// claimer drains at about 2,000 instances a second, a few every
// millisecond, marking each claimed instance sent in the database (one
// statement per tick) before releasing its slot, as a scheduler does. It
// reports per instance dispatched the feeder's queries, the database
// server's CPU, this process's CPU and the share of claims that found the
// cache dry. The sub-benchmark claimer-only runs the same claimer with the
// cache refilled from memory instead of by the feeder: subtract its CPU
// figures to get the feeder's own. Run it against a private server:
//
//	TEST_MYSQL_DSN='root@tcp(127.0.0.1:3315)/' go test -run '^$' -bench FeederUnderClaims -benchtime 1x ./internal/feeder
func BenchmarkFeederUnderClaims(b *testing.B) {
	storetest.SkipWithoutServer(b)
	st := storetest.New(b)
	ctx := context.Background()
	appID := storetest.App(b, st, storetest.AppOptions{CreateTime: 1, Name: "bench", UserFriendlyName: "Bench", Weight: 1}).ID
	seq := 0
	for _, realFeeder := range []bool{false, true} {
		name := "claimer-only"
		if realFeeder {
			name = "feeder"
		}
		b.Run(name, func(b *testing.B) {
			m := storetest.NewMeter(b, st.DB().DB)
			var queries, claimed, dry int64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				seq++
				ids := seedUnsent(b, st, appID, fmt.Sprintf("it%d", seq))
				cache, err := shmcache.Create(filepath.Join(b.TempDir(), "cache"), benchSlots)
				if err != nil {
					b.Fatal(err)
				}
				cs := &countingStore{Store: st}
				var svc daemon.Service = &memoryFiller{cache: cache, ids: ids}
				if realFeeder {
					svc = mustNew(b, validConfig(benchSlots), Deps{Store: cs, Cache: cache})
				}
				m.Start(b)

				loopCtx, stop := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() {
					done <- daemon.Loop(loopCtx, slog.New(slog.NewTextHandler(io.Discard, nil)),
						daemon.NewLoopMetrics(prometheus.NewRegistry(), "feeder"), svc, daemon.LoopOptions{Sleep: 50 * time.Millisecond})
				}()
				c, d := claimAll(b, st, cache)
				stop()
				if err := <-done; err != nil {
					b.Fatalf("feeder loop: %v", err)
				}
				m.Stop(b)
				queries, claimed, dry = queries+cs.n.Load(), claimed+c, dry+d
				cache.Close()
			}
			m.Report(b, int(claimed), "inst")
			b.ReportMetric(float64(queries)/float64(claimed), "feeder-queries/inst")
			b.ReportMetric(float64(dry)/float64(claimed+dry), "dry-claims")
		})
	}
}

// memoryFiller fills free slots from a list in memory: the claimer's
// baseline, with no database work of its own.
type memoryFiller struct {
	cache *shmcache.Cache
	ids   []int64
}

func (m *memoryFiller) RunOnce(context.Context) (int, error) {
	filled := 0
	for i := 0; i < m.cache.NSlots() && len(m.ids) > 0; i++ {
		if st, _ := m.cache.Slot(i); st == shmcache.SlotEmpty && m.cache.Fill(i, shmcache.Entry{ResultID: m.ids[0]}) {
			m.ids = m.ids[1:]
			filled++
		}
	}
	return filled, nil
}

// claimAll claims benchInstances entries at about claimRate a second and
// returns how many it claimed and how many claims found the cache dry.
func claimAll(b *testing.B, st *store.Store, cache *shmcache.Cache) (claimed, dry int64) {
	b.Helper()
	perTick := int(claimRate * claimTick / time.Second)
	tick := time.NewTicker(claimTick)
	defer tick.Stop()
	deadline := time.Now().Add(60 * time.Second)
	next := 0
	for claimed < benchInstances {
		<-tick.C
		if time.Now().After(deadline) {
			b.Fatalf("claimed %d of %d instances in 60s", claimed, benchInstances)
		}
		var cls []shmcache.Claim
		for seen := 0; seen < cache.NSlots() && len(cls) < perTick; seen++ {
			i := next
			next = (next + 1) % cache.NSlots()
			if _, ok := cache.Peek(i); !ok {
				continue
			}
			if cl, ok := cache.Claim(i, 100, time.Now().Unix()); ok {
				cls = append(cls, cl)
			}
		}
		dry += int64(perTick - len(cls))
		if len(cls) == 0 {
			continue
		}
		ids := make([]int64, len(cls))
		for j, cl := range cls {
			ids[j] = cl.Entry.ResultID
		}
		args := []any{int(state.ServerInProgress), int(state.ServerUnsent)}
		for _, id := range ids {
			args = append(args, id)
		}
		res, err := st.DB().Exec(`UPDATE result SET server_state = ? WHERE server_state = ? AND id IN (?`+
			strings.Repeat(", ?", len(ids)-1)+`)`, args...)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := res.RowsAffected()
		if int(n) != len(cls) {
			b.Fatalf("claimed %d cached instances, %d of them were unsent (one cached twice or stale)", len(cls), n)
		}
		for _, cl := range cls {
			cache.Release(cl)
		}
		claimed += int64(len(cls))
	}
	return claimed, dry
}

// seedUnsent inserts benchInstances/2 jobs of two unsent instances each and
// returns the instances' ids.
func seedUnsent(b *testing.B, st *store.Store, appID int64, prefix string) []int64 {
	b.Helper()
	const chunk = 500
	var ids []int64
	for start := 0; start < benchInstances/2; start += chunk {
		var wq strings.Builder
		var wargs []any
		wq.WriteString(`INSERT INTO workunit (create_time, appid, name, rsc_fpops_est, rsc_memory_bound, rsc_disk_bound, delay_bound, min_quorum, target_nresults) VALUES `)
		for j := start; j < start+chunk; j++ {
			if j > start {
				wq.WriteString(",")
			}
			wq.WriteString("(1, ?, ?, 1e12, 1e8, 1e9, 86400, 2, 2)")
			wargs = append(wargs, appID, fmt.Sprintf("%s_wu%d", prefix, j))
		}
		res, err := st.DB().Exec(wq.String(), wargs...)
		if err != nil {
			b.Fatal(err)
		}
		first, err := res.LastInsertId() // the first id of a multi-row insert
		if err != nil {
			b.Fatal(err)
		}
		var rq strings.Builder
		var rargs []any
		rq.WriteString(`INSERT INTO result (create_time, workunitid, server_state, name, appid) VALUES `)
		for j := start; j < start+chunk; j++ {
			for k := 0; k < 2; k++ {
				if len(rargs) > 0 {
					rq.WriteString(",")
				}
				rq.WriteString("(1, ?, ?, ?, ?)")
				rargs = append(rargs, first+int64(j-start), int(state.ServerUnsent), fmt.Sprintf("%s_wu%d_%d", prefix, j, k), appID)
			}
		}
		res, err = st.DB().Exec(rq.String(), rargs...)
		if err != nil {
			b.Fatal(err)
		}
		rfirst, err := res.LastInsertId()
		if err != nil {
			b.Fatal(err)
		}
		for k := int64(0); k < 2*chunk; k++ {
			ids = append(ids, rfirst+k)
		}
	}
	return ids
}

// countingStore counts the feeder's queries.
type countingStore struct {
	Store
	n atomic.Int64
}

func (c *countingStore) PlatformList(ctx context.Context) ([]row.Platform, error) {
	c.n.Add(1)
	return c.Store.PlatformList(ctx)
}

func (c *countingStore) AppList(ctx context.Context) ([]row.App, error) {
	c.n.Add(1)
	return c.Store.AppList(ctx)
}

func (c *countingStore) AppVersionList(ctx context.Context) ([]row.AppVersion, error) {
	c.n.Add(1)
	return c.Store.AppVersionList(ctx)
}

func (c *countingStore) ResultListUnsentForCache(ctx context.Context, p store.FeederListParams) ([]store.UnsentResult, error) {
	c.n.Add(1)
	return c.Store.ResultListUnsentForCache(ctx, p)
}

func (c *countingStore) ResultListUnsentByPriority(ctx context.Context, p store.FeederListParams) ([]store.UnsentResult, error) {
	c.n.Add(1)
	return c.Store.ResultListUnsentByPriority(ctx, p)
}
