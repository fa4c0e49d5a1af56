package store_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/dbproxy"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// events records what a store reports through Options.Events.
type events struct {
	mu        sync.Mutex
	retries   map[string]int
	failovers atomic.Int64
}

func newEvents() *events { return &events{retries: map[string]int{}} }

func (e *events) Retry(code string) {
	e.mu.Lock()
	e.retries[code]++
	e.mu.Unlock()
}

func (e *events) Failover() { e.failovers.Add(1) }

func (e *events) retried(code string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.retries[code]
}

// deadAddr is a loopback port nothing listens on: a connect is refused.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// atAddr is dsn with its server address replaced by addr.
func atAddr(t *testing.T, dsn, addr string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = addr
	return cfg.FormatDSN()
}

func open(t *testing.T, dsn string, opts store.Options) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, dsn, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestOpenSkipsADeadFirstAddressAndCountsTheFailover(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	ev := newEvents()
	st := open(t, atAddr(t, dsn, deadAddr(t))+","+dsn, store.Options{Events: ev, MaxOpenConns: 2})
	ctx := context.Background()
	if v, err := st.SchemaVersion(ctx); err != nil || v == 0 {
		t.Fatalf("SchemaVersion through the second address = %d, %v", v, err)
	}
	if n := ev.failovers.Load(); n != 1 {
		t.Errorf("failovers = %d, want 1: the first address was dead, every connection since is on the second", n)
	}
}

func TestOpenEveryAddressDeadNamesEachAndStopsWithTheContext(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	a, b := deadAddr(t), deadAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := store.Open(ctx, atAddr(t, dsn, a)+","+atAddr(t, dsn, b), store.Options{RetryBackoff: 100 * time.Millisecond})
	if err == nil {
		t.Fatal("Open with every address dead succeeded")
	}
	if !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b) || !store.IsDBError(err) {
		t.Errorf("error %q: want both addresses named, a database error", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Open took %s past a 700ms context", d)
	}
}

// A node's connections are cut while reads run on them without pause:
// every read succeeds, on the other address, and the move is counted.
func TestCutNodeMidUseReadsGoOnOnTheNextAddress(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := dbproxy.Start(cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p1.Close()
	p2, err := dbproxy.Start(cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	ev := newEvents()
	st := open(t, atAddr(t, dsn, p1.Addr())+","+atAddr(t, dsn, p2.Addr()), store.Options{Events: ev, MaxOpenConns: 4})
	ctx := context.Background()

	var reads atomic.Int64
	errs := make(chan error, 4)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := st.SchemaVersion(ctx); err != nil {
					errs <- err
					return
				}
				reads.Add(1)
			}
		})
	}
	for reads.Load() < 200 {
		time.Sleep(time.Millisecond)
	}
	if n := ev.failovers.Load(); n != 0 {
		t.Fatalf("failovers before the cut = %d, want 0", n)
	}
	dropped := p1.Cut()
	before := reads.Load()
	for reads.Load() < before+200 {
		select {
		case err := <-errs:
			t.Fatalf("a read failed after cutting the first address: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("a read failed after cutting the first address: %v", err)
	default:
	}
	if dropped == 0 {
		t.Fatal("the cut dropped no connection: the reads were not on the first address")
	}
	if n := ev.failovers.Load(); n != 1 {
		t.Errorf("failovers = %d, want 1", n)
	}
	// A transaction after the cut runs on the second address too.
	if err := st.InTxForTest(ctx, func(tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE app SET weight = weight WHERE id = 0")
		return err
	}); err != nil {
		t.Errorf("transaction after the cut: %v", err)
	}
	t.Logf("cut %d connections; retries conn=%d", dropped, ev.retried(store.RetryConn))
}

// Two transactions lock two rows in opposite orders: InnoDB rolls one
// back with a deadlock, which is run again, succeeds, and is counted.
func TestDeadlockIsRetriedAndCountedByCode(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	ev := newEvents()
	st := open(t, dsn, store.Options{Events: ev, MaxOpenConns: 4})
	a := storetest.App(t, st, storetest.AppOptions{}).ID
	b := storetest.App(t, st, storetest.AppOptions{}).ID
	ctx := context.Background()

	var aLocked, bLocked sync.Once
	aCh, bCh := make(chan struct{}), make(chan struct{})
	update := func(tx *sqlx.Tx, id int64) error {
		_, err := tx.ExecContext(ctx, "UPDATE app SET weight = weight + 1 WHERE id = ?", id)
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() {
		errs[0] = st.InTxForTest(ctx, func(tx *sqlx.Tx) error {
			if err := update(tx, a); err != nil {
				return err
			}
			aLocked.Do(func() { close(aCh) })
			<-bCh
			return update(tx, b)
		})
	})
	wg.Go(func() {
		errs[1] = st.InTxForTest(ctx, func(tx *sqlx.Tx) error {
			<-aCh
			if err := update(tx, b); err != nil {
				return err
			}
			bLocked.Do(func() { close(bCh) })
			return update(tx, a)
		})
	})
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("transaction %d: %v, want the deadlock retried away", i, err)
		}
	}
	if n := ev.retried(store.RetryDeadlock); n != 1 {
		t.Errorf("retries{code=1213} = %d, want 1", n)
	}
	var weights []float64
	if err := st.DB().SelectContext(ctx, &weights, "SELECT weight FROM app WHERE id IN (?, ?)", a, b); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(weights) != "[2 2]" {
		t.Errorf("weights = %v, want [2 2]: both transactions applied once", weights)
	}
}

