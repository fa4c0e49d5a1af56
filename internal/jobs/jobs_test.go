package jobs_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestParamsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*jobs.Params)
		ok     bool
	}{
		{"defaults are valid", func(*jobs.Params) {}, true},
		{"single instance jobs are valid", func(p *jobs.Params) { p.MinQuorum, p.TargetNResults, p.MaxSuccessResults = 1, 1, 1 }, true},
		{"zero fpops estimate", func(p *jobs.Params) { p.RscFpopsEst = 0 }, false},
		{"fpops bound below estimate", func(p *jobs.Params) { p.RscFpopsBound = 1 }, false},
		{"delay bound under a second", func(p *jobs.Params) { p.DelayBound = time.Millisecond }, false},
		{"zero quorum", func(p *jobs.Params) { p.MinQuorum = 0 }, false},
		{"target below quorum", func(p *jobs.Params) { p.TargetNResults = 1 }, false},
		{"max total below target", func(p *jobs.Params) { p.MaxTotalResults = 1 }, false},
		{"max success below quorum", func(p *jobs.Params) { p.MaxSuccessResults = 1 }, false},
		{"no error results allowed", func(p *jobs.Params) { p.MaxErrorResults = 0 }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := jobs.DefaultParams()
			tc.mutate(&p)
			if err := p.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate(%+v) = %v, want ok=%v", p, err, tc.ok)
			}
		})
	}
}

func TestNewNameIsUniqueAndValid(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	a, b := jobs.NewName("demo", now), jobs.NewName("demo", now)
	if a == b || !strings.HasPrefix(a, "demo_1700000000_") || len(a) != len("demo_1700000000_")+16 {
		t.Fatalf("NewName twice = %q, %q; want distinct demo_<unix>_<16 hex>", a, b)
	}
	if err := fanout.ValidName(jobs.InputName(a)); err != nil {
		t.Fatalf("input name of %q is not a valid file name: %v", a, err)
	}
}

func TestSubmitRefusesExistingNameWithoutTouchingItsFile(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	appID, err := st.AppInsert(ctx, store.App{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "download")
	c := jobs.NewCreator(st, dir, 8, nil)
	if err := c.Submit(ctx, appID, jobs.Job{Name: "j1", Input: []byte("first")}, jobs.DefaultParams()); err != nil {
		t.Fatalf("Submit j1: %v", err)
	}
	err = c.Submit(ctx, appID, jobs.Job{Name: "j1", Input: []byte("second")}, jobs.DefaultParams())
	if !errors.Is(err, jobs.ErrJobExists) {
		t.Fatalf("second Submit j1 = %v, want ErrJobExists", err)
	}
	path, _ := fanout.Path(dir, "j1_in", 8)
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, []byte("first")) {
		t.Fatalf("input of j1 after refused resubmit = %q, %v; want \"first\"", got, err)
	}
	if err := c.Submit(ctx, appID, jobs.Job{Name: "bad/name", Input: nil}, jobs.DefaultParams()); err == nil {
		t.Fatal("Submit with a slash in the name succeeded, want an error")
	}
}
