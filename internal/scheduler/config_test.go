package scheduler

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := testConfig()
	if err := valid.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v, want nil", valid, err)
	}
	cases := []struct {
		name  string
		spoil func(*Config)
		want  string
	}{
		{"url base", func(c *Config) { c.URLBase = "127.0.0.1:8080" }, `--url-base "127.0.0.1:8080": want an absolute http or https URL`},
		{"fanout", func(c *Config) { c.Fanout = 0 }, "--fanout 0: want 1..65536"},
		{"upload grace", func(c *Config) { c.UploadGrace = -time.Second }, "--upload-grace -1s: want 0 (none) or a positive duration"},
		{"next rpc delay", func(c *Config) { c.NextRPCDelay = -time.Second }, "--next-rpc-delay -1s: want 0 or a positive duration"},
		{"request delay", func(c *Config) { c.RequestDelay = 0 }, "--request-delay 0s: want a positive duration"},
		{"max results per rpc", func(c *Config) { c.MaxResultsPerRPC = 0 }, "--max-results-per-rpc 0: want at least 1"},
		{"max in progress per cpu", func(c *Config) { c.MaxInProgressPerCPU = 0 }, "--max-in-progress-per-cpu 0: want at least 1"},
		{"max in progress per gpu", func(c *Config) { c.MaxInProgressPerGPU = -1 }, "--max-in-progress-per-gpu -1: want 0 (no limit) or more"},
		{"app max in progress", func(c *Config) { c.AppMaxInProgress = map[string]int{"a": 0} }, "--app-max-in-progress a=0: want APP=N with N at least 1"},
		{"ar trust valid", func(c *Config) { c.ARTrustValid = 0 }, "--ar-trust-valid 0: want at least 1"},
		{"commit lanes", func(c *Config) { c.CommitLanes = 0 }, "--commit-lanes 0: want at least 1"},
		{"ar spot check", func(c *Config) { c.ARSpotCheck = math.NaN() }, "--ar-spot-check NaN: want a probability between 0 and 1"},
		{"quarantine streak", func(c *Config) { c.QuarantineStreak = -1 }, "--quarantine-streak -1: want 0 (off) or more"},
		{"daily result quota", func(c *Config) { c.DailyResultQuota = -1 }, "--daily-result-quota -1: want 0 (off) or more"},
		{"gpu quota multiplier", func(c *Config) { c.GPUQuotaMultiplier = -1 }, "--gpu-quota-multiplier -1: want 1 or more"},
		{"max body bytes", func(c *Config) { c.MaxBodyBytes = 4095 }, "--max-body-bytes 4095: want at least 4096"},
		{"timeout", func(c *Config) { c.Timeout = -time.Second }, "timeout -1s: want 0 (the default) or a positive duration"},
		{"host burst", func(c *Config) { c.RateLimit.HostBurst = -1 }, "--rate-limit-host-burst -1: want 0 (off) or more"},
		{"addr every", func(c *Config) { c.RateLimit.AddrBurst = 5 }, "--rate-limit-addr-every 0s: want a positive duration"},
		{"rate limit keys", func(c *Config) { c.RateLimit.MaxKeys = -1 }, "rate limit keys -1: want 0 (the default) or more"},
	}
	for _, tc := range cases {
		cfg := valid
		tc.spoil(&cfg)
		if err := cfg.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("%s: Validate(%+v) = %v, want %q", tc.name, cfg, err, tc.want)
		}
		if _, err := New(cfg, Deps{}); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: New(%+v) = %v, want Validate's error %q first", tc.name, cfg, err, tc.want)
		}
	}
	var all Config
	all.QuarantineStreak = -1
	if err := all.Validate(); err == nil || len(err.(interface{ Unwrap() []error }).Unwrap()) != 9 {
		t.Errorf("Validate(%+v) = %v, want all 9 problems at once", all, err)
	}
}