func TestSyncReadsSetsWsrepSyncWaitWhereTheServerHasIt(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	ctx := context.Background()
	plain := open(t, dsn, store.Options{MaxOpenConns: 1})
	var names []string
	if err := plain.DB().SelectContext(ctx, &names,
		"SELECT VARIABLE_NAME FROM information_schema.SESSION_VARIABLES WHERE VARIABLE_NAME = 'WSREP_SYNC_WAIT'"); err != nil || len(names) == 0 {
		t.Skipf("server has no wsrep_sync_wait (%v): SyncReads is a no-op there", err)
	}
	for _, tc := range []struct {
		sync bool
		want int
	}{{false, 0}, {true, 1}} {
		st := plain
		if tc.sync {
			st = open(t, dsn, store.Options{MaxOpenConns: 1, SyncReads: true})
		}
		var v int
		if err := st.DB().GetContext(ctx, &v, "SELECT @@SESSION.wsrep_sync_wait"); err != nil || v != tc.want {
			t.Errorf("SyncReads %v: wsrep_sync_wait = %d, %v; want %d", tc.sync, v, err, tc.want)
		}
	}
}

// A transaction's connection is cut under one of its statements: the
// server rolls the transaction back, and inTx runs it whole on the other
// address, so its writes land once.
func TestTransactionCutBeforeCommitIsRunAgainOnTheNextAddress(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := dbproxy.Start(cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p1.Close()
	ev := newEvents()
	st := open(t, atAddr(t, dsn, p1.Addr())+","+dsn, store.Options{Events: ev, MaxOpenConns: 2})
	a := storetest.App(t, st, storetest.AppOptions{}).ID
	ctx := context.Background()
	attempts := 0
	err = st.InTxForTest(ctx, func(tx *sqlx.Tx) error {
		attempts++
		if _, err := tx.ExecContext(ctx, "UPDATE app SET weight = weight + 1 WHERE id = ?", a); err != nil {
			return err
		}
		if attempts == 1 {
			// Cut while the second statement waits for its answer: the
			// driver cannot tell whether it ran (invalid connection), only
			// that the transaction did not commit.
			p1.Stall()
			time.AfterFunc(100*time.Millisecond, func() { p1.Cut() })
		}
		_, err := tx.ExecContext(ctx, "UPDATE app SET weight = weight + 10 WHERE id = ?", a)
		return err
	})
	if err != nil || attempts != 2 {
		t.Fatalf("transaction = %v after %d attempts, want success on the second", err, attempts)
	}
	var w float64
	if err := st.DB().GetContext(ctx, &w, "SELECT weight FROM app WHERE id = ?", a); err != nil || w != 11 {
		t.Errorf("weight = %v, %v; want 11: the cut attempt rolled back, the second applied once", w, err)
	}
	if ev.retried(store.RetryConn) != 1 || ev.failovers.Load() != 1 {
		t.Errorf("retries conn %d, failovers %d; want 1 and 1", ev.retried(store.RetryConn), ev.failovers.Load())
	}
}

// A connection lost under COMMIT leaves the outcome unknown: the
// transaction is not run again (it might double its writes), the caller
// gets the error.
func TestTransactionLostDuringCommitIsNotRunAgain(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := dbproxy.Start(cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p1.Close()
	ev := newEvents()
	st := open(t, atAddr(t, dsn, p1.Addr())+","+dsn, store.Options{Events: ev, MaxOpenConns: 2})
	a := storetest.App(t, st, storetest.AppOptions{}).ID
	ctx := context.Background()
	attempts := 0
	err = st.InTxForTest(ctx, func(tx *sqlx.Tx) error {
		attempts++
		if _, err := tx.ExecContext(ctx, "UPDATE app SET weight = weight + 1 WHERE id = ?", a); err != nil {
			return err
		}
		// The COMMIT inTx sends next waits for an answer that never comes.
		p1.Stall()
		time.AfterFunc(100*time.Millisecond, func() { p1.Cut() })
		return nil
	})
	if !errors.Is(err, store.ErrCommitUnknown) || attempts != 1 || !store.IsDBError(err) {
		t.Fatalf("transaction = %v after %d attempts, want ErrCommitUnknown, a database error, after 1", err, attempts)
	}
	if n := ev.retried(store.RetryConn); n != 0 {
		t.Errorf("retries conn = %d, want 0", n)
	}
}
