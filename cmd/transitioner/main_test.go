package main

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOnePassCreatesInstances(t *testing.T) {
	// Not parallel: urfave/cli v2 writes its package-level help flag while
	// parsing, which the race detector reports when two apps parse at once.
	dsn := storetest.NewDatabase(t)
	ctx := context.Background()
	st, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	defer st.Close()
	appID := storetest.App(t, st, storetest.AppOptions{Name: "demo", UserFriendlyName: "Demo"}).ID
	wuID := storetest.Job(t, st, storetest.JobOptions{App: appID, Name: "job", MinQuorum: 2, TargetNResults: 2,
		MaxErrorResults: 3, MaxTotalResults: 6, MaxSuccessResults: 3, TransitionTime: time.Now().Unix()}).ID
	args := []string{"transitioner", "--db-dsn", dsn, "--one-pass", "--listen", "", "--max-output-bytes", "4096",
		"--tail-interval", "30s", "--tail-fraction", "0.1", "--tail-after", "0.25"}
	if err := run(ctx, args); err != nil {
		t.Fatalf("run(%v): %v", args, err)
	}
	rs, err := st.ResultListByWorkunit(ctx, wuID)
	if err != nil || len(rs) != 2 || rs[0].ServerState != state.ServerUnsent {
		t.Fatalf("after one pass: %d instances (%v), want 2 unsent", len(rs), err)
	}
}

func TestRejectsBadFlags(t *testing.T) {
	// Not parallel: urfave/cli v2 writes its package-level help flag while
	// parsing, which the race detector reports when two apps parse at once.
	for _, args := range [][]string{
		{"transitioner", "--max-output-bytes", "0", "--one-pass"},
		{"transitioner", "--mod", "2", "--mod-index", "2", "--one-pass"},
		{"transitioner", "--tail-interval", "0s", "--one-pass"},
		{"transitioner", "--tail-fraction", "1.5", "--one-pass"},
		{"transitioner", "--tail-fraction", "-0.1", "--one-pass"},
		{"transitioner", "--tail-after", "-1", "--one-pass"},
	} {
		if err := run(context.Background(), args); err == nil {
			t.Errorf("run(%v) = nil, want an error", args)
		}
	}
}
