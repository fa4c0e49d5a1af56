// Command db_dump writes the project's statistics for the volunteer
// statistics sites in BOINC's db_dump format (package statsexport): a new
// dump every --interval, swapped in whole over the previous one.
package main

import (
	"context"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/statsexport"
)

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	return daemon.RunLoopProgram(ctx, args, daemon.LoopProgram[statsexport.Config]{
		Name: "db_dump",
		Usage: "export users, teams and hosts with their credit for the statistics sites (BOINC's db_dump files: " +
			"user.gz, team.gz, host.gz, tables.xml ...), every --interval; a pass (--one-pass too) dumps only when the " +
			"dump in place is --interval old or missing: `taskctl stats export` dumps at once",
		Listen: "127.0.0.1:9110",
		// A pass that finds the dump fresh only reads a file: a minute
		// between looks is precise enough for a daily dump.
		Sleep: time.Minute,
		// One pass writes a whole dump: minutes for a million users and
		// hosts (BenchmarkExport100k), so an hour is a hang.
		PassTimeout: time.Hour,
		// Rows are only formatted and compressed: large batches spend
		// less in round trips (BenchmarkExport100k: 500 rows a query took
		// half as long again as 5000).
		Batch: 5000,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Value: "html/stats", Usage: "directory the dump is published in (relative to the project directory; BOINC's html/stats, which its web server serves as /stats/)", EnvVars: []string{config.EnvName("out")}},
			&cli.DurationFlag{Name: "interval", Value: 24 * time.Hour, Usage: "time from one dump to the next, by the update_time of the dump in place (at least 1m)", EnvVars: []string{config.EnvName("interval")}},
		},
		Config: func(c *cli.Context, common config.Common, loop config.Loop) statsexport.Config {
			return statsexport.Config{
				Dir:      common.Path(c.String("out")),
				Interval: c.Duration("interval"),
				Batch:    loop.Batch,
				Mod:      loop.Mod,
				ModIndex: loop.ModIndex,
			}
		},
		Build: func(_ *cli.Context, cfg statsexport.Config, env daemon.Env) (daemon.Service, func() error, error) {
			svc, err := statsexport.New(cfg, statsexport.Deps{Store: env.Store, Log: env.Log, Metrics: statsexport.NewMetrics(env.Registry)})
			return svc, nil, err
		},
	})
}
