package feeder

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/shmcache"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := validConfig(8)
	if err := valid.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v, want nil", valid, err)
	}
	cases := []struct {
		name  string
		spoil func(*Config)
		want  string
	}{
		{"slots", func(c *Config) { c.Slots = 0 }, "--slots 0: want 1..1048576"},
		{"too many slots", func(c *Config) { c.Slots = shmcache.MaxSlots + 1 }, fmt.Sprintf("--slots %d: want 1..%d", shmcache.MaxSlots+1, shmcache.MaxSlots)},
		{"reclaim after", func(c *Config) { c.ReclaimAfter = time.Second - 1 }, "--reclaim-after 999.999999ms: want at least 1s"},
		{"refill at negative", func(c *Config) { c.RefillAt = -1 }, "--refill-at -1: want 0..--slots"},
		{"refill at past slots", func(c *Config) { c.RefillAt = 9 }, "--refill-at 9: want 0..--slots"},
		{"tables interval", func(c *Config) { c.TablesInterval = 0 }, "--tables-interval 0s: want a positive duration"},
		{"max wait", func(c *Config) { c.MaxWait = -1 }, "max wait -1ns: want 0 (the default) or a positive duration"},
		{"mod", func(c *Config) { c.Mod = 0 }, "--mod 0: want at least 1"},
		{"mod index", func(c *Config) { c.ModIndex = 1 }, "--mod-index 1: want 0 <= mod-index < mod (1)"},
		{"batch", func(c *Config) { c.Batch = 0 }, "--batch 0: want at least 1"},
	}
	for _, tc := range cases {
		cfg := valid
		tc.spoil(&cfg)
		if err := cfg.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("%s: Validate(%+v) = %v, want %q", tc.name, cfg, err, tc.want)
		}
		if _, err := New(cfg, Deps{}); err == nil || err.Error() != tc.want {
			t.Errorf("%s: New(%+v) = %v, want Validate's error %q", tc.name, cfg, err, tc.want)
		}
	}
	all := Config{MaxWait: -1}
	if err := all.Validate(); err == nil || len(err.(interface{ Unwrap() []error }).Unwrap()) != 6 {
		t.Errorf("Validate(%+v) = %v, want all 6 problems at once", all, err)
	}
}

// New refuses a cache whose size is not the Config's: the slots the
// feeder plans for would not be the slots it fills.
func TestNewRefusesACacheOfAnotherSize(t *testing.T) {
	t.Parallel()
	cache, err := shmcache.Create(filepath.Join(t.TempDir(), "cache"), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	if _, err := New(validConfig(8), Deps{Cache: cache}); err == nil {
		t.Fatal("New with --slots 8 and a cache of 4 slots succeeded, want an error")
	}
}
