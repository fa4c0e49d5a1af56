// Package assimilator is the plug-in API of a project's own assimilator: the
// project writes a Handler (what to do with a finished job: store its
// output in the project's science database, append it to a file, ...) and
// gets the whole assimilator daemon around it from Main: paging through
// finished jobs, marking each assimilated once its handler succeeded,
// retries with back-off, metrics, and the stock assimilator's flags
// (without --handler and its options).
//
//	func main() {
//		assimilator.Main(assimilator.Program{
//			NewHandler: func(env job.Env) (assimilator.Handler, error) { return myHandler{}, nil },
//		})
//	}
package assimilator

import (
	"context"
	"errors"

	"github.com/urfave/cli/v2"

	iassimilator "github.com/taskserver/taskserver/internal/assimilator"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/plugin"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/job"
)

// Handler hands one finished job to the project.
type Handler interface {
	// Handle gets a job that succeeded with its canonical instance, whose
	// outputs are the job's result: every output file, each under its
	// logical name (canonical.Output finds one), an optional output the
	// instance does not have left out. Or it gets a job that failed for good with
	// canonical nil (j.Errors says why). Once it returns nil the job is
	// marked assimilated; an error leaves the job to be handled again after
	// a back-off (10 s doubling to 1 h), while other jobs go on; an error
	// wrapping context.DeadlineExceeded counts as a timeout in the metrics.
	//
	// Handle must be idempotent: after a crash between Handle and the mark
	// the job is handled again. It is called from one goroutine at a time,
	// and never for a known-answer job (those only test hosts).
	Handle(ctx context.Context, j job.Job, canonical *job.Instance) error
}

// Program is a project's assimilator program.
type Program struct {
	// Usage is the program's one-line description in --help; empty means
	// the stock assimilator's.
	Usage string
	// Flags are the program's own flags, beside the stock assimilator's.
	Flags []job.Flag
	// NewHandler returns the program's Handler. The daemon calls it once,
	// when its configuration is valid and its database open; an error
	// stops the program.
	NewHandler func(env job.Env) (Handler, error)
}

// Main runs p as the process's program: its flags from the command line,
// the environment and --config, then the assimilator daemon until SIGINT or
// SIGTERM (a second one exits at once), or for one pass with --one-pass.
// On error it prints one line and exits with status 1. Call it from main.
func Main(p Program) { iassimilator.Main(adapt(p)) }

// Run runs the daemon as Main does, with args as the command line (args[0]
// is the program's name), until ctx ends; it returns what Main would exit
// with. Tests run one pass with it (--one-pass).
func Run(ctx context.Context, args []string, p Program) error {
	return iassimilator.Run(ctx, args, adapt(p))
}

// adapt returns the daemon's program of p.
func adapt(p Program) iassimilator.Program {
	return iassimilator.Program{
		Usage: p.Usage,
		Flags: plugin.Flags(p.Flags),
		Check: func(*cli.Context) error {
			if p.NewHandler == nil {
				return errors.New("assimilator: the program has no NewHandler")
			}
			return nil
		},
		Handler: func(c *cli.Context, env daemon.Env) (iassimilator.Handler, error) {
			app := c.String(iassimilator.FlagApp)
			h, err := p.NewHandler(plugin.Env(c, env, app, p.Flags))
			if err != nil || h == nil {
				return nil, err
			}
			return handler{h: h, app: app, uploadDir: env.Common.UploadDir, fanout: env.Common.Fanout}, nil
		},
	}
}

// handler adapts a Handler to the daemon's.
type handler struct {
	h         Handler
	app       string
	uploadDir string
	fanout    int
}

// Handle hands the job over as a job.Job, and its canonical instance, if
// any, with its output files located.
func (a handler) Handle(ctx context.Context, wu row.Workunit, canonical *row.Result) error {
	var in *job.Instance
	if canonical != nil {
		c, err := plugin.Canonical(*canonical, a.uploadDir, a.fanout)
		if err != nil {
			return err
		}
		in = &c
	}
	return a.h.Handle(ctx, plugin.Job(wu, a.app), in)
}
