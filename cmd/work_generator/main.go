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
	"github.com/taskserver/taskserver/internal/workgenerator"
)

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	own := []cli.Flag{
		&cli.StringFlag{Name: "app", Value: demoapp.AppName, Usage: "app to create jobs for", EnvVars: []string{config.EnvName("app")}},
		&cli.IntFlag{Name: "unsent-target", Value: 200, Usage: "unsent instances to keep in the backlog (jobs awaiting instances count as target-nresults each)", EnvVars: []string{config.EnvName("unsent-target")}},
		&cli.Int64Flag{Name: "total-jobs", Value: 0, Usage: "stop after this many jobs in total, over restarts (0: no limit)", EnvVars: []string{config.EnvName("total-jobs")}},
		&cli.StringFlag{Name: "job-prefix", Usage: "job names are <job-prefix>_<unix time>_<random hex> (default: the app name)", EnvVars: []string{config.EnvName("job-prefix")}},
	}
	var params jobs.Params // set by Check, which runs before Build
	return daemon.RunLoopProgram(ctx, args, daemon.LoopProgram{
		Name:   "work_generator",
		Usage:  "create jobs while the app's unsent backlog is below target",
		Listen: "127.0.0.1:9108",
		Flags:  append(own, jobs.Flags()...),
		Check: func(c *cli.Context, _ config.Common, loop config.Loop) error {
			var err error
			params, err = jobs.ParamsFrom(c)
			// Mod > 1, not != 1: an invalid --mod is already reported by the loop flags.
			if loop.Mod > 1 {
				err = errors.Join(err, fmt.Errorf("--mod %d: the work generator does not shard; run one per app", loop.Mod))
			}
			return err
		},
		Build: func(c *cli.Context, env daemon.Env) (daemon.Service, func() error, error) {
			appName := c.String("app")
			svc, err := workgenerator.New(env.Store, jobs.NewCreator(env.Store, env.Common.DownloadDir, env.Common.Fanout, time.Now),
				workgenerator.Config{
					App:          appName,
					JobPrefix:    c.String("job-prefix"),
					UnsentTarget: c.Int("unsent-target"),
					TotalJobs:    c.Int64("total-jobs"),
					Batch:        env.Loop.Batch,
					CounterFile:  workgenerator.CounterPath(env.Common.ProjectDir, appName),
					Params:       params,
				}, env.Log, workgenerator.NewMetrics(env.Registry), time.Now)
			if err != nil {
				return nil, nil, err
			}
			return svc, nil, nil
		},
	})
}
