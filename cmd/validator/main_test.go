package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The tests here run cli apps, so none is parallel: urfave/cli's help flag
// is package state.

// onePass makes a job of app "science" with two reported instances whose
// outputs are outs, runs one pass of the validator with extra flags, and
// returns the job afterwards.
func onePass(t *testing.T, outs [2]string, extra ...string) (row.Workunit, error) {
	t.Helper()
	dsn := storetest.NewDatabase(t)
	ctx := context.Background()
	st, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	defer st.Close()
	appID := storetest.App(t, st, storetest.AppOptions{Name: "science", UserFriendlyName: "Science"}).ID
	wuID := storetest.Job(t, st, storetest.JobOptions{App: appID, Name: "job", MinQuorum: 2, TargetNResults: 2,
		MaxErrorResults: 3, MaxTotalResults: 6, MaxSuccessResults: 3, NeedValidate: true}).ID
	project := t.TempDir()
	for i, name := range []string{"job_0", "job_1"} {
		doc, _ := jobxml.FormatResult(storetest.Outputs(name, []string{"out"}, 1e6))
		storetest.Instance(t, st, storetest.InstanceOptions{Job: wuID, Name: name, ServerState: state.ServerOver,
			Outcome: state.OutcomeSuccess, XMLDocIn: doc})
		path, _ := fanout.Path(filepath.Join(project, "up"), jobxml.OutputName(name, 0), 4)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(outs[i]), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, outputfile.FinishedMode); err != nil { // as the data server marks it
			t.Fatal(err)
		}
	}
	args := append([]string{"validator", "--db-dsn", dsn, "--one-pass", "--listen", "", "--app", "science",
		"--project-dir", project, "--upload-dir", "up", "--fanout", "4"}, extra...)
	if err := run(ctx, args); err != nil {
		return row.Workunit{}, err
	}
	wu, err := st.WorkunitGet(ctx, wuID)
	if err != nil {
		t.Fatalf("WorkunitGet: %v", err)
	}
	return wu, nil
}

func TestOnePassCheckers(t *testing.T) {
	tests := []struct {
		name          string
		outs          [2]string
		flags         []string
		wantCanonical bool
	}{
		{"bitwise by default: equal files agree", [2]string{"same", "same"}, nil, true},
		{"bitwise: last digits differ", [2]string{"1.0", "1.0000001"}, nil, false},
		{"numeric: last digits within the default tolerance", [2]string{"1.0", "1.0000001"},
			[]string{"--checker", "numeric"}, true},
		{"numeric: past a tighter tolerance", [2]string{"1.0", "1.0000001"},
			[]string{"--checker", "numeric", "--tolerance", "1e-9"}, false},
		{"trust: anything agrees", [2]string{"a", "b"}, []string{"--checker", "trust"}, true},
		{"command: the compare program decides", [2]string{"a", "b"},
			[]string{"--checker", "command", "--compare-cmd", "true"}, true},
		{"command: the compare program says no", [2]string{"a", "a"},
			[]string{"--checker", "command", "--compare-cmd", "false"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wu, err := onePass(t, tt.outs, tt.flags...)
			if err != nil {
				t.Fatalf("one pass with %v: %v", tt.flags, err)
			}
			if (wu.CanonicalResultID != 0) != tt.wantCanonical || wu.NeedValidate {
				t.Errorf("outputs %q with %v: canonical %d need_validate %v; want a canonical result: %v, need_validate false",
					tt.outs, tt.flags, wu.CanonicalResultID, wu.NeedValidate, tt.wantCanonical)
			}
		})
	}
}

func TestBadCheckerFlags(t *testing.T) {
	tests := []struct {
		flags []string
		want  string
	}{
		{[]string{"--checker", "fuzzy"}, `--checker "fuzzy"`},
		{[]string{"--checker", "command"}, "--compare-cmd"},
		{[]string{"--checker", "numeric", "--tolerance", "-1"}, "--tolerance"},
		{[]string{"--checker", "command", "--compare-cmd", "cmp", "--command-timeout", "-1s"}, "negative"},
	}
	for _, tt := range tests {
		// The flags are checked before the database is opened.
		args := append([]string{"validator", "--db-dsn", "root@tcp(127.0.0.1:1)/none", "--one-pass", "--listen", ""}, tt.flags...)
		err := run(context.Background(), args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run(%v) = %v, want an error naming %s", tt.flags, err, tt.want)
		}
	}
}

func TestAppIsRequired(t *testing.T) {
	t.Setenv("TASKSERVER_APP", "")
	args := []string{"validator", "--db-dsn", "root@tcp(127.0.0.1:1)/none", "--one-pass", "--listen", ""}
	// Bounded: were --app not checked first, the run would wait for the
	// database.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := run(ctx, args)
	if err == nil || !strings.Contains(err.Error(), "--app is missing") {
		t.Errorf("run(%v) = %v; want --app is missing", args, err)
	}
}
