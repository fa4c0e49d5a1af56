package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/statsexport"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDaemonDumpsOnItsSchedule runs the program as a daemon: its first
// pass writes the dump, later passes within --interval leave it alone,
// and it stops on cancel.
func TestDaemonDumpsOnItsSchedule(t *testing.T) {
	// Not parallel: urfave/cli v2 writes its package-level help flag while
	// parsing, which the race detector reports when two apps parse at once.
	dsn := storetest.NewDatabase(t)
	ctx := context.Background()
	st, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	defer st.Close()
	storetest.User(t, st, storetest.UserOptions{TotalCredit: 3, CrossProjectID: "x"})
	project := t.TempDir()
	dir := filepath.Join(project, "html", "stats")

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	args := []string{"db_dump", "--db-dsn", dsn, "--project-dir", project, "--listen", "", "--sleep", "50ms",
		"--interval", "1h"}
	go func() { done <- run(runCtx, args) }()

	deadline := time.Now().Add(30 * time.Second)
	var first time.Time
	for {
		last, ok, err := statsexport.LastUpdate(dir)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			first = last
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no dump in %s after 30s of db_dump", dir)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Many more passes run; none dumps again within the hour.
	time.Sleep(500 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run(%v) after cancel: %v", args, err)
	}
	last, ok, err := statsexport.LastUpdate(dir)
	if err != nil || !ok || !last.Equal(first) {
		t.Errorf("after more passes the dump is stamped %v (ok %v, %v), want still %v", last, ok, err, first)
	}
	if _, err := os.Stat(filepath.Join(dir, "user.gz")); err != nil {
		t.Errorf("no user.gz: %v", err)
	}
}

func TestRejectsBadFlags(t *testing.T) {
	// Not parallel: see above.
	for _, args := range [][]string{
		{"db_dump", "--interval", "1s", "--one-pass"},
		{"db_dump", "--mod", "2", "--mod-index", "1", "--one-pass"},
		{"db_dump", "--out", "", "--one-pass"},
		{"db_dump", "--batch", "0", "--one-pass"},
	} {
		if err := run(context.Background(), args); err == nil {
			t.Errorf("run(%v) = nil, want an error", args)
		}
	}
}
