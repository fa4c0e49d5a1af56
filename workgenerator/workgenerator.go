// Package workgenerator is the plug-in API of a project's own work
// generator: the project writes an InputMaker (the input file of a new job)
// and gets the whole work generator daemon around it from Main: it keeps
// --unsent-target instances of the app unsent, creating jobs named
// <job-prefix>_<unix time>_<random hex> in batches, stages each job's input
// file in the download directory, stops after --total-jobs over restarts,
// and takes every job parameter flag (--min-quorum, --delay-bound, ...) of
// the stock work_generator. Each job has one input file, which the app
// opens under the logical name "in".
//
//	func main() {
//		workgenerator.Main(workgenerator.Program{
//			NewInputMaker: func(env job.Env) (workgenerator.InputMaker, error) { return myInputs{}, nil },
//		})
//	}
package workgenerator

import (
	"context"
	"errors"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/plugin"
	iworkgenerator "github.com/taskserver/taskserver/internal/workgenerator"
	"github.com/taskserver/taskserver/job"
)

// InputMaker makes the input files of new jobs.
type InputMaker interface {
	// Input returns the content of the input file of the new job name. An
	// error fails the daemon's pass before anything is written: no job of
	// its batch is created, and the next pass tries again with new names.
	// Input is called from one goroutine at a time.
	Input(ctx context.Context, name string) ([]byte, error)
}

// Program is a project's work generator program.
type Program struct {
	// Usage is the program's one-line description in --help; empty means
	// the stock work generator's.
	Usage string
	// Flags are the program's own flags, beside the stock work
	// generator's.
	Flags []job.Flag
	// NewInputMaker returns the program's InputMaker. The daemon calls it
	// once, when its configuration is valid and its database open; an
	// error stops the program.
	NewInputMaker func(env job.Env) (InputMaker, error)
}

// Main runs p as the process's program: its flags from the command line,
// the environment and --config (--app is required), then the work
// generator daemon until SIGINT or SIGTERM (a second one exits at once),
// or for one pass with --one-pass. On error it prints one line and exits
// with status 1. Call it from main.
func Main(p Program) { iworkgenerator.Main(adapt(p)) }

// Run runs the daemon as Main does, with args as the command line (args[0]
// is the program's name), until ctx ends; it returns what Main would exit
// with. Tests run one pass with it (--one-pass).
func Run(ctx context.Context, args []string, p Program) error {
	return iworkgenerator.Run(ctx, args, adapt(p))
}

// adapt returns the daemon's program of p.
func adapt(p Program) iworkgenerator.Program {
	return iworkgenerator.Program{
		Usage: p.Usage,
		Flags: plugin.Flags(p.Flags),
		Check: func(*cli.Context) error {
			if p.NewInputMaker == nil {
				return errors.New("workgenerator: the program has no NewInputMaker")
			}
			return nil
		},
		Input: func(c *cli.Context, env daemon.Env) (func(context.Context, string) ([]byte, error), error) {
			m, err := p.NewInputMaker(plugin.Env(c, env, c.String(iworkgenerator.FlagApp), p.Flags))
			if err != nil || m == nil {
				return nil, err
			}
			return m.Input, nil
		},
	}
}
