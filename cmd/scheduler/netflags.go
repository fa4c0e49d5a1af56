package main

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/clientaddr"
	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/connlimit"
	"github.com/taskserver/taskserver/internal/httpserve"
)

const (
	flagReadHeaderTimeout  = "read-header-timeout"
	flagIdleTimeout        = "idle-timeout"
	flagMinTransferRate    = "min-transfer-rate"
	flagMinTransferWindow  = "min-transfer-window"
	flagMaxConnections     = "max-connections"
	flagMaxConnsPerAddr    = "max-connections-per-addr"
	flagMaxConnsExempt     = "max-connections-exempt"
	flagTrustedProxies     = "trusted-proxies"
	defaultAdminListenAddr = "127.0.0.1:9101"
)

// netFlags are the public server's defences against clients that hold
// connections: timeouts, a minimum transfer rate, connection bounds, and
// which forwarded-for headers to believe.
func netFlags() []cli.Flag {
	env := func(name string) []string { return []string{config.EnvName(name)} }
	return []cli.Flag{
		&cli.DurationFlag{Name: flagReadHeaderTimeout, Value: httpserve.DefaultReadHeaderTimeout, EnvVars: env(flagReadHeaderTimeout),
			Usage: "time a client has to send a request's line and headers"},
		&cli.DurationFlag{Name: flagIdleTimeout, Value: httpserve.DefaultIdleTimeout, EnvVars: env(flagIdleTimeout),
			Usage: "time a kept-alive connection may wait for its next request"},
		&cli.Int64Flag{Name: flagMinTransferRate, Value: httpserve.DefaultMinBytesPerSecond, EnvVars: env(flagMinTransferRate),
			Usage: "least rate, in bytes per second averaged over --" + flagMinTransferWindow + ", at which a request body (an upload) must arrive and a response (a download) must be taken; a slower connection is closed (volunteers on the slowest lines move several kB/s)"},
		&cli.DurationFlag{Name: flagMinTransferWindow, Value: httpserve.DefaultMinRateWindow, EnvVars: env(flagMinTransferWindow),
			Usage: "window over which --" + flagMinTransferRate + " is measured: also the longest a transfer may stall, and the time a small request body or reply has"},
		&cli.IntFlag{Name: flagMaxConnections, Value: 0, EnvVars: env(flagMaxConnections),
			Usage: "most connections the public server holds open; more are closed at once (0: derived from the open-file limit, raised to its hard limit at start: (limit - 256) / 2, since each connection may hold a file too)"},
		&cli.IntFlag{Name: flagMaxConnsPerAddr, Value: connlimit.DefaultPerAddr, EnvVars: env(flagMaxConnsPerAddr),
			Usage: "most connections open at once from one IPv4 address or IPv6 /64 (0: no per-address bound)"},
		&cli.StringSliceFlag{Name: flagMaxConnsExempt, Value: cli.NewStringSlice("127.0.0.0/8", "::1/128"), EnvVars: env(flagMaxConnsExempt),
			Usage: "address prefixes with no per-address connection bound (default loopback: local tools; a reverse proxy, whose connections carry many volunteers, is exempt as one of --" + flagTrustedProxies + "); \"\" exempts none"},
		&cli.StringSliceFlag{Name: flagTrustedProxies, EnvVars: env(flagTrustedProxies),
			Usage: "address prefixes of reverse proxies in front of this server (e.g. 127.0.0.1/32); from them, the client is the right-most address in X-Forwarded-For that is not a proxy, for rate limits and host addresses; X-Forwarded-For from anyone else is ignored (default none)"},
	}
}

// netSettings are the validated values of netFlags.
type netSettings struct {
	server  httpserve.Options
	limits  connlimit.Limits
	proxies clientaddr.Proxies
}

// netSettingsFrom reads and checks netFlags. nofile is the open-file limit
// the default --max-connections is derived from.
func netSettingsFrom(c *cli.Context, nofile uint64) (netSettings, error) {
	var errs []error
	for _, f := range []string{flagReadHeaderTimeout, flagIdleTimeout, flagMinTransferWindow} {
		if d := c.Duration(f); d <= 0 {
			errs = append(errs, fmt.Errorf("--%s %s: want a positive duration", f, d))
		}
	}
	if n := c.Int64(flagMinTransferRate); n < 1 {
		errs = append(errs, fmt.Errorf("--%s %d: want at least 1 byte per second", flagMinTransferRate, n))
	}
	for _, f := range []string{flagMaxConnections, flagMaxConnsPerAddr} {
		if n := c.Int(f); n < 0 {
			errs = append(errs, fmt.Errorf("--%s %d: want 0 or more", f, n))
		}
	}
	proxies, err := clientaddr.ParseProxies(c.StringSlice(flagTrustedProxies))
	if err != nil {
		errs = append(errs, fmt.Errorf("--%s %w", flagTrustedProxies, err))
	}
	exempt, err := parsePrefixes(c.StringSlice(flagMaxConnsExempt))
	if err != nil {
		errs = append(errs, fmt.Errorf("--%s %w", flagMaxConnsExempt, err))
	}
	maxConns := c.Int(flagMaxConnections)
	if maxConns == 0 {
		maxConns = connlimit.DefaultMax(nofile)
	}
	return netSettings{
		server: httpserve.Options{
			ReadHeaderTimeout: c.Duration(flagReadHeaderTimeout),
			IdleTimeout:       c.Duration(flagIdleTimeout),
			MinRate:           httpserve.MinRate{BytesPerSecond: c.Int64(flagMinTransferRate), Window: c.Duration(flagMinTransferWindow)},
		},
		limits:  connlimit.Limits{Max: maxConns, PerAddr: c.Int(flagMaxConnsPerAddr), Exempt: append(exempt, proxies...)},
		proxies: proxies,
	}, errors.Join(errs...)
}

// parsePrefixes reads address prefixes, each item possibly a
// comma-separated list.
func parsePrefixes(items []string) ([]netip.Prefix, error) {
	var ps []netip.Prefix
	for _, item := range items {
		for _, s := range strings.Split(item, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("%q: want an address prefix such as 10.0.0.0/8: %w", s, err)
			}
			ps = append(ps, p.Masked())
		}
	}
	return ps, nil
}
