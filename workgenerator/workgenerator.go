// Package workgenerator is the plug-in API of a project's own work
// generator: the project writes an InputMaker (the input file of a new job)
// or a JobMaker (a whole job: several inputs, shared files among them, a
// command line, templates) and gets the whole work generator daemon around
// it from Main: it keeps --unsent-target instances of the app unsent,
// creating jobs named <job-prefix>_<unix time>_<random hex> in batches,
// stages each job's input files in the download directory (and the
// JobMaker's shared files, once), stops after --total-jobs over restarts,
// and takes every job parameter flag (--min-quorum, --delay-bound, ...) of
// the stock work_generator. A job of an InputMaker has one input file and
// the app's templates (by default the app opens it as "in").
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
	"github.com/taskserver/taskserver/internal/jobs"
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

// JobMaker makes whole jobs, as BOINC's create_work describes them.
type JobMaker interface {
	// SharedFiles returns the files to stage as shared inputs (a model, a
	// database): each is stored once, content-addressed, and jobs refer
	// to it by its Name (Input.Shared). The daemon stages them before its
	// first pass and again after a failed one; staging content already
	// staged only marks it used. An error stops the pass.
	SharedFiles(ctx context.Context) ([]SharedFile, error)
	// Job returns the new job name: one Input for each file of its input
	// template that the template does not name itself, in order. An error
	// fails the daemon's pass as InputMaker.Input's does. Job is called
	// from one goroutine at a time.
	Job(ctx context.Context, name string) (Job, error)
}

// Job is a new job's description (the arguments of create_work).
type Job struct {
	Inputs []Input
	// CommandLine, if not empty, replaces the input template's.
	CommandLine string
	// InputTemplate and OutputTemplate are the job's templates in BOINC's
	// format; empty means the app's (taskctl app templates), or the
	// built-in ones: one input opened as "in", one output as "out".
	InputTemplate, OutputTemplate string
}

// Input is one file given to a job: exactly one of its content, a shared
// file, or a file on another server.
type Input struct {
	// Data is the file's content, staged for this job (gzip'd too if its
	// template's file_info has <gzip/>).
	Data []byte
	// Shared names a shared file: a SharedFile's Name (the latest staged
	// under it) or a physical name.
	Shared string
	// URL, MD5 (hex) and Nbytes describe a file kept on another server.
	URL    string
	MD5    string
	Nbytes float64
}

// SharedFile is a file staged once for many jobs.
type SharedFile struct {
	// Name is what jobs refer to it by; it is stored as Name_<md5>.
	Name string
	Data []byte
	// Gzip stores a gzip'd copy too, for templates that ask for <gzip/>.
	Gzip bool
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
	// error stops the program. Set it or NewJobMaker, not both.
	NewInputMaker func(env job.Env) (InputMaker, error)
	// NewJobMaker returns the program's JobMaker, as NewInputMaker does.
	NewJobMaker func(env job.Env) (JobMaker, error)
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
			if (p.NewInputMaker == nil) == (p.NewJobMaker == nil) {
				return errors.New("workgenerator: the program needs exactly one of NewInputMaker and NewJobMaker")
			}
			return nil
		},
		Jobs: func(c *cli.Context, env daemon.Env) (iworkgenerator.JobMaker, error) {
			penv := plugin.Env(c, env, c.String(iworkgenerator.FlagApp), p.Flags)
			if p.NewJobMaker != nil {
				m, err := p.NewJobMaker(penv)
				if err != nil || m == nil {
					return nil, err
				}
				return jobMaker{m}, nil
			}
			m, err := p.NewInputMaker(penv)
			if err != nil || m == nil {
				return nil, err
			}
			return iworkgenerator.InputJobs(m.Input), nil
		},
	}
}

// jobMaker is a JobMaker as the daemon takes it.
type jobMaker struct{ m JobMaker }

func (j jobMaker) SharedFiles(ctx context.Context) ([]iworkgenerator.SharedFile, error) {
	fs, err := j.m.SharedFiles(ctx)
	out := make([]iworkgenerator.SharedFile, len(fs))
	for i, f := range fs {
		out[i] = iworkgenerator.SharedFile(f)
	}
	return out, err
}

func (j jobMaker) Job(ctx context.Context, name string) (jobs.Job, error) {
	d, err := j.m.Job(ctx, name)
	if err != nil {
		return jobs.Job{}, err
	}
	in := make([]jobs.Input, len(d.Inputs))
	for i, f := range d.Inputs {
		in[i] = jobs.Input(f)
	}
	return jobs.Job{Inputs: in, CommandLine: d.CommandLine, InputTemplate: d.InputTemplate, OutputTemplate: d.OutputTemplate}, nil
}
