package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/passwd"
	"github.com/taskserver/taskserver/internal/scheduler"
)

const (
	flagAccountEmailFailures = "account-limit-email-failures"
	flagAccountAddrFailures  = "account-limit-addr-failures"
	flagAccountLockout       = "account-limit-lockout"
	flagAccountMaxLockout    = "account-limit-max-lockout"
	flagAccountAddrBurst     = "account-limit-addr-burst"
	flagAccountAddrEvery     = "account-limit-addr-every"
	flagPasswdCost           = "passwd-cost"
)

// accountLimitFlags bound password guessing through lookup_account and
// create_account, and set the cost of the stored password hashes.
func accountLimitFlags() []cli.Flag {
	env := func(name string) []string { return []string{config.EnvName(name)} }
	d := scheduler.DefaultAccountLimit
	return []cli.Flag{
		&cli.IntFlag{Name: flagAccountEmailFailures, Value: d.EmailFailures, EnvVars: env(flagAccountEmailFailures),
			Usage: "failed logins (lookup_account, create_account) naming one e-mail address, from anywhere, before it is locked out; even the right password is then refused (0: no per-e-mail lockout)"},
		&cli.IntFlag{Name: flagAccountAddrFailures, Value: d.AddrFailures, EnvVars: env(flagAccountAddrFailures),
			Usage: "failed logins from one IPv4 address or IPv6 /64 before it is locked out (volunteers behind one NAT share it; addresses in --" + flagRateLimitExempt + " are not limited; 0: no per-address lockout)"},
		&cli.DurationFlag{Name: flagAccountLockout, Value: d.Lockout, EnvVars: env(flagAccountLockout),
			Usage: "first lockout; each failure after a lockout doubles it"},
		&cli.DurationFlag{Name: flagAccountMaxLockout, Value: d.MaxLockout, EnvVars: env(flagAccountMaxLockout),
			Usage: "longest lockout; failures are forgotten this long after the last one"},
		&cli.IntFlag{Name: flagAccountAddrBurst, Value: d.AddrBurst, EnvVars: env(flagAccountAddrBurst),
			Usage: "lookup_account and create_account requests one address may make back to back, successful or not (0: no rate limit)"},
		&cli.DurationFlag{Name: flagAccountAddrEvery, Value: d.AddrEvery, EnvVars: env(flagAccountAddrEvery),
			Usage: "after its burst, an address may make one more account request per this interval"},
		&cli.IntFlag{Name: flagPasswdCost, Value: passwd.DefaultCost, EnvVars: env(flagPasswdCost),
			Usage: "bcrypt cost of the stored password hashes (BOINC's: 10); weaker ones are made again at the next login"},
	}
}

// accountLimitFrom reads and checks the account limit flags; the exempt
// addresses are the scheduler rate limit's.
func accountLimitFrom(c *cli.Context, rl scheduler.RateLimit) (scheduler.AccountLimit, error) {
	lim := scheduler.AccountLimit{
		EmailFailures: c.Int(flagAccountEmailFailures), AddrFailures: c.Int(flagAccountAddrFailures),
		Lockout: c.Duration(flagAccountLockout), MaxLockout: c.Duration(flagAccountMaxLockout),
		AddrBurst: c.Int(flagAccountAddrBurst), AddrEvery: c.Duration(flagAccountAddrEvery),
		Exempt: rl.Exempt,
	}
	var errs []error
	for _, f := range []string{flagAccountEmailFailures, flagAccountAddrFailures, flagAccountAddrBurst} {
		if n := c.Int(f); n < 0 {
			errs = append(errs, fmt.Errorf("--%s %d: want 0 (off) or more", f, n))
		}
	}
	for _, f := range []string{flagAccountLockout, flagAccountAddrEvery} {
		if d := c.Duration(f); d <= 0 {
			errs = append(errs, fmt.Errorf("--%s %s: want a positive duration", f, d))
		}
	}
	if lim.MaxLockout < lim.Lockout {
		errs = append(errs, fmt.Errorf("--%s %s: want at least --%s (%s)", flagAccountMaxLockout, lim.MaxLockout, flagAccountLockout, lim.Lockout))
	}
	if err := passwd.CheckCost(c.Int(flagPasswdCost)); err != nil {
		errs = append(errs, fmt.Errorf("--%s: %w", flagPasswdCost, err))
	}
	return lim, errors.Join(errs...)
}
