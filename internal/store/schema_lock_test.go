package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/store"
)

// lockMigrations are four versions, each of which records that it ran in
// table runs and sleeps longer than the shortened lease: an upgrade that
// ran a version twice, or let a second upgrade in while it slept (its
// renewals failing), leaves two rows of one version.
func lockMigrations(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{"0001_runs.sql": `CREATE TABLE runs (id INT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL);
INSERT INTO runs (v) VALUES (1);
`}
	for v := 2; v <= 4; v++ {
		files[fmt.Sprintf("%04d_v.sql", v)] = fmt.Sprintf(`INSERT INTO runs (v) VALUES (%d);
DO SLEEP(0.4);
CREATE TABLE t%d (id INT NOT NULL PRIMARY KEY);
`, v, v)
	}
	return files
}

// TestSchemaUpgradeConcurrentRunsEachMigrationOnce has many goroutines on
// two Stores (two servers' worth of connections) upgrade one database at
// once: every version is applied by exactly one of them, the others wait
// for the lock and then find nothing to do, although each statement sleeps
// longer than the lease (the holder renews it).
func TestSchemaUpgradeConcurrentRunsEachMigrationOnce(t *testing.T) {
	defer store.SetSchemaLockTimes(250*time.Millisecond, 30*time.Second)()
	dsn := emptyDatabase(t, "")
	ctx := context.Background()
	var stores []*store.Store
	for range 2 {
		st, err := store.Open(ctx, dsn, store.Options{MaxOpenConns: 8})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { st.Close() })
		stores = append(stores, st)
	}
	migs := loadMigrations(t, lockMigrations(t))
	const goroutines = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	var all []int
	errs := make([]error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			applied, err := stores[g%2].SchemaUpgrade(ctx, migs, time.Unix(1000, 0))
			errs[g] = err
			mu.Lock()
			all = append(all, applied...)
			mu.Unlock()
		})
	}
	wg.Wait()
	for g, err := range errs {
		if err != nil {
			t.Errorf("upgrade %d: %v", g, err)
		}
	}
	slices.Sort(all)
	if !slices.Equal(all, []int{1, 2, 3, 4}) {
		t.Errorf("versions applied over all upgrades = %v, want each of 1..4 once", all)
	}
	var runs []int
	if err := stores[0].DB().Select(&runs, `SELECT v FROM runs ORDER BY v`); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(runs, []int{1, 2, 3, 4}) {
		t.Errorf("migration runs recorded = %v, want each of 1..4 once", runs)
	}
	var holder string
	if err := stores[0].DB().Get(&holder, `SELECT holder FROM schema_lock`); err != nil || holder != "" {
		t.Errorf("lock holder after the upgrades = %q, %v; want free", holder, err)
	}
}

// TestSchemaUpgradeLockIsHeldUntilReleasedAndOutlivesNoHolder: a lock held
// (by another node, say) keeps an upgrade waiting until it is released; a
// lock whose holder died is taken once its lease has run out; and a lock
// held past the wait fails the upgrade without applying anything.
func TestSchemaUpgradeLockIsHeldUntilReleasedAndOutlivesNoHolder(t *testing.T) {
	defer store.SetSchemaLockTimes(time.Second, 10*time.Second)()
	st := emptyStore(t)
	ctx := context.Background()
	files := lockMigrations(t)
	migs := loadMigrations(t, files)
	if _, err := st.SchemaUpgrade(ctx, migs[:1], time.Unix(1000, 0)); err != nil {
		t.Fatal(err)
	}
	far := time.Now().Add(time.Hour).UnixMilli()
	if _, err := st.DB().Exec(`UPDATE schema_lock SET holder = 'other', expires = ?`, far); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := st.SchemaUpgrade(ctx, migs[:2], time.Unix(1000, 0))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("upgrade returned (%v) while another held the lock", err)
	case <-time.After(700 * time.Millisecond):
	}
	if v, _ := st.SchemaVersion(ctx); v != 1 {
		t.Fatalf("version = %d while the lock was held, want 1", v)
	}
	if _, err := st.DB().Exec(`UPDATE schema_lock SET holder = '', expires = 0 WHERE holder = 'other'`); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("upgrade after the release: %v", err)
	}
	if v, _ := st.SchemaVersion(ctx); v != 2 {
		t.Fatalf("version after the release = %d, want 2", v)
	}

	// A holder that died: its lease (already expired) no longer counts.
	past := time.Now().Add(-time.Millisecond).UnixMilli()
	if _, err := st.DB().Exec(`UPDATE schema_lock SET holder = 'dead', expires = ?`, past); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := st.SchemaUpgrade(ctx, migs[:3], time.Unix(1000, 0)); err != nil {
		t.Fatalf("upgrade over a dead holder's lock: %v", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("upgrade over a dead holder's expired lock took %v", el)
	}

	// A live holder past the wait: the upgrade gives up, applying nothing.
	defer store.SetSchemaLockTimes(time.Second, 300*time.Millisecond)()
	if _, err := st.DB().Exec(`UPDATE schema_lock SET holder = 'other', expires = ?`, far); err != nil {
		t.Fatal(err)
	}
	applied, err := st.SchemaUpgrade(ctx, migs, time.Unix(1000, 0))
	if err == nil || !strings.Contains(err.Error(), "held the lock") || len(applied) != 0 {
		t.Fatalf("upgrade against a held lock = %v, %v; want nothing applied and a held-lock error", applied, err)
	}
}

// TestSchemaUpgradeThatLostItsLockRecordsNothing: an upgrade whose lease
// was taken over while a statement ran (its holder stalled past the lease,
// or the lock was stolen by hand) stops before recording that statement,
// so the new holder resumes from the progress the lock protected.
func TestSchemaUpgradeThatLostItsLockRecordsNothing(t *testing.T) {
	defer store.SetSchemaLockTimes(10*time.Second, 10*time.Second)()
	st := emptyStore(t)
	ctx := context.Background()
	migs := loadMigrations(t, lockMigrations(t))
	if _, err := st.SchemaUpgrade(ctx, migs[:1], time.Unix(1000, 0)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := st.SchemaUpgrade(ctx, migs[:2], time.Unix(1000, 0))
		done <- err
	}()
	// Statement 2 of version 2 sleeps 0.4 s; steal the lock meanwhile.
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := st.DB().Exec(`UPDATE schema_lock SET holder = 'thief', expires = ? WHERE holder <> ''`,
			time.Now().Add(time.Hour).UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the upgrade never took the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "lost the upgrade lock") {
		t.Fatalf("upgrade whose lock was taken over = %v, want a lost-lock error", err)
	}
	_, prog, err := st.SchemaStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := st.SchemaVersion(ctx); v != 1 || (prog != nil && prog.Statements > 1) {
		t.Fatalf("after the takeover version = %d, progress %+v; want 1 and at most statement 1 recorded", v, prog)
	}
	var holder string
	if err := st.DB().Get(&holder, `SELECT holder FROM schema_lock`); err != nil || holder != "thief" {
		t.Fatalf("holder after the loser stopped = %q, %v; want the thief's (the loser must not release it)", holder, err)
	}
}
