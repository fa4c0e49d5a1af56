package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOnePassWritesUnderProjectDir(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	ctx := context.Background()
	st, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	defer st.Close()
	appID, err := st.AppInsert(ctx, store.App{Name: "demo", UserFriendlyName: "Demo"})
	if err != nil {
		t.Fatalf("AppInsert: %v", err)
	}
	if _, err := st.WorkunitInsert(ctx, store.Workunit{AppID: appID, Name: "job", ErrorMask: state.ErrCancelled,
		AssimilateState: state.AssimilateReady}); err != nil {
		t.Fatalf("WorkunitInsert: %v", err)
	}
	project := t.TempDir()
	args := []string{"assimilator", "--db-dsn", dsn, "--one-pass", "--listen", "", "--project-dir", project}
	if err := run(ctx, args); err != nil {
		t.Fatalf("run(%v): %v", args, err)
	}
	body, err := os.ReadFile(filepath.Join(project, "results", "job.error"))
	if err != nil || string(body) != "cancelled\n" {
		t.Fatalf("results/job.error = %q, %v; want cancelled", body, err)
	}
}
