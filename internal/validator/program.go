package validator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/demoapp"
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

// Main is the whole main function of a validator program: it runs the
// validator daemon with checker until SIGINT or SIGTERM (a second one exits
// at once) and exits 1 with one line on error. With a nil checker the
// built-in named by --checker is used, as cmd/validator does; a project's
// own validator passes its Checker:
//
//	func main() { validator.Main(myChecker{}) }
func Main(checker Checker) {
	daemon.Main(func(ctx context.Context, args []string) error { return Run(ctx, args, checker) })
}

// Run parses args (args[0] is the program name) and runs the validator
// daemon until ctx ends, or for one pass with --one-pass. With a nil
// checker, --checker and its options select a built-in one; otherwise those
// flags do not exist and checker judges the outputs.
func Run(ctx context.Context, args []string, checker Checker) error {
	flags := []cli.Flag{
		&cli.StringFlag{Name: FlagApp, Value: demoapp.AppName, Usage: "app whose jobs to validate",
			EnvVars: []string{config.EnvName(FlagApp)}},
		&cli.IntFlag{Name: FlagWorkers, Value: DefaultWorkers, EnvVars: []string{config.EnvName(FlagWorkers)},
			Usage: "jobs judged at once (their output files read, their checker programs run, side by side)"},
	}
	if checker == nil {
		flags = append(flags, checkerFlags()...)
	}
	return daemon.RunLoopProgram(ctx, args, daemon.LoopProgram{
		Name:   "validator",
		Usage:  "compare instance outputs, choose canonical results, grant credit",
		Listen: "127.0.0.1:9104",
		Flags:  flags,
		Check: func(c *cli.Context, _ config.Common, _ config.Loop) error {
			var errs []error
			if c.String(FlagApp) == "" {
				errs = append(errs, errors.New("--app is empty"))
			}
			if c.Int(FlagWorkers) < 1 {
				errs = append(errs, fmt.Errorf("--%s %d: want at least 1", FlagWorkers, c.Int(FlagWorkers)))
			}
			if checker == nil {
				_, err := builtinChecker(c)
				errs = append(errs, err)
			}
			return errors.Join(errs...)
		},
		Build: func(c *cli.Context, env daemon.Env) (daemon.Service, func() error, error) {
			ch := checker
			if ch == nil {
				var err error
				if ch, err = builtinChecker(c); err != nil {
					return nil, nil, err
				}
			}
			RegisterBacklog(env.Registry, env.Store, c.String(FlagApp))
			return New(env.Store, env.Log, NewMetrics(env.Registry), Options{
				App: c.String(FlagApp), Checker: ch, UploadDir: env.Common.UploadDir, Fanout: env.Common.Fanout,
				Mod: env.Loop.Mod, ModIndex: env.Loop.ModIndex, Batch: env.Loop.Batch,
				Workers: c.Int(FlagWorkers)}), nil, nil
		},
	})
}

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
