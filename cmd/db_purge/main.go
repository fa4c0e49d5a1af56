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
	return daemon.RunLoopProgram(ctx, args, daemon.LoopProgram{
		Name:   "db_purge",
		Usage:  "archive finished jobs and their instances, then delete their rows",
		Listen: "127.0.0.1:9107",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "archive-dir", Value: "archives", Usage: "directory of the archive files (relative to the project directory)", EnvVars: []string{config.EnvName("archive-dir")}},
			&cli.DurationFlag{Name: "min-age", Value: 0, Usage: "how long a finished job is kept after its files were deleted", EnvVars: []string{config.EnvName("min-age")}},
			&cli.IntFlag{Name: "max-archive-rows", Value: 10000, Usage: "rows per archive file before a new one is started", EnvVars: []string{config.EnvName("max-archive-rows")}},
		},
		Build: func(c *cli.Context, env daemon.Env) (daemon.Service, func() error, error) {
			svc, err := dbpurge.New(env.Store, dbpurge.Config{
				ArchiveDir:     env.Common.Path(c.String("archive-dir")),
				MinAge:         c.Duration("min-age"),
				MaxArchiveRows: c.Int("max-archive-rows"),
				Mod:            env.Loop.Mod,
				ModIndex:       env.Loop.ModIndex,
				Batch:          env.Loop.Batch,
			}, env.Log, dbpurge.NewMetrics(env.Registry), time.Now)
			if err != nil {
				return nil, nil, err
			}
			return svc, svc.Close, nil
		},
	})
}
