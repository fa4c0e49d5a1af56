package assimilator_test

import (
	"context"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/assimilator"
	"github.com/taskserver/taskserver/job"
	"github.com/taskserver/taskserver/jobtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// handlerFunc is a Handler.
type handlerFunc func(ctx context.Context, j job.Job, canonical *job.Instance) error

func (f handlerFunc) Handle(ctx context.Context, j job.Job, canonical *job.Instance) error {
	return f(ctx, j, canonical)
}

// TestHandlerSeesEveryOutputByLogicalName: a project's handler gets every
// output of the canonical instance, each found by its logical name.
func TestHandlerSeesEveryOutputByLogicalName(t *testing.T) {
	t.Parallel()
	p := jobtest.New(t, "science")
	p.AddJobToAssimilateFiles("job", 0, jobtest.Files{"result": "42", "log": "ran"})
	got := map[string]string{}
	h := handlerFunc(func(_ context.Context, j job.Job, in *job.Instance) error {
		for _, name := range []string{"result", "log"} {
			o, ok := in.Output(name)
			if !ok {
				t.Errorf("job %s: no output %q among %+v", j.Name, name, in.Outputs)
				continue
			}
			b, err := os.ReadFile(o.Path)
			if err != nil {
				return err
			}
			got[name] = string(b)
		}
		return nil
	})
	err := assimilator.Run(context.Background(), p.Args("assimilator"), assimilator.Program{
		NewHandler: func(job.Env) (assimilator.Handler, error) { return h, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if got["result"] != "42" || got["log"] != "ran" || !p.Assimilated("job") {
		t.Errorf("handler read %v, assimilated %v; want result 42, log ran, true", got, p.Assimilated("job"))
	}
}
