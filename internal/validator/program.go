package validator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
)

// Flags of the validator program, besides the common and loop flags.
const (
	FlagApp            = "app"
	FlagChecker        = "checker"
	FlagTolerance      = "tolerance"
	FlagAbsTolerance   = "abs-tolerance"
	FlagInitCmd        = "init-cmd"
	FlagCompareCmd     = "compare-cmd"
	FlagCommandTimeout = "command-timeout"
	FlagWorkers        = "workers"
	// FlagDailyResultQuota has the scheduler's flag's name (and variable):
	// give both the same value.
	FlagDailyResultQuota = "daily-result-quota"
)

// Names of the built-in checkers (--checker).
const (
	CheckerBitwise = "bitwise"
	CheckerNumeric = "numeric"
	CheckerTrust   = "trust"
	CheckerCommand = "command"
)

// Program is a validator program: the stock one (cmd/validator, with the
// built-in checkers), or a project's own, which brings its Checker through
// the public package validator at the module root.
type Program struct {
	// Usage is the one-line description; empty means the stock one.
	Usage string
	// Flags are the program's own flags, after the daemon's and --app.
	Flags []cli.Flag
	// Check validates Flags before the database is opened; it may be nil.
	Check func(c *cli.Context) error
	// Checker builds the program's checker once the configuration is valid
	// and the store open. nil means the built-in checker chosen by
	// --checker (with --tolerance, --abs-tolerance, --init-cmd,
	// --compare-cmd, --command-timeout), flags that exist only then.
	Checker func(c *cli.Context, env daemon.Env) (Checker, error)
}

// Main runs p as the process's program: flags from os.Args, the loop until
// SIGINT or SIGTERM (a second one exits at once), exit status 1 with one
// line on error. Call it from main and nothing else.
func Main(p Program) {
	daemon.Main(func(ctx context.Context, args []string) error { return Run(ctx, args, p) })
}

// Run parses args (args[0] is the program name) and runs the validator
// daemon p describes until ctx ends, or for one pass with --one-pass.
func Run(ctx context.Context, args []string, p Program) error {
	usage := p.Usage
	if usage == "" {
		usage = "compare instance outputs, choose canonical results, grant credit"
	}
	flags := []cli.Flag{
		&cli.StringFlag{Name: FlagApp, Usage: "app whose jobs to validate (required)",
			EnvVars: []string{config.EnvName(FlagApp)}},
		&cli.IntFlag{Name: FlagWorkers, Value: DefaultWorkers, EnvVars: []string{config.EnvName(FlagWorkers)},
			Usage: "jobs judged at once (their output files read, their checker programs run, side by side)"},
		&cli.IntFlag{Name: FlagDailyResultQuota, Value: DefaultDailyResultQuota,
			EnvVars: []string{config.EnvName(FlagDailyResultQuota)},
			Usage:   "the scheduler's --daily-result-quota (jobs of a version per host and CPU or GPU a day; 0: none): valid results double a host's shrunk quota back up to it"},
	}
	if p.Checker == nil {
		flags = append(flags, checkerFlags()...)
	}
	flags = append(flags, p.Flags...)
	return daemon.RunLoopProgram(ctx, args, daemon.LoopProgram[programConfig]{
		Name:   "validator",
		Usage:  usage,
		Listen: "127.0.0.1:9104",
		Flags:  flags,
		Config: func(c *cli.Context, common config.Common, loop config.Loop) programConfig {
			cfg := programConfig{Config: Config{
				App: c.String(FlagApp), UploadDir: common.UploadDir, Fanout: common.Fanout,
				Mod: loop.Mod, ModIndex: loop.ModIndex, Batch: loop.Batch, Workers: c.Int(FlagWorkers),
				DailyResultQuota: c.Int(FlagDailyResultQuota),
			}}
			if p.Checker == nil {
				cfg.builtin, cfg.checkerErr = builtinChecker(c)
			}
			if p.Check != nil {
				cfg.ownErr = p.Check(c)
			}
			return cfg
		},
		Build: func(c *cli.Context, cfg programConfig, env daemon.Env) (daemon.Service, func() error, error) {
			ch := cfg.builtin
			if p.Checker != nil {
				var err error
				if ch, err = p.Checker(c, env); err != nil {
					return nil, nil, err
				}
				if ch == nil {
					return nil, nil, errors.New("validator: the program's Checker returned no checker")
				}
			}
			RegisterBacklog(env.Registry, env.Store, cfg.App)
			svc, err := New(cfg.Config, Deps{Store: env.Store, Checker: ch, Log: env.Log, Metrics: NewMetrics(env.Registry)})
			if err != nil {
				return nil, nil, err
			}
			return svc, nil, nil
		},
	})
}

