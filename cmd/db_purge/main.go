// Command db_purge archives finished jobs and their instances to compressed
// XML files and deletes their rows, keeping the job tables a working set.
package main

import (
	"context"
	"errors"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/dbpurge"
	"github.com/taskserver/taskserver/internal/store"
)

const program = "db_purge"

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	own := []cli.Flag{
		&cli.StringFlag{Name: "archive-dir", Value: "archives", Usage: "directory of the archive files (relative to the project directory)", EnvVars: []string{config.EnvName("archive-dir")}},
		&cli.DurationFlag{Name: "min-age", Value: 0, Usage: "how long a finished job is kept after its files were deleted", EnvVars: []string{config.EnvName("min-age")}},
		&cli.IntFlag{Name: "max-archive-rows", Value: 10000, Usage: "rows per archive file before a new one is started", EnvVars: []string{config.EnvName("max-archive-rows")}},
	}
	app := &cli.App{
		Name:   program,
		Usage:  "archive finished jobs and their instances, then delete their rows",
		Flags:  append(append(config.CommonFlags("127.0.0.1:9107"), config.LoopFlags()...), own...),
		Before: config.LoadFile,
		Action: func(c *cli.Context) (err error) {
			cfg, cerr := config.CommonFrom(c)
			loop, lerr := config.LoopFrom(c)
			if err := errors.Join(cerr, lerr); err != nil {
				return err
			}
			log := daemon.NewLogger(program, cfg.LogLevel)
			reg := daemon.NewRegistry(program)
			st, err := store.Open(ctx, cfg.DBDSN, store.Options{MaxOpenConns: 4})
			if err != nil {
				return err
			}
			defer st.Close()
			if err := st.SchemaCheck(ctx); err != nil {
				return err
			}
			svc, err := dbpurge.New(st, dbpurge.Config{
				ArchiveDir:     cfg.Path(c.String("archive-dir")),
				MinAge:         c.Duration("min-age"),
				MaxArchiveRows: c.Int("max-archive-rows"),
				Mod:            loop.Mod,
				ModIndex:       loop.ModIndex,
				Batch:          loop.Batch,
			}, log, dbpurge.NewMetrics(reg), time.Now)
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, svc.Close()) }()
			return daemon.RunLoop(ctx, log, reg, cfg.Listen, daemon.NewLoopMetrics(reg, program), svc,
				daemon.LoopOptions{Sleep: loop.Sleep, OnePass: loop.OnePass})
		},
	}
	return app.RunContext(ctx, args)
}
