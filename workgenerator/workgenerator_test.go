package workgenerator_test

import (
	"context"
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/job"
	"github.com/taskserver/taskserver/jobtest"
	"github.com/taskserver/taskserver/workgenerator"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const inputTemplate = `<input_template>
<file_info><number>0</number><gzip/></file_info>
<file_info><number>1</number><sticky/></file_info>
<workunit>
  <file_ref><open_name>in</open_name></file_ref>
  <file_ref><open_name>table</open_name></file_ref>
</workunit>
</input_template>`

// tables makes jobs of two inputs: the job's own and a shared table.
type tables struct{}

func (tables) SharedFiles(context.Context) ([]workgenerator.SharedFile, error) {
	return []workgenerator.SharedFile{{Name: "table", Data: []byte("the shared table")}}, nil
}

func (tables) Job(_ context.Context, name string) (workgenerator.Job, error) {
	return workgenerator.Job{Inputs: []workgenerator.Input{{Data: []byte("input of " + name)}, {Shared: "table"}},
		CommandLine: "--job " + name, InputTemplate: inputTemplate}, nil
}

// TestJobMaker runs one pass of a work generator of whole jobs: the shared
// file is staged and every job refers to it, each job's own input is
// staged (gzip'd too), and its command line is the maker's.
func TestJobMaker(t *testing.T) {
	p := jobtest.New(t, "demo")
	prog := workgenerator.Program{NewJobMaker: func(job.Env) (workgenerator.JobMaker, error) { return tables{}, nil }}
	if err := workgenerator.Run(context.Background(), p.Args("workgenerator", "--unsent-target", "4", "--target-nresults", "2", "--min-quorum", "2"), prog); err != nil {
		t.Fatalf("workgenerator.Run: %v", err)
	}
	names := p.Jobs()
	if len(names) != 2 {
		t.Fatalf("jobs %q, want 2", names)
	}
	for _, name := range names {
		in := p.Inputs(name)
		if string(in.Files["in"]) != "input of "+name || string(in.Files["table"]) != "the shared table" ||
			in.CommandLine != "--job "+name || !slices.Equal(in.Sticky, []string{"table"}) || !slices.Equal(in.Gzipped, []string{"in"}) {
			t.Errorf("job %s: %+v; want its input (gzip'd), the shared table (sticky), its command line", name, in)
		}
	}
}

// TestOneMakerExactly: a program with both makers, or none, does not start.
func TestOneMakerExactly(t *testing.T) {
	p := jobtest.New(t, "demo")
	both := workgenerator.Program{
		NewJobMaker:   func(job.Env) (workgenerator.JobMaker, error) { return tables{}, nil },
		NewInputMaker: func(job.Env) (workgenerator.InputMaker, error) { return nil, nil },
	}
	for name, prog := range map[string]workgenerator.Program{"both": both, "none": {}} {
		if err := workgenerator.Run(context.Background(), p.Args("workgenerator"), prog); err == nil {
			t.Errorf("a program with %s makers ran", name)
		}
	}
}
