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
	}
	if p.Checker == nil {
		flags = append(flags, checkerFlags()...)
	}
	flags = append(flags, p.Flags...)
	return daemon.RunLoopProgram(ctx, args, daemon.LoopProgram{
		Name:   "validator",
		Usage:  usage,
		Listen: "127.0.0.1:9104",
		Flags:  flags,
		Check: func(c *cli.Context, _ config.Common, _ config.Loop) error {
			var errs []error
			if c.String(FlagApp) == "" {
				errs = append(errs, errAppMissing)
			}
			if c.Int(FlagWorkers) < 1 {
				errs = append(errs, fmt.Errorf("--%s %d: want at least 1", FlagWorkers, c.Int(FlagWorkers)))
			}
			if p.Checker == nil {
				_, err := builtinChecker(c)
				errs = append(errs, err)
			}
			if p.Check != nil {
				errs = append(errs, p.Check(c))
			}
			return errors.Join(errs...)
		},
		Build: func(c *cli.Context, env daemon.Env) (daemon.Service, func() error, error) {
			var ch Checker
			var err error
			if p.Checker == nil {
				ch, err = builtinChecker(c)
			} else {
				ch, err = p.Checker(c, env)
			}
			if err != nil {
				return nil, nil, err
			}
			if ch == nil {
				return nil, nil, errors.New("validator: the program's Checker returned no checker")
			}
			RegisterBacklog(env.Registry, env.Store, c.String(FlagApp))
			return New(env.Store, env.Log, NewMetrics(env.Registry), Options{
				App: c.String(FlagApp), Checker: ch, UploadDir: env.Common.UploadDir, Fanout: env.Common.Fanout,
				Mod: env.Loop.Mod, ModIndex: env.Loop.ModIndex, Batch: env.Loop.Batch,
				Workers: c.Int(FlagWorkers)}), nil, nil
		},
	})
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