// programConfig is what a validator program reads from its flags: the
// service's Config, the built-in checker the flags select (a program with
// its own checker builds it in Build, once the store is open), and the
// problems with the checker's flags and the program's own.
type programConfig struct {
	Config
	builtin    Checker
	checkerErr error
	ownErr     error
}

// Validate returns every problem with the program's flags.
func (c programConfig) Validate() error {
	return errors.Join(c.Config.Validate(), c.checkerErr, c.ownErr)
}

// errAppMissing is the error of a command line without --app: every project
// names its own apps, so no default could be right.
var errAppMissing = fmt.Errorf("--%s is missing: name the app whose jobs to validate (or set %s, or app: in --config)",
	FlagApp, config.EnvName(FlagApp))

func checkerFlags() []cli.Flag {
	env := func(name string) []string { return []string{config.EnvName(name)} }
	return []cli.Flag{
		&cli.StringFlag{Name: FlagChecker, Value: CheckerBitwise, EnvVars: env(FlagChecker),
			Usage: "how outputs are compared: bitwise (equal files), numeric (numbers within a tolerance), " +
				"trust (every output there is valid), command (programs of the project's own)"},
		&cli.Float64Flag{Name: FlagTolerance, Value: 1e-6, EnvVars: env(FlagTolerance),
			Usage: "numeric checker: relative tolerance (|x-y| <= tolerance × max(|x|,|y|))"},
		&cli.Float64Flag{Name: FlagAbsTolerance, Value: 0, EnvVars: env(FlagAbsTolerance),
			Usage: "numeric checker: absolute tolerance (|x-y| <= abs-tolerance)"},
		&cli.StringFlag{Name: FlagInitCmd, EnvVars: env(FlagInitCmd),
			Usage: "command checker: optional program (and arguments, split at white space) run on each output's " +
				"files: exit 0 accepts, 1 rejects, other = retry later"},
		&cli.StringFlag{Name: FlagCompareCmd, EnvVars: env(FlagCompareCmd),
			Usage: "command checker: program (and arguments, split at white space) run on two outputs' files: " +
				"exit 0 agree, 1 disagree, other = retry later"},
		&cli.DurationFlag{Name: FlagCommandTimeout, Value: DefaultCommandTimeout, EnvVars: env(FlagCommandTimeout),
			Usage: "command checker: how long one run may take before it is killed (and the job retried)"},
	}
}

// builtinChecker returns the checker the flags select.
func builtinChecker(c *cli.Context) (Checker, error) {
	name := c.String(FlagChecker)
	switch name {
	case CheckerBitwise:
		return Bitwise{}, nil
	case CheckerTrust:
		return Trust{}, nil
	case CheckerNumeric:
		n := Numeric{RelTolerance: c.Float64(FlagTolerance), AbsTolerance: c.Float64(FlagAbsTolerance)}
		if err := n.Check(); err != nil {
			return nil, fmt.Errorf("--%s, --%s: %w", FlagTolerance, FlagAbsTolerance, err)
		}
		return n, nil
	case CheckerCommand:
		cmd := Command{InitArgv: strings.Fields(c.String(FlagInitCmd)), CompareArgv: strings.Fields(c.String(FlagCompareCmd)),
			Timeout: c.Duration(FlagCommandTimeout)}
		if err := cmd.Check(); err != nil {
			return nil, fmt.Errorf("--%s: %w", FlagCompareCmd, err)
		}
		return cmd, nil
	}
	return nil, fmt.Errorf("--%s %q: want %s, %s, %s or %s", FlagChecker, name, CheckerBitwise, CheckerNumeric,
		CheckerTrust, CheckerCommand)
}
