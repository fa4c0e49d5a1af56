// Package validator is the plug-in API of a project's own validator: the
// project writes a Checker (how one instance's output is read, when two
// outputs agree) and gets the whole validator daemon around it from Main:
// quorums, canonical instances, known-answer jobs, credit, retries,
// metrics, and the stock validator's flags (without --checker and its
// options).
//
//	func main() {
//		validator.Main(validator.Program{
//			NewChecker: func(env job.Env) (validator.Checker, error) { return myChecker{}, nil },
//		})
//	}
package validator

import (
	"context"
	"errors"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/plugin"
	"github.com/taskserver/taskserver/internal/row"
	ivalidator "github.com/taskserver/taskserver/internal/validator"
	"github.com/taskserver/taskserver/job"
)

// ErrInvalidOutput marks an output a Checker rejects: the instance's output
// is bad, so the instance gets a validate error (outcome VALIDATE_ERROR,
// validate_state INVALID) and no credit. Wrap it: fmt.Errorf("...: %w",
// ErrInvalidOutput). Any other error from a Checker is taken as transient:
// the job is left alone and retried on a later pass, with back-off.
var ErrInvalidOutput = errors.New("invalid output")

// Checker is the science-specific part of a validator. The daemon calls
// Init once for each output it needs in a pass, Compare on pairs of
// initialised outputs, and Cleanup on every value Init returned, whatever
// happened in between. Calls for one job come from one goroutine, but
// several jobs are judged at once (--workers): a Checker must be safe for
// concurrent use across jobs.
type Checker interface {
	// Init reads one instance's output files (inst.Outputs, each by its
	// logical name; inst.Output finds one) and returns their parsed form.
	// Outputs holds the files to compare, in the job's order: not those
	// the output template marks no_validate, nor an optional output the
	// instance does not have. Two instances that do not have the same
	// outputs disagree without Compare. A known-answer job's expected
	// output comes through Init too, as an instance of ID 0 with one output
	// without a name. An
	// error wrapping ErrInvalidOutput means the output is bad; any other
	// error is transient.
	Init(ctx context.Context, inst job.Instance) (any, error)
	// Compare says whether two initialised outputs agree. It should be
	// symmetric; an error is transient.
	Compare(ctx context.Context, a, b any) (bool, error)
	// Cleanup releases what Init returned.
	Cleanup(output any)
}

// Program is a project's validator program.
type Program struct {
	// Usage is the program's one-line description in --help; empty means
	// the stock validator's.
	Usage string
	// Flags are the program's own flags, beside the stock validator's.
	Flags []job.Flag
	// NewChecker returns the program's Checker. The daemon calls it once,
	// when its configuration is valid and its database open; an error
	// stops the program.
	NewChecker func(env job.Env) (Checker, error)
}

// Main runs p as the process's program: its flags from the command line,
// the environment and --config, then the validator daemon until SIGINT or
// SIGTERM (a second one exits at once), or for one pass with --one-pass.
// On error it prints one line and exits with status 1. Call it from main.
func Main(p Program) { ivalidator.Main(adapt(p)) }

// Run runs the daemon as Main does, with args as the command line (args[0]
// is the program's name), until ctx ends; it returns what Main would exit
// with. Tests run one pass with it (--one-pass).
func Run(ctx context.Context, args []string, p Program) error {
	return ivalidator.Run(ctx, args, adapt(p))
}

// adapt returns the daemon's program of p.
func adapt(p Program) ivalidator.Program {
	return ivalidator.Program{
		Usage: p.Usage,
		Flags: plugin.Flags(p.Flags),
		Check: func(*cli.Context) error {
			if p.NewChecker == nil {
				return errors.New("validator: the program has no NewChecker")
			}
			return nil
		},
		Checker: func(c *cli.Context, env daemon.Env) (ivalidator.Checker, error) {
			ch, err := p.NewChecker(plugin.Env(c, env, c.String(ivalidator.FlagApp), p.Flags))
			if err != nil || ch == nil {
				return nil, err
			}
			return checker{ch}, nil
		},
	}
}

// checker adapts a Checker to the daemon's.
type checker struct{ c Checker }

// Init hands the instance over as a job.Instance; a rejection is the
// daemon's ErrInvalidOutput as well as the project's.
func (a checker) Init(ctx context.Context, r row.Result, outputs []job.Output) (any, error) {
	v, err := a.c.Init(ctx, plugin.Instance(r, outputs))
	if errors.Is(err, ErrInvalidOutput) {
		return nil, invalid{err}
	}
	return v, err
}

func (a checker) Compare(ctx context.Context, x, y any) (bool, error) { return a.c.Compare(ctx, x, y) }

func (a checker) Cleanup(v any) { a.c.Cleanup(v) }

// invalid is a Checker's rejection, its message kept, that the daemon
// recognises as its own ErrInvalidOutput.
type invalid struct{ err error }

func (e invalid) Error() string { return e.err.Error() }

func (e invalid) Unwrap() []error { return []error{e.err, ivalidator.ErrInvalidOutput} }
