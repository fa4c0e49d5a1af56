package privatedb

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// startServer starts a small private server for a parallel test, stopped
// when the test ends.
func startServer(ctx context.Context, t *testing.T) *Server {
	t.Helper()
	if !Available() {
		if os.Getenv("CI") == "true" || os.Getenv("TASKSERVER_REAL_CLIENT") == "1" {
			t.Fatal("no MariaDB server program installed (scripts/db-up.sh installs it)")
		}
		t.Skip("no MariaDB server program installed")
	}
	t.Parallel()
	s, err := Start(ctx, filepath.Join(t.TempDir(), "db"), Options{BufferPool: "64M", MaxConnections: 20})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// TestKillAndRestartKeepsCommittedRows is what the chaos run relies on: a
// SIGKILLed server comes back on the same DSN with every committed row.
func TestKillAndRestartKeepsCommittedRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := startServer(ctx, t)
	dsn := s.DSN()
	exec := func(q string) {
		t.Helper()
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("CREATE DATABASE d")
	exec("CREATE TABLE d.t (id INT PRIMARY KEY) ENGINE=InnoDB")
	exec("INSERT INTO d.t VALUES (1), (2)")
	pid := s.PID()
	s.Kill()
	if err := Ping(ctx, dsn); err == nil {
		t.Fatal("Ping after Kill = nil, want the server gone")
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if s.PID() == pid || s.DSN() != dsn {
		t.Errorf("after Restart: pid %d (was %d), DSN %s (was %s); want a new process on the same DSN", s.PID(), pid, s.DSN(), dsn)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM d.t").Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows after restart = %d, %v; want 2, nil", n, err)
	}
}

// TestLaunchOnATakenPortSaysSo checks what Start's retry relies on: a
// server whose port another program bound first fails with errAddrInUse,
// not with a bare start failure.
func TestLaunchOnATakenPortSaysSo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := startServer(ctx, t)
	s.Kill()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := strconv.Itoa(s.port)
	s.port = taken.Addr().(*net.TCPAddr).Port
	for i, a := range s.args {
		if a == "--port="+port {
			s.args[i] = "--port=" + strconv.Itoa(s.port)
		}
	}
	if err := s.launch(ctx); !errors.Is(err, errAddrInUse) {
		t.Fatalf("launch on a taken port = %v, want errAddrInUse", err)
	}
}

// TestShutdownThenStartOnACopyWithAnotherPool is what the scale
// benchmark's buffer-pool sweep relies on: a server shut down cleanly
// leaves a data directory that a copy of starts again, with another
// buffer pool, every committed row there.
func TestShutdownThenStartOnACopyWithAnotherPool(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := startServer(ctx, t)
	db, err := sql.Open("mysql", s.DSN())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY) ENGINE=InnoDB", "INSERT INTO d.t VALUES (1), (2)"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	if err := s.Shutdown(); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := Ping(ctx, s.DSN()); err == nil {
		t.Fatal("Ping after Shutdown = nil, want the server gone")
	}
	cp := filepath.Join(t.TempDir(), "copy")
	if err := os.MkdirAll(cp, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, "cp", "-a", filepath.Join(s.dir, "data"), cp).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	c, err := StartOn(ctx, cp, Options{BufferPool: "32M", MaxConnections: 20, ColdStart: true})
	if err != nil {
		t.Fatalf("StartOn: %v", err)
	}
	defer c.Stop()
	db, err = sql.Open("mysql", c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n, pool int64
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM d.t").Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows in the copy = %d, %v; want 2, nil", n, err)
	}
	if err := db.QueryRowContext(ctx, "SELECT @@innodb_buffer_pool_size").Scan(&pool); err != nil || pool != 32<<20 {
		t.Errorf("buffer pool = %d, %v; want %d", pool, err, 32<<20)
	}
	if _, err := StartOn(ctx, t.TempDir(), Options{}); err == nil {
		t.Error("StartOn an empty directory = nil error, want no data directory")
	}
}
