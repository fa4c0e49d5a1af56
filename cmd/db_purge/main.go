// Command db_purge archives finished jobs and their instances to compressed
// XML files and deletes their rows, keeping the job tables a working set.
package main

import (
	"context"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/dbpurge"
)

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	return daemon.RunLoopProgram(ctx, args, daemon.LoopProgram[dbpurge.Config]{
		Name:   "db_purge",
		Usage:  "archive finished jobs and their instances, then delete their rows",
		Listen: "127.0.0.1:9107",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "archive-dir", Value: "archives", Usage: "directory of the archive files (relative to the project directory)", EnvVars: []string{config.EnvName("archive-dir")}},
			&cli.DurationFlag{Name: "min-age", Value: 0, Usage: "how long a finished job is kept after its files were deleted", EnvVars: []string{config.EnvName("min-age")}},
			&cli.DurationFlag{Name: "trickle-retention", Value: 30 * 24 * time.Hour, Usage: "how long handled trickle-up and delivered trickle-down messages are kept before they are deleted (not archived; 0: kept)", EnvVars: []string{config.EnvName("trickle-retention")}},
			&cli.IntFlag{Name: "max-archive-rows", Value: 10000, Usage: "rows per archive file before a new one is started", EnvVars: []string{config.EnvName("max-archive-rows")}},
		},
		Config: func(c *cli.Context, common config.Common, loop config.Loop) dbpurge.Config {
			return dbpurge.Config{
				ArchiveDir:       common.Path(c.String("archive-dir")),
				MinAge:           c.Duration("min-age"),
				MaxArchiveRows:   c.Int("max-archive-rows"),
				TrickleRetention: c.Duration("trickle-retention"),
				Mod:              loop.Mod,
				ModIndex:         loop.ModIndex,
				Batch:            loop.Batch,
			}
		},
		Build: func(_ *cli.Context, cfg dbpurge.Config, env daemon.Env) (daemon.Service, func() error, error) {
			svc, err := dbpurge.New(cfg, dbpurge.Deps{Store: env.Store, Log: env.Log, Metrics: dbpurge.NewMetrics(env.Registry)})
			if err != nil {
				return nil, nil, err
			}
			return svc, svc.Close, nil
		},
	})
}
