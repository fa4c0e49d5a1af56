// Package galeratest starts a private Galera cluster (package galera) for
// one test, and stops it and removes its files when the test ends.
package galeratest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/taskserver/taskserver/internal/galera"
	"github.com/taskserver/taskserver/internal/privatedb"
)

// Start starts a cluster with o for t and registers its stop. It skips t in
// -short mode, and where a cluster cannot be started here (mariadbd,
// galera-4 or rsync missing); under CI or TASKSERVER_REAL_CLIENT, where
// `make test` has installed them (scripts/galera-up.sh), that is a failure
// instead. ctx bounds the start.
func Start(ctx context.Context, t testing.TB, o galera.Options) *galera.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a Galera cluster")
	}
	if !galera.Available() {
		msg := "mariadbd, galera-4 or rsync not installed (scripts/galera-up.sh installs them)"
		if os.Getenv("CI") == "true" || os.Getenv("TASKSERVER_REAL_CLIENT") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	// Not t.TempDir: its parent is private to this user, and the nodes may
	// run as user mysql.
	dir, err := os.MkdirTemp("", "galera-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := galera.Start(ctx, filepath.Join(dir, "cluster"), o)
	if err != nil {
		t.Fatalf("start a Galera cluster of %d nodes: %v", max(o.Nodes, 3), err)
	}
	t.Cleanup(c.Stop)
	// Runs before the stop and the removal: a failed test shows how each
	// node saw it, since its files are gone afterwards.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, n := range c.Nodes() {
			log, err := os.ReadFile(n.LogPath())
			if err != nil {
				t.Logf("%s: no log: %v", n.Name(), err)
				continue
			}
			t.Logf("%s's log, last part:\n%s", n.Name(), privatedb.Tail(log, 6000))
		}
	})
	return c
}
