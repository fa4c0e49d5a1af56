package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/shmcache"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// One pass of the real command fills a cache a scheduler can open.
func TestOnePass(t *testing.T) {
	// Not parallel: urfave/cli v2 writes its package-level help flag while
	// parsing, which the race detector reports when two apps parse at once.
	ctx := context.Background()
	dsn := storetest.NewDatabase(t)
	st, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	appID := storetest.App(t, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
	wuID := storetest.Job(t, st, storetest.JobOptions{CreateTime: 1, App: appID, Name: "wu", MinQuorum: 1, TargetNResults: 1}).ID
	rid := storetest.Instance(t, st, storetest.InstanceOptions{CreateTime: 1, Job: wuID, ServerState: state.ServerUnsent, Name: "wu_0"}).ID

	path := filepath.Join(t.TempDir(), "cache")
	err = run(ctx, []string{"feeder", "--db-dsn", dsn, "--listen", "", "--one-pass", "--shm-path", path, "--slots", "8"})
	if err != nil {
		t.Fatalf("feeder --one-pass: %v", err)
	}
	c, err := shmcache.Open(path)
	if err != nil {
		t.Fatalf("Open after one pass: %v", err)
	}
	defer c.Close()
	if c.NSlots() != 8 || c.Heartbeat() == 0 {
		t.Fatalf("cache NSlots = %d, Heartbeat = %d; want 8 and a heartbeat", c.NSlots(), c.Heartbeat())
	}
	if e, ok := c.Peek(0); !ok || e.ResultID != rid {
		t.Fatalf("Peek(0) = %+v, %v; want result %d", e, ok, rid)
	}
	if tb, _, err := c.Tables(); err != nil || len(tb.Apps) != 1 {
		t.Fatalf("Tables = %+v, %v; want one app", tb, err)
	}
}

func TestRejectsBadFlags(t *testing.T) {
	// Not parallel: urfave/cli v2 writes its package-level help flag while
	// parsing, which the race detector reports when two apps parse at once.
	for _, args := range [][]string{
		{"--slots", "0"},
		{"--reclaim-after", "10ms"},
		{"--tables-interval", "0s"},
		{"--refill-at", "-1"},
	} {
		err := run(context.Background(), append([]string{"feeder", "--listen", ""}, args...))
		if err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("feeder %v: error %v, want one naming %s", args, err, args[0])
		}
	}
}
