package galera_test

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/internal/galera"
	"github.com/taskserver/taskserver/internal/galera/galeratest"
)

// query runs one read on dsn as a causal read (wsrep_sync_wait = 1): it
// waits until the node has applied every write the cluster committed
// before it. A write made on another node is certified everywhere when
// its COMMIT returns, but applied on the other nodes a moment later, so a
// plain read there may not see it yet (CI did once).
func query(ctx context.Context, t *testing.T, dsn, q string, args ...any) *sql.Row {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["wsrep_sync_wait"] = "1"
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db.QueryRowContext(ctx, q, args...)
}

func run(ctx context.Context, t *testing.T, dsn, q string) {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, q); err != nil {
		t.Fatalf("%s on %s: %v", q, dsn, err)
	}
}

// TestKilledNodeRejoinsWithIST is what `make cluster` relies on: a write
// on one node is read on another, a SIGKILLed node leaves a working
// cluster of two, and once restarted from its recovered position it gets
// what it missed by IST, not a full copy, and is Synced again.
func TestKilledNodeRejoinsWithIST(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c := galeratest.Start(ctx, t, galera.Options{BufferPool: "64M", MaxConnections: 30, GCacheSize: "64M"})
	for _, n := range c.Nodes() {
		st, err := n.Status(ctx)
		if err != nil || st.ClusterSize != 3 || st.State != "Synced" {
			t.Fatalf("%s after Start: %+v, %v; want Synced in a cluster of 3", n.Name(), st, err)
		}
	}
	// A server on the node's port that is not the node is no answer about
	// it: its port is free while it is down, and another may take it.
	if st, err := galera.OnPortOf(c.Node(0)).Status(ctx); err == nil || !strings.Contains(err.Error(), "another server") {
		t.Errorf("Status of a node whose port another server answers = %+v, %v; want an error saying so", st, err)
	}
	if tr, _ := c.Node(1).LastJoin(); tr != galera.TransferSST {
		t.Errorf("node2's first join = %s, want SST (it started empty)", tr)
	}
	n1, n2, n3 := c.Node(0), c.Node(1), c.Node(2)
	run(ctx, t, n1.DSN(), "CREATE DATABASE d")
	run(ctx, t, n1.DSN(), "CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB")
	run(ctx, t, n1.DSN(), "INSERT INTO d.t VALUES (1, 'before')")
	var v string
	if err := query(ctx, t, n3.DSN(), "SELECT v FROM d.t WHERE id = 1").Scan(&v); err != nil || v != "before" {
		t.Fatalf("read on node3 = %q, %v; want the write made on node1", v, err)
	}

	pid := n2.PID()
	n2.Kill()
	if n2.Running() {
		t.Fatal("node2 still running after Kill")
	}
	if err := n1.WaitSynced(ctx, 2); err != nil {
		t.Fatal(err)
	}
	run(ctx, t, n3.DSN(), "INSERT INTO d.t VALUES (2, 'while down')")
	run(ctx, t, n1.DSN(), "UPDATE d.t SET v = 'changed' WHERE id = 1")

	tr, err := n2.Restart(ctx)
	if err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if n2.PID() == pid {
		t.Errorf("node2 pid after Restart = %d, the killed one's", pid)
	}
	if _, pos := n2.LastJoin(); pos == "" {
		t.Error("Restart recovered no position")
	}
	if tr != galera.TransferIST {
		log, _ := os.ReadFile(n2.LogPath())
		t.Errorf("node2 rejoined by %s, want IST; its log ends:\n%s", tr, log[max(0, len(log)-3000):])
	}
	if err := n2.WaitSynced(ctx, 3); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := query(ctx, t, n2.DSN(), "SELECT COUNT(*) FROM d.t WHERE (id = 1 AND v = 'changed') OR (id = 2 AND v = 'while down')").Scan(&n); err != nil || n != 2 {
		t.Fatalf("node2 after rejoin sees %d of the 2 writes made while it was down (%v)", n, err)
	}
	if c.Node(1).CPUSeconds() <= 0 {
		t.Error("node2's CPU seconds = 0 after two runs")
	}
}
