package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/scheduler"
)

const (
	flagRateLimitHostBurst = "rate-limit-host-burst"
	flagRateLimitHostEvery = "rate-limit-host-every"
	flagRateLimitAddrBurst = "rate-limit-addr-burst"
	flagRateLimitAddrEvery = "rate-limit-addr-every"
	flagRateLimitExempt    = "rate-limit-exempt"
)

// rateLimitFlags bound scheduler requests per host and per address; the
// defaults leave a client that waits request_delay untouched.
func rateLimitFlags() []cli.Flag {
	env := func(name string) []string { return []string{config.EnvName(name)} }
	return []cli.Flag{
		&cli.IntFlag{Name: flagRateLimitHostBurst, Value: scheduler.DefaultHostBurst, EnvVars: env(flagRateLimitHostBurst),
			Usage: "scheduler requests one host (host id and account key) may make back to back before it is answered with only a request_delay (0: no per-host limit)"},
		&cli.DurationFlag{Name: flagRateLimitHostEvery, Value: scheduler.DefaultHostEvery, EnvVars: env(flagRateLimitHostEvery),
			Usage: "after its burst, a host may make one more request per this interval"},
		&cli.IntFlag{Name: flagRateLimitAddrBurst, Value: scheduler.DefaultAddrBurst, EnvVars: env(flagRateLimitAddrBurst),
			Usage: "scheduler requests one IPv4 address or IPv6 /64 may make back to back (volunteers behind one NAT share it; 0: no per-address limit)"},
		&cli.DurationFlag{Name: flagRateLimitAddrEvery, Value: scheduler.DefaultAddrEvery, EnvVars: env(flagRateLimitAddrEvery),
			Usage: "after its burst, an address may make one more request per this interval"},
		&cli.StringSliceFlag{Name: flagRateLimitExempt, Value: cli.NewStringSlice("127.0.0.0/8", "::1/128"), EnvVars: env(flagRateLimitExempt),
			Usage: "address prefixes never rate limited (default loopback: local tools, and a reverse proxy on this machine, which would make all volunteers one address); \"\" exempts none"},
	}
}

// rateLimitFrom reads the rate limit flags and checks what only the flags
// require.
func rateLimitFrom(c *cli.Context) (scheduler.RateLimit, error) {
	rl := scheduler.RateLimit{
		HostBurst: c.Int(flagRateLimitHostBurst), HostEvery: c.Duration(flagRateLimitHostEvery),
		AddrBurst: c.Int(flagRateLimitAddrBurst), AddrEvery: c.Duration(flagRateLimitAddrEvery),
	}
	// A negative burst, or a limit without an interval, is the Config's to
	// report; an interval is wanted even for a scope turned off.
	var errs []error
	for _, f := range []string{flagRateLimitHostEvery, flagRateLimitAddrEvery} {
		if d := c.Duration(f); d <= 0 {
			errs = append(errs, fmt.Errorf("--%s %s: want a positive duration", f, d))
		}
	}
	exempt, err := parsePrefixes(c.StringSlice(flagRateLimitExempt))
	if err != nil {
		errs = append(errs, fmt.Errorf("--%s %w", flagRateLimitExempt, err))
	}
	rl.Exempt = exempt
	return rl, errors.Join(errs...)
}
