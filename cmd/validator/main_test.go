package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOnePassValidates(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	ctx := context.Background()
	st, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	defer st.Close()
	appID, err := st.AppInsert(ctx, store.App{Name: "science", UserFriendlyName: "Science"})
	if err != nil {
		t.Fatalf("AppInsert: %v", err)
	}
	wuID, err := st.WorkunitInsert(ctx, store.Workunit{AppID: appID, Name: "job", MinQuorum: 2, TargetNResults: 2,
		MaxErrorResults: 3, MaxTotalResults: 6, MaxSuccessResults: 3, NeedValidate: true})
	if err != nil {
		t.Fatalf("WorkunitInsert: %v", err)
	}
	project := t.TempDir()
	for _, name := range []string{"job_0", "job_1"} {
		doc, _ := jobxml.FormatResult(name, []string{"out"}, 1e6)
		if _, err := st.ResultInsert(ctx, store.Result{WorkunitID: wuID, Name: name, ServerState: state.ServerOver,
			Outcome: state.OutcomeSuccess, XMLDocIn: doc}); err != nil {
			t.Fatalf("ResultInsert: %v", err)
		}
		path, _ := fanout.Path(filepath.Join(project, "up"), jobxml.OutputName(name, 0), 4)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("same"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"validator", "--db-dsn", dsn, "--one-pass", "--listen", "", "--app", "science",
		"--project-dir", project, "--upload-dir", "up", "--fanout", "4"}
	if err := run(ctx, args); err != nil {
		t.Fatalf("run(%v): %v", args, err)
	}
	wu, err := st.WorkunitGet(ctx, wuID)
	if err != nil || wu.CanonicalResultID == 0 || wu.NeedValidate {
		t.Fatalf("after one pass: job canonical %d need_validate %v (%v); want a canonical result, false",
			wu.CanonicalResultID, wu.NeedValidate, err)
	}
}
