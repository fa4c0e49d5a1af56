package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// breakTriggers leaves the server's table cache holding instances of
// workunit whose triggers failed to load: writers on raw connections
// update it while their statements are killed, and the cache is flushed
// now and then so that new instances are opened (and their triggers
// parsed) under the kills. It stops once a write has been refused for
// that, and fails the test if none was within the time.
func breakTriggers(ctx context.Context, t *testing.T, raw *sql.DB, jobs []int64) {
	t.Helper()
	var stop, broken atomic.Bool
	var ids sync.Map
	var wg sync.WaitGroup
	const writers = 12
	for g := range writers {
		wg.Go(func() {
			conn, err := raw.Conn(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			var id int64
			if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
				t.Error(err)
				return
			}
			ids.Store(g, id)
			for i := 0; !stop.Load(); i++ {
				q := fmt.Sprintf("UPDATE workunit SET need_validate = 1 - need_validate WHERE id = %d", jobs[(g*7+i)%len(jobs)])
				if g == 0 && i%20 == 0 {
					q = "FLUSH LOCAL TABLES workunit"
				}
				if _, err := conn.ExecContext(ctx, q); err != nil && loadFault(err) {
					broken.Store(true)
				}
			}
		})
	}
	wg.Go(func() {
		killer, err := raw.Conn(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		defer killer.Close()
		for i := 0; !stop.Load(); i++ {
			if id, ok := ids.Load(i % writers); ok {
				_, _ = killer.ExecContext(ctx, fmt.Sprintf("KILL QUERY %d", id.(int64)))
			}
			time.Sleep(time.Duration(50+i%200) * time.Microsecond)
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for !broken.Load() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	if !broken.Load() {
		t.Fatal("no write was refused for broken triggers in 60 s of killed writes: cannot test the recovery")
	}
}

// loadFault reports whether err is a write refused for a table instance
// that failed to load: workunit's triggers, or the table they write.
func loadFault(err error) bool {
	return strings.Contains(err.Error(), "has an error in its body") ||
		strings.Contains(err.Error(), "workunit_count' doesn't exist")
}

// rawFailures runs n updates of the jobs at once on raw connections and
// counts those refused for a table that failed to load.
func rawFailures(ctx context.Context, t *testing.T, raw *sql.DB, jobs []int64, n int) int {
	t.Helper()
	var failed atomic.Int64
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			for i := g; i < n; i += 12 {
				_, err := raw.ExecContext(ctx, "UPDATE workunit SET need_validate = 1 - need_validate WHERE id = ?", jobs[i%len(jobs)])
				if err != nil {
					if !loadFault(err) {
						t.Errorf("raw update: %v", err)
					}
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(failed.Load())
}

// transitionSteps moves each job's transition_time from from to from+n one
// step at a time through the store, each of 12 goroutines on jobs of its
// own; every write must go through. Half the goroutines write as the
// transitioner does, half as a packet of statements whose row counts are
// read back (stmtBatch, as the scheduler's commit), where a later
// statement's error comes with its result, not with the query.
func transitionSteps(ctx context.Context, t *testing.T, st *store.Store, jobs []int64, from, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			for k := from; k < from+n; k++ {
				var ps []store.WorkunitTransitionParams
				for i := g; i < len(jobs); i += 12 {
					ps = append(ps, store.WorkunitTransitionParams{ID: jobs[i], ReadTransitionTime: int64(k),
						Now: 1000, TransitionTime: int64(k + 1), NeedValidate: k%2 == 0, NoUnsentRead: true})
				}
				if g%2 == 1 {
					err := st.InTxForTest(ctx, func(tx *sqlx.Tx) error {
						b := store.NewStmtBatchForTest(ctx, tx)
						for _, p := range ps {
							b.Add(b.NewCheck(1), "UPDATE workunit SET transition_time = ?, need_validate = ? WHERE id = ? AND transition_time = ?",
								p.TransitionTime, p.NeedValidate, p.ID, p.ReadTransitionTime)
						}
						return b.Run()
					})
					if err != nil {
						t.Errorf("step %d, packet: %v", k, err)
						return
					}
					continue
				}
				out, err := st.WorkunitTransitionBatch(ctx, ps)
				if err != nil {
					t.Errorf("step %d: %v", k, err)
					return
				}
				for i, e := range out {
					if e != nil {
						t.Errorf("step %d, job %d: %v", k, ps[i].ID, e)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// A table instance whose triggers failed to load, or that of a table they
// write (a MariaDB fault: a statement killed, or on Galera aborted by a
// replicated write, while it opened the table), refuses every write handed
// it until the table is closed. Through the store such a write runs again, the node's
// instances are flushed first, and no caller sees the fault; afterwards
// writes on any connection go through.
func TestBrokenTriggersAreReloadedAndTheWriteRunsAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dsn := storetest.NewDatabase(t)
	ev := newEvents()
	st := open(t, dsn, store.Options{Events: ev, MaxOpenConns: 12})
	raw, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetMaxIdleConns(16)

	app := storetest.App(t, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
	jobs := make([]int64, 48)
	for i := range jobs {
		jobs[i] = storetest.Job(t, st, storetest.JobOptions{CreateTime: 1, App: app, Name: fmt.Sprintf("j%d", i),
			TransitionTime: 0}).ID
	}
	// The fault is seen from the cache: raw writes keep failing after the
	// kills have stopped. A breaking in which no broken instance stayed
	// cached is done again. (Not on the store's pool: its connections
	// have the tables reloaded on the fault, whatever runs on them.)
	breakCache := func() {
		for try := 0; ; try++ {
			breakTriggers(ctx, t, raw, jobs)
			if rawFailures(ctx, t, raw, jobs, 600) > 0 {
				return
			}
			if try == 4 {
				t.Fatal("the broken instances never stayed in the cache after the kills")
			}
		}
	}

	// The server keeps a list of free instances per connection id modulo
	// table_open_cache_instances, and hands out the one freed last: the
	// store's writes may all be handed sound instances from lists that
	// the raw connections do not share. A round in which the store met
	// no broken instance is run again, on a cache broken anew by new raw
	// connections (new ids).
	const steps = 25
	var done int
	for round := 0; ev.retried(store.RetryTriggers) == 0; round++ {
		if round == 5 {
			t.Fatalf("no %s retry counted in %d rounds: the store never met the broken triggers", store.RetryTriggers, round)
		}
		raw.SetMaxIdleConns(0) // closes the idle connections
		raw.SetMaxIdleConns(16)
		breakCache()
		transitionSteps(ctx, t, st, jobs, done, steps)
		done += steps
	}
	t.Logf("the store met the broken triggers in round %d", done/steps)
	var wrong int
	if err := raw.QueryRowContext(ctx, "SELECT COUNT(*) FROM workunit WHERE transition_time <> ?", done).Scan(&wrong); err != nil {
		t.Fatal(err)
	}
	if wrong != 0 {
		t.Errorf("%d of %d jobs missed a step", wrong, len(jobs))
	}
	if n := rawFailures(ctx, t, raw, jobs, 600); n != 0 {
		t.Errorf("after the store's reload %d of 600 raw writes were still refused for a table that failed to load", n)
	}
	// The count triggers ran for every write that went through.
	var counted, rows int
	if err := raw.QueryRowContext(ctx, "SELECT COALESCE(SUM(n), 0) FROM workunit_count WHERE need_validate = 1").Scan(&counted); err != nil {
		t.Fatal(err)
	}
	if err := raw.QueryRowContext(ctx, "SELECT COUNT(*) FROM workunit WHERE need_validate = 1").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if counted != rows {
		t.Errorf("workunit_count says %d jobs need validation, the table has %d", counted, rows)
	}
}

// triggerTargets, the tables whose "doesn't exist" is taken for the load
// fault, are every table the schema's triggers write.
func TestTriggerTargetsAreWhatTheTriggersWrite(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	var bodies []string
	if err := st.DB().Select(&bodies, "SELECT ACTION_STATEMENT FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()"); err != nil {
		t.Fatal(err)
	}
	into := regexp.MustCompile(`(?i)\b(?:INSERT|REPLACE)\s+INTO\s+` + "`?" + `(\w+)|\bUPDATE\s+` + "`?" + `(\w+)|\bDELETE\s+FROM\s+` + "`?" + `(\w+)`)
	var written []string
	for _, b := range bodies {
		for _, m := range into.FindAllStringSubmatch(b, -1) {
			written = append(written, m[1]+m[2]+m[3])
		}
	}
	slices.Sort(written)
	written = slices.Compact(written)
	want := slices.Sorted(slices.Values(store.TriggerTargets))
	if len(bodies) == 0 || !slices.Equal(written, want) {
		t.Errorf("the %d triggers write %v; triggerTargets is %v", len(bodies), written, want)
	}
}

// TestReloadPrivilegeIsChecked: an account without RELOAD is named as a
// problem (serverCheck makes it one on a Galera node, where the store's
// flush is routine), one with it is not.
func TestReloadPrivilegeIsChecked(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := storetest.New(t)
	user := fmt.Sprintf("tsreload_%d", time.Now().UnixNano()%1e9)
	hosts := []string{"%", "localhost"}
	for _, h := range hosts {
		storetest.Exec(t, admin, fmt.Sprintf("CREATE USER '%s'@'%s' IDENTIFIED BY 'pw'", user, h))
		storetest.Exec(t, admin, fmt.Sprintf("GRANT ALL ON `%s`.* TO '%s'@'%s'", cfg.DBName, user, h))
	}
	t.Cleanup(func() {
		for _, h := range hosts {
			if _, err := admin.DB().Exec(fmt.Sprintf("DROP USER IF EXISTS '%s'@'%s'", user, h)); err != nil {
				t.Errorf("drop test user: %v", err)
			}
		}
	})
	open := func() *store.Store {
		c := *cfg
		c.User, c.Passwd = user, "pw"
		st, err := store.Open(ctx, c.FormatDSN(), store.Options{MaxOpenConns: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	if problem, err := open().ReloadProblemForTest(ctx); err != nil || !strings.Contains(problem, "RELOAD") {
		t.Errorf("account without RELOAD: problem %q, %v; want it named", problem, err)
	}
	for _, h := range hosts {
		storetest.Exec(t, admin, fmt.Sprintf("GRANT RELOAD ON *.* TO '%s'@'%s'", user, h))
	}
	// Global privileges are read when a session starts.
	if problem, err := open().ReloadProblemForTest(ctx); err != nil || problem != "" {
		t.Errorf("account with RELOAD: problem %q, %v; want none", problem, err)
	}
}
