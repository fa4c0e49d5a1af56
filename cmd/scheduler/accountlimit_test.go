package main

import (
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/scheduler"
)

// TestAccountLimitFlags is not parallel: it runs cli apps (the urfave/cli
// help flag race).
func TestAccountLimitFlags(t *testing.T) {
	parse := func(args ...string) (scheduler.AccountLimit, error) {
		var lim scheduler.AccountLimit
		var lerr error
		app := &cli.App{Name: "t", Flags: append(rateLimitFlags(), accountLimitFlags()...), Action: func(c *cli.Context) error {
			rl, err := rateLimitFrom(c)
			if err != nil {
				t.Fatal(err)
			}
			lim, lerr = accountLimitFrom(c, rl)
			return nil
		}}
		if err := app.Run(append([]string{"t"}, args...)); err != nil {
			t.Fatal(err)
		}
		return lim, lerr
	}
	lim, err := parse()
	want := scheduler.DefaultAccountLimit
	if err != nil || lim.EmailFailures != want.EmailFailures || lim.AddrFailures != want.AddrFailures || lim.Lockout != want.Lockout ||
		lim.MaxLockout != want.MaxLockout || lim.AddrBurst != want.AddrBurst || lim.AddrEvery != want.AddrEvery || len(lim.Exempt) != 2 {
		t.Fatalf("defaults = %+v, %v; want %+v with the loopback exemption", lim, err, want)
	}
	// Each flag reaches its field.
	lim, err = parse("--account-limit-email-failures", "3", "--account-limit-addr-failures", "7",
		"--account-limit-lockout", "2m", "--account-limit-max-lockout", "3h", "--account-limit-addr-burst", "9",
		"--account-limit-addr-every", "5s")
	if err != nil || lim.EmailFailures != 3 || lim.AddrFailures != 7 || lim.Lockout != 2*time.Minute ||
		lim.MaxLockout != 3*time.Hour || lim.AddrBurst != 9 || lim.AddrEvery != 5*time.Second {
		t.Fatalf("set flags = %+v, %v; want 3, 7, 2m, 3h, 9, 5s", lim, err)
	}
	_, err = parse("--account-limit-email-failures", "-1", "--account-limit-lockout", "2h", "--passwd-cost", "40")
	for _, f := range []string{"--account-limit-email-failures -1", "--account-limit-max-lockout 1h0m0s", "--passwd-cost"} {
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("bad account limit flags = %v, want it to name %s", err, f)
		}
	}
}
