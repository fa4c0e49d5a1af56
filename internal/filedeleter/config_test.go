package filedeleter_test

import (
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/filedeleter"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := filedeleter.Config{DownloadDir: "download", UploadDir: "upload", Fanout: 1024, Mod: 1, Batch: 500,
		OrphanAge: 24 * time.Hour, OrphanEvery: time.Hour, UploadGrace: time.Hour}
	if err := valid.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v, want nil", valid, err)
	}
	cases := []struct {
		name  string
		spoil func(*filedeleter.Config)
		want  string
	}{
		{"download dir", func(c *filedeleter.Config) { c.DownloadDir = "" }, "--download-dir is empty"},
		{"upload dir", func(c *filedeleter.Config) { c.UploadDir = "" }, "--upload-dir is empty"},
		{"fanout", func(c *filedeleter.Config) { c.Fanout = 0 }, "--fanout 0: want 1..65536"},
		{"workers", func(c *filedeleter.Config) { c.Workers = -1 }, "workers -1: want 0 (the default) or more"},
		{"orphan age", func(c *filedeleter.Config) { c.OrphanAge = -time.Second }, "--orphan-age -1s: want 0 (off) or a positive duration"},
		{"orphan every", func(c *filedeleter.Config) { c.OrphanEvery = 0 }, "--orphan-every 0s: want a positive duration"},
		{"upload grace", func(c *filedeleter.Config) { c.UploadGrace = -time.Second }, "--upload-grace -1s: want 0 (none) or a positive duration"},
		{"mod", func(c *filedeleter.Config) { c.Mod = 0 }, "--mod 0: want at least 1"},
		{"mod index", func(c *filedeleter.Config) { c.ModIndex = 1 }, "--mod-index 1: want 0 <= mod-index < mod (1)"},
		{"batch", func(c *filedeleter.Config) { c.Batch = 0 }, "--batch 0: want at least 1"},
	}
	for _, tc := range cases {
		cfg := valid
		tc.spoil(&cfg)
		if err := cfg.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("%s: Validate(%+v) = %v, want %q", tc.name, cfg, err, tc.want)
		}
		if _, err := filedeleter.New(cfg, filedeleter.Deps{}); err == nil || err.Error() != tc.want {
			t.Errorf("%s: New(%+v) = %v, want Validate's error %q", tc.name, cfg, err, tc.want)
		}
	}
	var all filedeleter.Config
	all.Workers = -1
	if err := all.Validate(); err == nil || len(err.(interface{ Unwrap() []error }).Unwrap()) != 7 {
		t.Errorf("Validate(%+v) = %v, want all 7 problems at once", all, err)
	}
}
