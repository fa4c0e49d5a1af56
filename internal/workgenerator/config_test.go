package workgenerator_test

import (
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/workgenerator"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := workgenerator.Config{App: "demo", UnsentTarget: 200, Mod: 1, Batch: 500,
		CounterFile: "/p/demo.counter", Params: jobs.DefaultParams()}
	if err := valid.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v, want nil", valid, err)
	}
	cases := []struct {
		name  string
		spoil func(*workgenerator.Config)
		want  string
	}{
		{"app", func(c *workgenerator.Config) { c.App = "" },
			"--app is missing: name the app to create jobs for (or set TASKSERVER_APP, or app: in --config)"},
		{"unsent target", func(c *workgenerator.Config) { c.UnsentTarget = 0 }, "--unsent-target 0: want at least 1"},
		{"total jobs", func(c *workgenerator.Config) { c.TotalJobs = -1 }, "--total-jobs -1: want 0 (no limit) or more"},
		{"sharded", func(c *workgenerator.Config) { c.Mod = 2 }, "--mod 2: the work generator does not shard; run one per app"},
		{"mod", func(c *workgenerator.Config) { c.Mod = 0 }, "--mod 0: want at least 1"},
		{"mod index", func(c *workgenerator.Config) { c.ModIndex = 1 }, "--mod-index 1: want 0 <= mod-index < mod (1)"},
		{"batch", func(c *workgenerator.Config) { c.Batch = 0 }, "--batch 0: want at least 1"},
		{"counter file", func(c *workgenerator.Config) { c.CounterFile = "" }, "counter file path is empty"},
		{"job parameters", func(c *workgenerator.Config) { c.Params.MinQuorum = 0 }, "job parameters: min_quorum 0: want >= 1"},
	}
	for _, tc := range cases {
		cfg := valid
		tc.spoil(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: Validate(%+v) = %v, want %q", tc.name, cfg, err, tc.want)
		}
		if _, nerr := workgenerator.New(cfg, workgenerator.Deps{Creator: &jobs.Creator{}}); nerr == nil || err == nil || nerr.Error() != err.Error() {
			t.Errorf("%s: New(%+v) = %v, want Validate's error %v", tc.name, cfg, nerr, err)
		}
	}
	var all workgenerator.Config
	all.TotalJobs = -1
	if err := all.Validate(); err == nil || len(err.(interface{ Unwrap() []error }).Unwrap()) != 7 {
		t.Errorf("Validate(%+v) = %v, want all 7 problems at once", all, err)
	}
	if _, err := workgenerator.New(valid, workgenerator.Deps{}); err == nil {
		t.Errorf("New(%+v) with no job creator succeeded, want an error", valid)
	}
}
