package validator_test

import (
	"testing"

	"github.com/taskserver/taskserver/internal/validator"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := validator.Config{App: "demo", UploadDir: "upload", Fanout: 1024, Mod: 1, Batch: 500, Workers: validator.DefaultWorkers}
	if err := valid.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v, want nil", valid, err)
	}
	cases := []struct {
		name  string
		spoil func(*validator.Config)
		want  string
	}{
		{"app", func(c *validator.Config) { c.App = "" },
			"--app is missing: name the app whose jobs to validate (or set TASKSERVER_APP, or app: in --config)"},
		{"upload dir", func(c *validator.Config) { c.UploadDir = "" }, "--upload-dir is empty"},
		{"fanout", func(c *validator.Config) { c.Fanout = 1<<16 + 1 }, "--fanout 65537: want 1..65536"},
		{"workers", func(c *validator.Config) { c.Workers = 0 }, "--workers 0: want at least 1"},
		{"mod", func(c *validator.Config) { c.Mod = 0 }, "--mod 0: want at least 1"},
		{"mod index", func(c *validator.Config) { c.Mod, c.ModIndex = 3, 3 }, "--mod-index 3: want 0 <= mod-index < mod (3)"},
		{"batch", func(c *validator.Config) { c.Batch = 0 }, "--batch 0: want at least 1"},
		{"daily result quota", func(c *validator.Config) { c.DailyResultQuota = -1 }, "--daily-result-quota -1: want 0 (none) or more"},
	}
	for _, tc := range cases {
		cfg := valid
		tc.spoil(&cfg)
		if err := cfg.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("%s: Validate(%+v) = %v, want %q", tc.name, cfg, err, tc.want)
		}
		if _, err := validator.New(cfg, validator.Deps{}); err == nil || err.Error() != tc.want {
			t.Errorf("%s: New(%+v) = %v, want Validate's error %q", tc.name, cfg, err, tc.want)
		}
	}
	var all validator.Config
	if err := all.Validate(); err == nil || len(err.(interface{ Unwrap() []error }).Unwrap()) != 6 {
		t.Errorf("Validate(%+v) = %v, want all 6 problems at once", all, err)
	}
}
