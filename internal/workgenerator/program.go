package workgenerator

import (
	"context"
	"errors"
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
	// Jobs builds, once the configuration is valid and the store open,
	// what makes the new jobs (see Deps.Jobs). nil means the demo
	// project's jobs, and --app defaults to the demo app; otherwise --app
	// is required.
	Jobs func(c *cli.Context, env daemon.Env) (JobMaker, error)
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
	if p.Jobs == nil {
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
	return daemon.RunLoopProgram(ctx, args, daemon.LoopProgram[programConfig]{
		Name:   "work_generator",
		Usage:  usage,
		Listen: "127.0.0.1:9108",
		Flags:  flags,
		Config: func(c *cli.Context, common config.Common, loop config.Loop) programConfig {
			appName := c.String(FlagApp)
			cfg := programConfig{Config: Config{
				App:          appName,
				JobPrefix:    c.String(FlagJobPrefix),
				UnsentTarget: c.Int(FlagUnsentTarget),
				TotalJobs:    c.Int64(FlagTotalJobs),
				Mod:          loop.Mod,
				ModIndex:     loop.ModIndex,
				Batch:        loop.Batch,
				CounterFile:  CounterPath(common.ProjectDir, appName),
				Params:       jobs.ReadParams(c),
			}}
			if p.Check != nil {
				cfg.ownErr = p.Check(c)
			}
			return cfg
		},
		Build: func(c *cli.Context, cfg programConfig, env daemon.Env) (daemon.Service, func() error, error) {
			var maker JobMaker
			if p.Jobs != nil {
				var err error
				if maker, err = p.Jobs(c, env); err != nil {
					return nil, nil, err
				}
				if maker == nil {
					return nil, nil, errors.New("work generator: the program made no job maker")
				}
			}
			svc, err := New(cfg.Config, Deps{Store: env.Store, Creator: jobs.NewCreator(env.Store, env.Common.DownloadDir, env.Common.Fanout, time.Now),
				Jobs: maker, Log: env.Log, Metrics: NewMetrics(env.Registry)})
			if err != nil {
				return nil, nil, err
			}
			return svc, nil, nil
		},
	})
}

// programConfig is what a work generator program reads from its flags: the
// service's Config and the problems with the program's own flags.
type programConfig struct {
	Config
	ownErr error
}

// Validate returns every problem with the program's flags.
func (c programConfig) Validate() error { return errors.Join(c.Config.Validate(), c.ownErr) }
