package dbpurge_test

import (
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/dbpurge"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := dbpurge.Config{ArchiveDir: "archives", MaxArchiveRows: 10000, Mod: 1, Batch: 500}
	if err := valid.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v, want nil", valid, err)
	}
	cases := []struct {
		name  string
		spoil func(*dbpurge.Config)
		want  string
	}{
		{"archive dir", func(c *dbpurge.Config) { c.ArchiveDir = "" }, "--archive-dir is empty"},
		{"min age", func(c *dbpurge.Config) { c.MinAge = -time.Second }, "--min-age -1s: want 0 or a positive duration"},
		{"max archive rows", func(c *dbpurge.Config) { c.MaxArchiveRows = 0 }, "--max-archive-rows 0: want at least 1"},
		{"mod", func(c *dbpurge.Config) { c.Mod = 0 }, "--mod 0: want at least 1"},
		{"mod index", func(c *dbpurge.Config) { c.Mod, c.ModIndex = 2, 2 }, "--mod-index 2: want 0 <= mod-index < mod (2)"},
		{"batch", func(c *dbpurge.Config) { c.Batch = 0 }, "--batch 0: want at least 1"},
	}
	for _, tc := range cases {
		cfg := valid
		tc.spoil(&cfg)
		if err := cfg.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("%s: Validate(%+v) = %v, want %q", tc.name, cfg, err, tc.want)
		}
		if _, err := dbpurge.New(cfg, dbpurge.Deps{}); err == nil || err.Error() != tc.want {
			t.Errorf("%s: New(%+v) = %v, want Validate's error %q", tc.name, cfg, err, tc.want)
		}
	}
	all := dbpurge.Config{MinAge: -1}
	if err := all.Validate(); err == nil || len(err.(interface{ Unwrap() []error }).Unwrap()) != 5 {
		t.Errorf("Validate(%+v) = %v, want all 5 problems at once", all, err)
	}
}
