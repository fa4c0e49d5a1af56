package workgenerator

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
)

// Flags of the work generator program, besides the common, loop and job
// flags.
const (
	FlagApp          = "app"
	FlagUnsentTarget = "unsent-target"
	FlagTotalJobs    = "total-jobs"
	FlagJobPrefix    = "job-prefix"
)

// Program is a work generator program: the stock one (cmd/work_generator,
// making demo jobs), or a project's own, which brings the inputs of its jobs
// through the public package workgenerator at the module root.
type Program struct {
	// Usage is the one-line description; empty means the stock one.
	Usage string
	// Flags are the program's own flags, after the daemon's.
	Flags []cli.Flag
	// Check validates Flags before the database is opened; it may be nil.
	Check func(c *cli.Context) error
	// Input builds, once the configuration is valid and the store open,
	// what makes a new job's input file from the job's name (see
	// Config.Input). nil means the demo app's inputs, and --app defaults
	// to the demo app; otherwise --app is required.
	Input func(c *cli.Context, env daemon.Env) (func(ctx context.Context, job string) ([]byte, error), error)
}

// Main runs p as the process's program: flags from os.Args, the loop until
// SIGINT or SIGTERM (a second one exits at once), exit status 1 with one
// line on error. Call it from main and nothing else.
func Main(p Program) {
	daemon.Main(func(ctx context.Context, args []string) error { return Run(ctx, args, p) })
}

// Run parses args (args[0] is the program name) and runs the work
// generator p describes until ctx ends, or for one pass with --one-pass.
func Run(ctx context.Context, args []string, p Program) error {
	usage := p.Usage
	if usage == "" {
		usage = "create jobs while the app's unsent backlog is below target"
	}
	app := &cli.StringFlag{Name: FlagApp, Usage: "app to create jobs for (required)", EnvVars: []string{config.EnvName(FlagApp)}}
	if p.Input == nil {
		// The stock program makes demo jobs, which only the demo app runs.
		app.Value, app.Usage = demoapp.AppName, "app to create jobs for"
	}
	flags := []cli.Flag{
		app,
		&cli.IntFlag{Name: FlagUnsentTarget, Value: 200, Usage: "unsent instances to keep in the backlog (jobs awaiting instances count as target-nresults each)", EnvVars: []string{config.EnvName(FlagUnsentTarget)}},
		&cli.Int64Flag{Name: FlagTotalJobs, Value: 0, Usage: "stop after this many jobs in total, over restarts (0: no limit)", EnvVars: []string{config.EnvName(FlagTotalJobs)}},
		&cli.StringFlag{Name: FlagJobPrefix, Usage: "job names are <job-prefix>_<unix time>_<random hex> (default: the app name)", EnvVars: []string{config.EnvName(FlagJobPrefix)}},
	}
	flags = append(append(flags, jobs.Flags()...), p.Flags...)
	var params jobs.Params // set by Check, which runs before Build
	return daemon.RunLoopProgram(ctx, args, daemon.LoopProgram{
		Name:   "work_generator",
		Usage:  usage,
		Listen: "127.0.0.1:9108",
		Flags:  flags,
		Check: func(c *cli.Context, _ config.Common, loop config.Loop) error {
			var errs []error
			if c.String(FlagApp) == "" {
				errs = append(errs, fmt.Errorf("--%s is missing: name the app to create jobs for (or set %s, or app: in --config)",
					FlagApp, config.EnvName(FlagApp)))
			}
			var err error
			params, err = jobs.ParamsFrom(c)
			errs = append(errs, err)
			// Mod > 1, not != 1: an invalid --mod is already reported by the loop flags.
			if loop.Mod > 1 {
				errs = append(errs, fmt.Errorf("--mod %d: the work generator does not shard; run one per app", loop.Mod))
			}
			if p.Check != nil {
				errs = append(errs, p.Check(c))
			}
			return errors.Join(errs...)
		},
		Build: func(c *cli.Context, env daemon.Env) (daemon.Service, func() error, error) {
			var input func(ctx context.Context, job string) ([]byte, error)
			if p.Input != nil {
				var err error
				if input, err = p.Input(c, env); err != nil {
					return nil, nil, err
				}
				if input == nil {
					return nil, nil, errors.New("work generator: the program's Input returned no input maker")
				}
			}
			appName := c.String(FlagApp)
			svc, err := New(env.Store, jobs.NewCreator(env.Store, env.Common.DownloadDir, env.Common.Fanout, time.Now),
				Config{
					App:          appName,
					JobPrefix:    c.String(FlagJobPrefix),
					UnsentTarget: c.Int(FlagUnsentTarget),
					TotalJobs:    c.Int64(FlagTotalJobs),
					Batch:        env.Loop.Batch,
					CounterFile:  CounterPath(env.Common.ProjectDir, appName),
					Params:       params,
					Input:        input,
				}, env.Log, NewMetrics(env.Registry), time.Now)
			if err != nil {
				return nil, nil, err
			}
			return svc, nil, nil
		},
	})
}
