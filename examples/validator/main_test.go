package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
	"github.com/taskserver/taskserver/internal/validator"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var checker = demoChecker{tolerance: 1e-9}

// initOutput writes contents as one output file and initialises it.
func initOutput(t *testing.T, contents ...string) (any, error) {
	t.Helper()
	var paths []string
	for i, c := range contents {
		p := filepath.Join(t.TempDir(), "out"+string(rune('0'+i)))
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return checker.Init(context.Background(), row.Result{ID: 1}, paths)
}

func TestDemoCheckerCompare(t *testing.T) {
	t.Parallel()
	honest := string(demoapp.Output("job"))
	tests := []struct {
		name string
		a, b string
		want bool
	}{
		{"the correct output agrees with itself", honest, honest, true},
		{"a forged digest", honest, strings.Replace(honest, "digest ", "digest 0", 1), false},
		{"a number written differently", honest, strings.Replace(honest, "rounds 1000", "rounds 1000.0", 1), true},
		{"a number within tolerance", "bytes 4096\ndigest ab\n", "bytes 4096.000000001\ndigest ab\n", true},
		{"a number past tolerance", "bytes 4096\ndigest ab\n", "bytes 4097\ndigest ab\n", false},
		{"a digest that reads as a number is still exact", "digest 1e5\n", "digest 100000\n", false},
		{"keys in another order", "bytes 1\ndigest ab\n", "digest ab\nbytes 1\n", false},
		{"a line more", "digest ab\n", "digest ab\nnote x\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, errA := initOutput(t, tt.a)
			b, errB := initOutput(t, tt.b)
			if errA != nil || errB != nil {
				t.Fatalf("Init: %v, %v", errA, errB)
			}
			defer checker.Cleanup(a)
			defer checker.Cleanup(b)
			if got, err := checker.Compare(context.Background(), a, b); err != nil || got != tt.want {
				t.Errorf("Compare(%q, %q) = %v, %v; want %v", tt.a, tt.b, got, err, tt.want)
			}
		})
	}
}

func TestDemoCheckerRejectsMalformedOutput(t *testing.T) {
	t.Parallel()
	for _, files := range [][]string{
		{"bytes 4096\nrounds 1000\n"},  // no digest
		{"digest\n"},                   // a line without a value
		{"digest ab\n", "digest ab\n"}, // two files
	} {
		if _, err := initOutput(t, files...); !errors.Is(err, validator.ErrInvalidOutput) {
			t.Errorf("Init(%q) = %v, want ErrInvalidOutput", files, err)
		}
	}
}

// TestOnePassWithTheDemoChecker runs the example's validator as main does,
// for one pass; it runs a cli app, so it is not parallel.
func TestOnePassWithTheDemoChecker(t *testing.T) {
	dsn := storetest.NewDatabase(t)
	ctx := context.Background()
	st, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	defer st.Close()
	appID, err := st.AppInsert(ctx, row.App{Name: demoapp.AppName, UserFriendlyName: "Demo"})
	if err != nil {
		t.Fatalf("AppInsert: %v", err)
	}
	wuID, err := st.WorkunitInsert(ctx, row.Workunit{AppID: appID, Name: "job", MinQuorum: 2, TargetNResults: 2,
		MaxErrorResults: 3, MaxTotalResults: 6, MaxSuccessResults: 3, NeedValidate: true})
	if err != nil {
		t.Fatalf("WorkunitInsert: %v", err)
	}
	honest := string(demoapp.Output("job"))
	outs := map[string]string{
		"job_0": honest,
		"job_1": strings.Replace(honest, "rounds 1000", "rounds 1000.0", 1), // agrees, not bitwise
		"job_2": strings.Replace(honest, "digest ", "digest 0", 1),          // a cheater
	}
	project := t.TempDir()
	ids := map[string]int64{}
	for _, name := range []string{"job_0", "job_1", "job_2"} {
		doc, _ := jobxml.FormatResult(name, []string{"out"}, 1e6)
		if ids[name], err = st.ResultInsert(ctx, row.Result{WorkunitID: wuID, Name: name, ServerState: state.ServerOver,
			Outcome: state.OutcomeSuccess, XMLDocIn: doc}); err != nil {
			t.Fatalf("ResultInsert: %v", err)
		}
		path, _ := fanout.Path(filepath.Join(project, "up"), jobxml.OutputName(name, 0), 4)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		// Finished (read-only), as the data server leaves a complete
		// upload: the validator takes no other file as an output.
		if err := os.WriteFile(path, []byte(outs[name]), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"validator", "--db-dsn", dsn, "--one-pass", "--listen", "", "--project-dir", project,
		"--upload-dir", "up", "--fanout", "4"}
	if err := validator.Run(ctx, args, checker); err != nil {
		t.Fatalf("validator.Run(%v): %v", args, err)
	}
	if wu, err := st.WorkunitGet(ctx, wuID); err != nil || wu.CanonicalResultID != ids["job_0"] {
		t.Fatalf("job canonical %d (%v), want %d", wu.CanonicalResultID, err, ids["job_0"])
	}
	for name, want := range map[string]state.ValidateState{"job_0": state.ValidateValid, "job_1": state.ValidateValid,
		"job_2": state.ValidateInvalid} {
		if r, err := st.ResultGet(ctx, ids[name]); err != nil || r.ValidateState != want {
			t.Errorf("%s = %v (%v), want %v", name, r.ValidateState, err, want)
		}
	}
}
