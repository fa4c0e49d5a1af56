package workgenerator

import (
	"context"

	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/jobs"
)

// JobMaker makes the work generator's jobs.
type JobMaker interface {
	// SharedFiles are the files to stage as shared inputs (see
	// jobs.Creator.StageShared) before jobs refer to them by name. They
	// are staged when the generator loads: at its first pass and after a
	// failed one.
	SharedFiles(ctx context.Context) ([]SharedFile, error)
	// Job returns the new job name: its inputs, command line and
	// templates (its Name is set by the caller). An error fails the pass
	// before anything is written: no job of the batch is created, and the
	// next pass tries again with new names. Job is called from one
	// goroutine at a time.
	Job(ctx context.Context, name string) (jobs.Job, error)
}

// SharedFile is a file staged once and given to many jobs.
type SharedFile struct {
	// Name is the name jobs refer to it by (jobs.Input.Shared); its
	// physical name is jobs.SharedName(Name, md5).
	Name string
	Data []byte
	// Gzip stages a gzip'd copy too.
	Gzip bool
}

// DemoJobs makes the demo project's jobs (see package demoapp): its own
// input, the shared model, the shared params file (stored gzip'd too), the command
// line --rounds demoapp.Rounds, and two outputs, all from the demo templates
// the jobs carry, so they are the same whatever templates the app has.
type DemoJobs struct{}

// SharedFiles are the demo model and params.
func (DemoJobs) SharedFiles(context.Context) ([]SharedFile, error) {
	return []SharedFile{{Name: demoapp.ModelFile, Data: demoapp.Model()}, {Name: demoapp.ParamsFile, Data: demoapp.Params(), Gzip: true}}, nil
}

// Job is demo job name.
func (DemoJobs) Job(_ context.Context, name string) (jobs.Job, error) {
	return jobs.Job{
		Inputs:         []jobs.Input{{Data: demoapp.Input(name)}, {Shared: demoapp.ModelFile}, {Shared: demoapp.ParamsFile}},
		CommandLine:    demoapp.CommandLine(demoapp.Rounds),
		InputTemplate:  demoapp.InputTemplate,
		OutputTemplate: demoapp.OutputTemplate,
	}, nil
}

// InputJobs makes jobs of one input file each, made by input from the
// job's name, with the app's templates: what a project's InputMaker gives.
type InputJobs func(ctx context.Context, job string) ([]byte, error)

// SharedFiles is none.
func (InputJobs) SharedFiles(context.Context) ([]SharedFile, error) { return nil, nil }

// Job is one input from f.
func (f InputJobs) Job(ctx context.Context, name string) (jobs.Job, error) {
	in, err := f(ctx, name)
	if err != nil {
		return jobs.Job{}, err
	}
	return jobs.Job{Inputs: []jobs.Input{{Data: in}}}, nil
}
