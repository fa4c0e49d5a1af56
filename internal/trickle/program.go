package trickle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
)

// Flags of the trickle handler program.
const (
	FlagVariety             = "variety"
	FlagHandlerCmd          = "handler-cmd"
	FlagHandlerTimeout      = "handler-timeout"
	FlagExtendDeadline      = "extend-deadline"
	FlagCreditPerCPUSecond  = "credit-per-cpu-second"
	FlagCreditMaxCPUSeconds = "credit-max-cpu-seconds"
)

// Program is a trickle handler program: the stock one
// (cmd/trickle_handler, with CommandHandler or the built-in options
// alone), or a project's own, which brings its Go handler through the
// public package trickle at the module root.
type Program struct {
	// Usage is the one-line description; empty means the stock one.
	Usage string
	// Flags are the program's own flags, after the daemon's.
	Flags []cli.Flag
	// Check validates Flags before the database is opened; it may be nil.
	Check func(c *cli.Context) error
	// Handler builds the science code's handler once the configuration is
	// valid and the store open. nil means the stock program's: the
	// --handler-cmd command, or none.
	Handler func(c *cli.Context, env daemon.Env) (Handler, error)
}

// Main runs p as the process's program: flags from os.Args, the loop until
// SIGINT or SIGTERM, exit status 1 with one line on error.
func Main(p Program) {
	daemon.Main(func(ctx context.Context, args []string) error { return Run(ctx, args, p) })
}

// Run parses args and runs the trickle handler p describes until ctx ends
// (or after one pass with --one-pass).
func Run(ctx context.Context, args []string, p Program) error {
	usage := p.Usage
	if usage == "" {
		usage = "handle the trickle-up messages running applications send, each once"
	}
	flags := []cli.Flag{
		&cli.StringFlag{Name: FlagVariety, Usage: "handle only messages of this variety (empty: all); run one handler per variety to treat them differently",
			EnvVars: []string{config.EnvName(FlagVariety)}},
		&cli.DurationFlag{Name: FlagExtendDeadline, EnvVars: []string{config.EnvName(FlagExtendDeadline)},
			Usage: "move the report deadline of the message's task, still in progress on its host, to at least now plus this (0: off), " +
				"so a long task that keeps sending trickles does not time out (BOINC's trickle_deadline)"},
		&cli.Float64Flag{Name: FlagCreditPerCPUSecond, EnvVars: []string{config.EnvName(FlagCreditPerCPUSecond)},
			Usage: "grant the host and its user this much credit per CPU second the message reports in <cpu_time> or <runtime> " +
				"(the time since the task's previous trickle; 0: off; BOINC's trickle_credit; 200 a day for 1 GFLOPS is 0.0023)"},
		&cli.Float64Flag{Name: FlagCreditMaxCPUSeconds, Value: 86400, EnvVars: []string{config.EnvName(FlagCreditMaxCPUSeconds)},
			Usage: "most CPU seconds one message is credited for (BOINC's --max_runtime): match how often the app sends trickles"},
	}
	if p.Handler == nil {
		flags = append(flags,
			&cli.StringFlag{Name: FlagHandlerCmd, EnvVars: []string{config.EnvName(FlagHandlerCmd)},
				Usage: "program and fixed arguments (split at spaces) run per message, the message on its standard input and " +
					EnvMsgID + ", _HOST_ID, _VARIETY, _RESULT_NAME set; what it writes to the file $" + EnvReply +
					" goes back to the application as a trickle-down; exit 0 = handled (empty: only the built-in options)"},
			&cli.DurationFlag{Name: FlagHandlerTimeout, Value: time.Minute, EnvVars: []string{config.EnvName(FlagHandlerTimeout)},
				Usage: "kill a run of --handler-cmd after this long and retry the message later (0: no limit)"},
		)
	}
	flags = append(flags, p.Flags...)
	return daemon.RunLoopProgram(ctx, args, daemon.LoopProgram[programConfig]{
		Name:   "trickle_handler",
		Usage:  usage,
		Listen: "127.0.0.1:9109",
		Flags:  flags,
		Config: func(c *cli.Context, common config.Common, loop config.Loop) programConfig {
			cfg := programConfig{Config: Config{Variety: c.String(FlagVariety), Mod: loop.Mod, ModIndex: loop.ModIndex,
				Batch: loop.Batch, ExtendDeadline: c.Duration(FlagExtendDeadline),
				CreditPerCPUSecond: c.Float64(FlagCreditPerCPUSecond), CreditMaxCPUSeconds: c.Float64(FlagCreditMaxCPUSeconds)}}
			if p.Handler == nil {
				cfg.stock = true
				cfg.command = strings.Fields(c.String(FlagHandlerCmd))
				cfg.timeout = c.Duration(FlagHandlerTimeout)
			}
			if p.Check != nil {
				cfg.ownErr = p.Check(c)
			}
			return cfg
		},
		Build: func(c *cli.Context, cfg programConfig, env daemon.Env) (daemon.Service, func() error, error) {
			var h Handler
			switch {
			case !cfg.stock:
				var err error
				if h, err = p.Handler(c, env); err != nil {
					return nil, nil, err
				}
				if h == nil {
					return nil, nil, errors.New("trickle handler: the program's Handler returned no handler")
				}
			case len(cfg.command) > 0:
				h = CommandHandler{Argv: cfg.command, Timeout: cfg.timeout, Log: env.Log}
			}
			RegisterBacklog(env.Registry, env.Store, cfg.Variety)
			svc, err := New(cfg.Config, Deps{Store: env.Store, Handler: h, Log: env.Log, Metrics: NewMetrics(env.Registry)})
			if err != nil {
				return nil, nil, err
			}
			return svc, nil, nil
		},
	})
}

// programConfig is what a trickle handler program reads from its flags.
type programConfig struct {
	Config
	stock   bool // the stock program: command and timeout are its handler's
	command []string
	timeout time.Duration
	ownErr  error
}

// Validate returns every problem with the program's flags. The stock
// program with neither a command nor a built-in option would mark every
// message handled and do nothing with it: refused.
func (c programConfig) Validate() error {
	errs := []error{c.Config.Validate(), c.ownErr}
	if c.stock {
		if len(c.command) == 0 && c.ExtendDeadline == 0 && c.CreditPerCPUSecond == 0 {
			errs = append(errs, fmt.Errorf("nothing to do with the messages: set --%s, --%s or --%s",
				FlagHandlerCmd, FlagExtendDeadline, FlagCreditPerCPUSecond))
		}
		if c.timeout < 0 {
			errs = append(errs, fmt.Errorf("--%s %s: want 0 (no limit) or more", FlagHandlerTimeout, c.timeout))
		}
	}
	return errors.Join(errs...)
}
