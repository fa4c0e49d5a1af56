package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The tests run the cli app and so are not parallel: urfave/cli's help
// flag is a package-level variable.

func TestOnePassWritesUnderProjectDir(t *testing.T) {
	dsn := storetest.NewDatabase(t)
	ctx := context.Background()
	st, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	defer st.Close()
	appID := storetest.App(t, st, storetest.AppOptions{Name: "demo", UserFriendlyName: "Demo"}).ID
	storetest.Job(t, st, storetest.JobOptions{App: appID, Name: "job", ErrorMask: state.ErrCancelled,
		AssimilateState: state.AssimilateReady})
	project := t.TempDir()
	args := []string{"assimilator", "--db-dsn", dsn, "--one-pass", "--listen", "", "--project-dir", project, "--app", "demo"}
	if err := run(ctx, args); err != nil {
		t.Fatalf("run(%v): %v", args, err)
	}
	body, err := os.ReadFile(filepath.Join(project, "results", "job.error"))
	if err != nil || string(body) != "cancelled\n" {
		t.Fatalf("results/job.error = %q, %v; want cancelled", body, err)
	}
}

func TestOnePassRunsHandlerCommand(t *testing.T) {
	dsn := storetest.NewDatabase(t)
	ctx := context.Background()
	st, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	defer st.Close()
	appID := storetest.App(t, st, storetest.AppOptions{Name: "demo", UserFriendlyName: "Demo"}).ID
	id := storetest.Job(t, st, storetest.JobOptions{App: appID, Name: "job", Batch: 2, ErrorMask: state.ErrCancelled,
		AssimilateState: state.AssimilateReady}).ID
	dir := t.TempDir()
	script, log := filepath.Join(dir, "h.sh"), filepath.Join(dir, "log")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$TASKSERVER_JOB_NAME $TASKSERVER_BATCH $TASKSERVER_ERROR_NAMES\" >> \"$1\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"assimilator", "--db-dsn", dsn, "--one-pass", "--listen", "", "--project-dir", dir, "--app", "demo",
		"--handler-cmd", "/bin/sh " + script + " " + log, "--handler-timeout", "1m"}
	if err := run(ctx, args); err != nil {
		t.Fatalf("run(%v): %v", args, err)
	}
	if body, err := os.ReadFile(log); err != nil || string(body) != "job 2 cancelled\n" {
		t.Errorf("the handler command wrote %q, %v; want \"job 2 cancelled\"", body, err)
	}
	if wu, err := st.WorkunitGet(ctx, id); err != nil || wu.AssimilateState != state.AssimilateDone {
		t.Errorf("job after the pass = %v, %v; want done", wu.AssimilateState, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "results")); !os.IsNotExist(err) {
		t.Errorf("results dir with the command handler: %v; want none made", err)
	}
}

func TestBadHandlerFlagsAreRejectedBeforeTheDatabase(t *testing.T) {
	args := []string{"assimilator", "--db-dsn", "nobody@tcp(127.0.0.1:1)/none", "--one-pass", "--listen", "",
		"--handler", "copy", "--handler-cmd", "x", "--handler-timeout", "-1s"}
	err := run(context.Background(), args)
	if err == nil || !strings.Contains(err.Error(), "--handler-cmd is set but --handler is copy") ||
		!strings.Contains(err.Error(), "--handler-timeout -1s") {
		t.Errorf("run(%v) = %v; want both flag problems reported", args, err)
	}
}

func TestAppIsRequired(t *testing.T) {
	t.Setenv("TASKSERVER_APP", "")
	args := []string{"assimilator", "--db-dsn", "nobody@tcp(127.0.0.1:1)/none", "--one-pass", "--listen", ""}
	// Bounded: were --app not checked first, the run would wait for the
	// database.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := run(ctx, args)
	if err == nil || !strings.Contains(err.Error(), "--app is missing") {
		t.Errorf("run(%v) = %v; want --app is missing", args, err)
	}
}
