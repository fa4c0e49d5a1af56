package transitioner_test

import (
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/transitioner"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := transitioner.Config{Mod: 1, Batch: 500, MaxOutputBytes: transitioner.DefaultMaxOutputBytes,
		TailInterval: time.Second, TailFraction: 1, TailAfter: 10}
	if err := valid.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v, want nil", valid, err)
	}
	cases := []struct {
		name  string
		spoil func(*transitioner.Config)
		want  string
	}{
		{"max output bytes", func(c *transitioner.Config) { c.MaxOutputBytes = 0 }, "--max-output-bytes 0: want at least 1"},
		{"tail interval", func(c *transitioner.Config) { c.TailInterval = time.Second - 1 }, "--tail-interval 999.999999ms: want at least 1s"},
		{"tail fraction low", func(c *transitioner.Config) { c.TailFraction = -0.1 }, "--tail-fraction -0.1: want 0 to 1"},
		{"tail fraction high", func(c *transitioner.Config) { c.TailFraction = 1.5 }, "--tail-fraction 1.5: want 0 to 1"},
		{"tail after", func(c *transitioner.Config) { c.TailAfter = 11 }, "--tail-after 11: want 0 to 10"},
		{"mod", func(c *transitioner.Config) { c.Mod = 0 }, "--mod 0: want at least 1"},
		{"mod index", func(c *transitioner.Config) { c.ModIndex = -1 }, "--mod-index -1: want 0 <= mod-index < mod (1)"},
		{"batch", func(c *transitioner.Config) { c.Batch = 0 }, "--batch 0: want at least 1"},
	}
	for _, tc := range cases {
		cfg := valid
		tc.spoil(&cfg)
		if err := cfg.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("%s: Validate(%+v) = %v, want %q", tc.name, cfg, err, tc.want)
		}
		if _, err := transitioner.New(cfg, transitioner.Deps{}); err == nil || err.Error() != tc.want {
			t.Errorf("%s: New(%+v) = %v, want Validate's error %q", tc.name, cfg, err, tc.want)
		}
	}
	all := transitioner.Config{TailFraction: 2, TailAfter: -1}
	if err := all.Validate(); err == nil || len(err.(interface{ Unwrap() []error }).Unwrap()) != 6 {
		t.Errorf("Validate(%+v) = %v, want all 6 problems at once", all, err)
	}
}
