package main

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/scheduler"
)

// TestRateLimitFlags is not parallel: it runs cli apps (the urfave/cli help
// flag race).
func TestRateLimitFlags(t *testing.T) {
	parse := func(args ...string) (scheduler.RateLimit, error) {
		var rl scheduler.RateLimit
		var rerr error
		app := &cli.App{Name: "t", Flags: rateLimitFlags(), Action: func(c *cli.Context) error {
			rl, rerr = rateLimitFrom(c)
			return nil
		}}
		if err := app.Run(append([]string{"t"}, args...)); err != nil {
			t.Fatal(err)
		}
		return rl, rerr
	}
	rl, err := parse()
	want := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	if err != nil || rl.HostBurst != scheduler.DefaultHostBurst || rl.AddrEvery != scheduler.DefaultAddrEvery || !slices.Equal(rl.Exempt, want) {
		t.Fatalf("defaults = %+v, %v", rl, err)
	}
	if rl, err = parse("--rate-limit-exempt", "", "--rate-limit-host-burst", "0"); err != nil || len(rl.Exempt) != 0 || rl.HostBurst != 0 {
		t.Fatalf(`--rate-limit-exempt "" --rate-limit-host-burst 0 = %+v, %v; want no exemption, no host limit`, rl, err)
	}
	if rl, err = parse("--rate-limit-exempt", "10.1.2.3/8,fd00::/8"); err != nil || len(rl.Exempt) != 2 || rl.Exempt[0] != netip.MustParsePrefix("10.0.0.0/8") {
		t.Fatalf("--rate-limit-exempt 10.1.2.3/8,fd00::/8 = %+v, %v", rl, err)
	}
	_, err = parse("--rate-limit-exempt", "nonsense", "--rate-limit-host-every", "0s")
	for _, f := range []string{"--rate-limit-exempt \"nonsense\"", "--rate-limit-host-every 0s"} {
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("bad rate limit flags = %v, want it to name %s", err, f)
		}
	}
	// A negative burst is the scheduler Config's to report; a limited
	// scope's bad interval is reported by both, once.
	err = run(context.Background(), []string{"scheduler", "--db-dsn", "root@tcp(127.0.0.1:1)/none", "--project-dir", t.TempDir(),
		"--rate-limit-addr-every", "-1s", "--rate-limit-host-burst", "-1"})
	for _, f := range []string{"--rate-limit-addr-every -1s", "--rate-limit-host-burst -1"} {
		if err == nil || strings.Count(err.Error(), f) != 1 {
			t.Errorf("run with bad rate limit flags = %v, want it to name %s once", err, f)
		}
	}
}
