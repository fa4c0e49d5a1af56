// Command work_generator keeps an app's backlog of unsent instances near a
// target by creating demo jobs and staging their input files.
package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/workgenerator"
)

const program = "work_generator"

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	own := []cli.Flag{
		&cli.StringFlag{Name: "app", Value: demoapp.AppName, Usage: "app to create jobs for", EnvVars: []string{config.EnvName("app")}},
		&cli.IntFlag{Name: "unsent-target", Value: 200, Usage: "unsent instances to keep in the backlog (jobs awaiting instances count as target-nresults each)", EnvVars: []string{config.EnvName("unsent-target")}},
		&cli.Int64Flag{Name: "total-jobs", Value: 0, Usage: "stop after this many jobs in total, over restarts (0: no limit)", EnvVars: []string{config.EnvName("total-jobs")}},
		&cli.StringFlag{Name: "job-prefix", Usage: "job names are <job-prefix>_<unix time>_<random hex> (default: the app name)", EnvVars: []string{config.EnvName("job-prefix")}},
	}
	flags := append(append(config.CommonFlags("127.0.0.1:9108"), config.LoopFlags()...), own...)
	flags = append(flags, jobs.Flags()...)
	app := &cli.App{
		Name:   program,
		Usage:  "create jobs while the app's unsent backlog is below target",
		Flags:  flags,
		Before: config.LoadFile,
		Action: func(c *cli.Context) error {
			cfg, err := config.CommonFrom(c)
			loop, lerr := config.LoopFrom(c)
			params, perr := jobs.ParamsFrom(c)
			if err := errors.Join(err, lerr, perr); err != nil {
				return err
			}
			if loop.Mod != 1 {
				return fmt.Errorf("--mod %d: the work generator does not shard; run one per app", loop.Mod)
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
			appName := c.String("app")
			svc, err := workgenerator.New(st, jobs.NewCreator(st, cfg.DownloadDir, cfg.Fanout, time.Now),
				workgenerator.Config{
					App:          appName,
					JobPrefix:    c.String("job-prefix"),
					UnsentTarget: c.Int("unsent-target"),
					TotalJobs:    c.Int64("total-jobs"),
					Batch:        loop.Batch,
					CounterFile:  workgenerator.CounterPath(cfg.ProjectDir, appName),
					Params:       params,
				}, log, workgenerator.NewMetrics(reg), time.Now)
			if err != nil {
				return err
			}
			return daemon.RunLoop(ctx, log, reg, cfg.Listen, daemon.NewLoopMetrics(reg, program), svc,
				daemon.LoopOptions{Sleep: loop.Sleep, OnePass: loop.OnePass})
		},
	}
	return app.RunContext(ctx, args)
}
