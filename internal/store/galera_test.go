package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/db/schema"
	"github.com/taskserver/taskserver/internal/galera"
	"github.com/taskserver/taskserver/internal/galera/galeratest"
	"github.com/taskserver/taskserver/internal/scheduler/decide"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// TestGaleraTwoNodesKeepTheLockedDecisions runs, on a real two-node Galera
// cluster, what node-local locks (GET_LOCK, FOR UPDATE) cannot hold
// there: many schema upgrades of one database through both nodes at once
// apply each version exactly once, and two schedulers sending one job to
// one user through the two nodes at once send it once.
func TestGaleraTwoNodesKeepTheLockedDecisions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c := galeratest.Start(ctx, t, galera.Options{Nodes: 2, BufferPool: "64M", MaxConnections: 60, GCacheSize: "64M"})

	const db = "tsgalera"
	var sts [2]*store.Store
	// What each node's store ran again, for a failure's log.
	evs := [2]*events{newEvents(), newEvents()}
	defer func() {
		if t.Failed() {
			for i, ev := range evs {
				ev.mu.Lock()
				t.Logf("node %d's store ran statements again: %v", i+1, ev.retries)
				ev.mu.Unlock()
			}
		}
	}()
	for i := range sts {
		cfg, err := mysql.ParseDSN(c.Node(i).DSN())
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			admin, err := store.Open(ctx, cfg.FormatDSN(), store.Options{MaxOpenConns: 1})
			if err != nil {
				t.Fatal(err)
			}
			_, err = admin.DB().ExecContext(ctx, schema.CreateDatabase(db))
			admin.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
		cfg.DBName = db
		if sts[i], err = store.Open(ctx, cfg.FormatDSN(), store.Options{MaxOpenConns: 12, Events: evs[i]}); err != nil {
			t.Fatalf("open node %d: %v", i+1, err)
		}
		defer sts[i].Close()
	}

	t.Run("schema upgrade through both nodes", func(t *testing.T) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var applied []int
		var errs []error
		for g := range 8 {
			wg.Go(func() {
				v, err := sts[g%2].SchemaApply(ctx, time.Unix(1000, 0))
				mu.Lock()
				defer mu.Unlock()
				applied = append(applied, v...)
				if err != nil {
					errs = append(errs, fmt.Errorf("upgrade %d through node %d: %w", g, g%2+1, err))
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			t.Error(err)
		}
		slices.Sort(applied)
		var want []int
		for v := 1; v <= schema.Latest(); v++ {
			want = append(want, v)
		}
		if !slices.Equal(applied, want) {
			t.Fatalf("versions applied over all upgrades = %v, want each of %v once", applied, want)
		}
		for i, st := range sts {
			if err := st.SchemaCheck(ctx); err != nil {
				t.Errorf("schema check through node %d: %v", i+1, err)
			}
		}
	})
	if t.Failed() {
		return
	}

	t.Run("a transaction aborted by the other node mid-packet is run again whole", func(t *testing.T) {
		// Node 1's transaction updates a row and then sends a packet;
		// node 2 updates the row while the packet runs, and node 1 aborts
		// the transaction to apply that. MariaDB sent one packet would
		// not report the abort and would commit the packet's rest on its
		// own; split, the abort is an error and inTx runs it all again.
		for _, q := range []string{`CREATE TABLE abort_t (id INT NOT NULL PRIMARY KEY, v INT NOT NULL)`,
			`CREATE TABLE abort_log (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, x INT NOT NULL)`,
			`INSERT INTO abort_t VALUES (1, 0)`} {
			if _, err := sts[0].DB().ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		for {
			var n int
			if err := sts[1].DB().GetContext(ctx, &n, `SELECT COUNT(*) FROM abort_t`); err == nil && n == 1 {
				break
			}
			if ctx.Err() != nil {
				t.Fatal("node 2 never saw the table")
			}
			time.Sleep(20 * time.Millisecond)
		}
		const rounds = 4
		for round := range rounds {
			var attempts int
			done := make(chan error, 1)
			go func() {
				done <- sts[0].InTxForTest(ctx, func(tx *sqlx.Tx) error {
					attempts++
					if _, err := tx.ExecContext(ctx, `UPDATE abort_t SET v = v + 1 WHERE id = 1`); err != nil {
						return err
					}
					b := store.NewStmtBatchForTest(ctx, tx)
					b.Add(-1, `DO SLEEP(0.5)`)
					b.Add(b.NewCheck(1), `INSERT INTO abort_log (x) VALUES (?)`, round)
					return b.Run()
				})
			}()
			time.Sleep(150 * time.Millisecond)
			if _, err := sts[1].DB().ExecContext(ctx, `UPDATE abort_t SET v = v + 100 WHERE id = 1`); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			var v, logged int
			if err := sts[0].DB().GetContext(ctx, &v, `SELECT v FROM abort_t WHERE id = 1`); err != nil {
				t.Fatal(err)
			}
			if err := sts[0].DB().GetContext(ctx, &logged, `SELECT COUNT(*) FROM abort_log WHERE x = ?`, round); err != nil {
				t.Fatal(err)
			}
			t.Logf("round %d: %d attempts", round, attempts)
			if v != (round+1)*101 || logged != 1 {
				t.Fatalf("round %d: v = %d, want %d, and %d log rows, want 1: the transaction was not kept whole",
					round, v, (round+1)*101, logged)
			}
		}
	})
	if t.Failed() {
		return
	}

	t.Run("one job to one user through both nodes", func(t *testing.T) {
		st := sts[0]
		app := storetest.App(t, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
		user := storetest.User(t, st, storetest.UserOptions{CreateTime: 1, EmailAddr: "a@example.com", Name: "a",
			Authenticator: "k"}).ID
		hosts := [2]int64{storetest.Host(t, st, storetest.HostOptions{CreateTime: 1, User: user}).ID,
			storetest.Host(t, st, storetest.HostOptions{CreateTime: 1, User: user}).ID}
		const jobs = 40
		type job struct{ wu, r [2]int64 }
		js := make([]job, jobs)
		for j := range js {
			js[j].wu[0] = storetest.Job(t, st, storetest.JobOptions{CreateTime: 1, App: app, Name: fmt.Sprintf("wu%d", j),
				TransitionTime: state.NoTransition, DelayBound: 100}).ID
			for k := range 2 {
				js[j].r[k] = storetest.Instance(t, st, storetest.InstanceOptions{CreateTime: 1, Job: js[j].wu[0],
					ServerState: state.ServerUnsent, Name: fmt.Sprintf("wu%d_%d", j, k)}).ID
			}
		}
		last := js[jobs-1].r[1]
		for {
			if _, err := sts[1].ResultGet(ctx, last); err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatal("node 2 never saw the jobs written through node 1")
			}
			time.Sleep(20 * time.Millisecond)
		}
		// Each job: instance 0 through node 1 to host 1, instance 1
		// through node 2 to host 2, both of the one user, at once.
		outs := make([][2]error, jobs)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for j := range js {
			for k := range 2 {
				wg.Go(func() {
					<-start
					out, err := sts[k].SchedulerCommit(ctx, store.SchedBatch{Sends: []store.SchedSend{{
						ResultID: js[j].r[k], WorkunitID: js[j].wu[0], HostID: hosts[k], UserID: user,
						ReportDeadline: 2000, Now: 1000}}})
					if err == nil {
						err = out.Sends[0]
					} else {
						err = fmt.Errorf("batch: %w", err)
					}
					outs[j][k] = err
				})
			}
		}
		close(start)
		wg.Wait()
		for j, o := range outs {
			won := 0
			for k, err := range o {
				switch {
				case err == nil:
					won++
				case errors.Is(err, decide.ErrAlreadySentToUser) || errors.Is(err, store.ErrConflict):
				default:
					t.Errorf("job %d, send through node %d: %v", j, k+1, err)
				}
			}
			if won != 1 {
				t.Errorf("job %d: %d of the two sends to one user went through (%v), want exactly 1", j, won, o)
			}
		}
		// Read through node 2 once it has applied everything committed.
		conn, err := sts[1].DB().Connx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, `SET SESSION wsrep_sync_wait = 1`); err != nil {
			t.Fatal(err)
		}
		var pairs, inProgress int
		if err := conn.GetContext(ctx, &pairs, `SELECT COUNT(*) FROM workunit_user`); err != nil {
			t.Fatal(err)
		}
		if err := conn.GetContext(ctx, &inProgress, `SELECT COUNT(*) FROM result WHERE server_state = ?`,
			state.ServerInProgress); err != nil {
			t.Fatal(err)
		}
		if pairs != jobs || inProgress != jobs {
			t.Errorf("after the race: %d workunit_user rows and %d instances in progress, want %d each", pairs, inProgress, jobs)
		}
	})
	t.Run("a send and a transition of one job through both nodes", func(t *testing.T) {
		st := sts[0]
		app := storetest.App(t, st, storetest.AppOptions{CreateTime: 1, Name: "demo2", UserFriendlyName: "Demo", Weight: 1}).ID
		user := storetest.User(t, st, storetest.UserOptions{CreateTime: 1, EmailAddr: "b@example.com", Name: "b",
			Authenticator: "kb"}).ID
		host := storetest.Host(t, st, storetest.HostOptions{CreateTime: 1, User: user}).ID
		const jobs = 40
		const due, deadline = 500, 2000
		wus, rs := make([]int64, jobs), make([]int64, jobs)
		for j := range jobs {
			// Due for transition, with an unsent instance: the send does
			// not move transition_time (it is before the deadline).
			wus[j] = storetest.Job(t, st, storetest.JobOptions{CreateTime: 1, App: app, Name: fmt.Sprintf("tw%d", j),
				TransitionTime: due, DelayBound: 100}).ID
			rs[j] = storetest.Instance(t, st, storetest.InstanceOptions{CreateTime: 1, Job: wus[j],
				ServerState: state.ServerUnsent, Name: fmt.Sprintf("tw%d_0", j)}).ID
		}
		for {
			if _, err := sts[1].ResultGet(ctx, rs[jobs-1]); err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatal("node 2 never saw the jobs written through node 1")
			}
			time.Sleep(20 * time.Millisecond)
		}
		// Through node 1 the instance is sent; through node 2 the
		// transitioner, having read it unsent, finds nothing to wait for.
		sends, trans := make([]error, jobs), make([]error, jobs)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for j := range jobs {
			wg.Go(func() {
				<-start
				out, err := sts[0].SchedulerCommit(ctx, store.SchedBatch{Sends: []store.SchedSend{{
					ResultID: rs[j], WorkunitID: wus[j], HostID: host, UserID: user, ReportDeadline: deadline, Now: 1000}}})
				if err == nil {
					err = out.Sends[0]
				}
				sends[j] = err
			})
			wg.Go(func() {
				<-start
				out, err := sts[1].WorkunitTransitionBatch(ctx, []store.WorkunitTransitionParams{{ID: wus[j],
					ReadTransitionTime: due, Now: 1000, TransitionTime: state.NoTransition}})
				if err == nil {
					err = out[0]
				}
				trans[j] = err
			})
		}
		close(start)
		wg.Wait()
		conn, err := sts[1].DB().Connx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, `SET SESSION wsrep_sync_wait = 1`); err != nil {
			t.Fatal(err)
		}
		lost := 0
		for j := range jobs {
			if sends[j] != nil {
				t.Errorf("job %d: send = %v", j, sends[j])
			}
			if trans[j] != nil && !errors.Is(trans[j], store.ErrConflict) {
				t.Errorf("job %d: transition = %v", j, trans[j])
			}
			var tt int64
			if err := conn.GetContext(ctx, &tt, `SELECT transition_time FROM workunit WHERE id = ?`, wus[j]); err != nil {
				t.Fatal(err)
			}
			if tt > deadline {
				lost++
			}
		}
		if lost > 0 {
			t.Errorf("%d of %d jobs have an instance in progress (deadline %d) but transition_time past it: "+
				"their timeouts would never be seen", lost, jobs, deadline)
		}
	})
}
