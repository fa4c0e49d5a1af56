// Package jobtest lets a project test its own daemons (built with the
// packages validator, assimilator and workgenerator) as they run in
// production: one pass of the real daemon over a real database. New makes
// a fresh database with the server's schema on the MariaDB or MySQL server
// of TEST_MYSQL_DSN (default root@tcp(127.0.0.1:3306)/, dropped at the end
// of the test) and a project directory; the Add methods put jobs in the
// state the validator or the assimilator picks up, and the other methods
// read back what the daemon did.
package jobtest

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// OutputName is the logical name of the one output file of the instances
// AddJobToValidate and AddJobToAssimilate make.
const OutputName = "out"

// Files are an instance's output files by logical name (open name):
// name → content. An instance's file list names its files in the order of
// their names.
type Files map[string]string

// fanOut is the --fanout of Args: small, so a test's project directory
// stays small.
const fanOut = 16

// Project is a project on a fresh database, with one app.
type Project struct {
	// DSN is the database's data source name (--db-dsn).
	DSN string
	// Dir is the project directory (--project-dir); the upload directory
	// is Dir/upload, with --fanout 16.
	Dir string
	// App is the name of the project's app.
	App string

	t     testing.TB
	st    *store.Store
	appID int64
}

// New returns a project with app app on a fresh database, both removed
// at the end of t.
func New(t testing.TB, app string) *Project {
	t.Helper()
	dsn := storetest.NewDatabase(t)
	st, err := store.Open(context.Background(), dsn, store.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatalf("jobtest: open the database: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	id := storetest.App(t, st, storetest.AppOptions{Name: app, UserFriendlyName: app}).ID
	return &Project{DSN: dsn, Dir: t.TempDir(), App: app, t: t, st: st, appID: id}
}

// Args returns the command line of one pass of program (its name, for the
// logs) over the project: --db-dsn, --project-dir, --fanout, --app and
// --one-pass, no metrics listener, then extra. Pass it to the daemon's Run.
func (p *Project) Args(program string, extra ...string) []string {
	return append([]string{program, "--db-dsn", p.DSN, "--project-dir", p.Dir, "--fanout", strconv.Itoa(fanOut),
		"--app", p.App, "--one-pass", "--listen", ""}, extra...)
}

// AddJobToValidate adds a job of quorum minQuorum awaiting validation,
// with one reported successful instance per output, named <name>_<i>, whose
// output file OutputName holds outputs[i].
func (p *Project) AddJobToValidate(name string, minQuorum int, outputs ...string) {
	p.t.Helper()
	files := make([]Files, len(outputs))
	for i, out := range outputs {
		files[i] = Files{OutputName: out}
	}
	p.AddJobToValidateFiles(name, minQuorum, files...)
}

// AddJobToValidateFiles is AddJobToValidate with several output files per
// instance: instance <name>_<i> has outputs[i].
func (p *Project) AddJobToValidateFiles(name string, minQuorum int, outputs ...Files) {
	p.t.Helper()
	n := len(outputs)
	id := p.addJob(storetest.JobOptions{Name: name, MinQuorum: minQuorum, TargetNResults: n, MaxErrorResults: n + 1,
		MaxTotalResults: 2*n + 2, MaxSuccessResults: n + 1, NeedValidate: true})
	for i, out := range outputs {
		p.addInstance(id, name+"_"+strconv.Itoa(i), 0, out, state.ValidateInit)
	}
}

// AddJobToAssimilate adds a job of batch batch that succeeded, ready for
// the assimilator: its canonical instance <name>_0 has the output file
// OutputName holding output.
func (p *Project) AddJobToAssimilate(name string, batch int64, output string) {
	p.t.Helper()
	p.AddJobToAssimilateFiles(name, batch, Files{OutputName: output})
}

// AddJobToAssimilateFiles is AddJobToAssimilate with several output files:
// the canonical instance's are output.
func (p *Project) AddJobToAssimilateFiles(name string, batch int64, output Files) {
	p.t.Helper()
	id := p.addJob(storetest.JobOptions{Name: name, Batch: batch, AssimilateState: state.AssimilateReady})
	rid := p.addInstance(id, name+"_0", batch, output, state.ValidateValid)
	if _, err := p.st.DB().Exec(`UPDATE workunit SET canonical_resultid = ? WHERE id = ?`, rid, id); err != nil {
		p.t.Fatalf("jobtest: make %s_0 canonical: %v", name, err)
	}
}

// AddCancelledJob adds a job of batch batch that was cancelled, ready for
// the assimilator: it has no canonical instance, and its Errors are
// ["cancelled"].
func (p *Project) AddCancelledJob(name string, batch int64) {
	p.t.Helper()
	p.addJob(storetest.JobOptions{Name: name, Batch: batch, ErrorMask: state.ErrCancelled, AssimilateState: state.AssimilateReady})
}

// JobID returns the id of job name.
func (p *Project) JobID(name string) int64 { return p.job(name).ID }

// Canonical returns the name of job name's canonical instance; "" if it
// has none.
func (p *Project) Canonical(name string) string {
	p.t.Helper()
	wu := p.job(name)
	if wu.CanonicalResultID == 0 {
		return ""
	}
	r, err := p.st.ResultGet(context.Background(), wu.CanonicalResultID)
	if err != nil {
		p.t.Fatalf("jobtest: canonical instance of %s: %v", name, err)
	}
	return r.Name
}

// Verdict returns the validator's verdict on instance name: "valid",
// "invalid", "inconclusive", "too_late", or "init" before any.
func (p *Project) Verdict(name string) string {
	p.t.Helper()
	ctx := context.Background()
	found, err := p.st.ResultListReported(ctx, []string{name})
	if err != nil || len(found) != 1 {
		p.t.Fatalf("jobtest: instance %s: found %d, %v", name, len(found), err)
	}
	r, err := p.st.ResultGet(ctx, found[0].ID)
	if err != nil {
		p.t.Fatalf("jobtest: instance %s: %v", name, err)
	}
	return r.ValidateState.String()
}

// Assimilated reports whether job name was marked assimilated.
func (p *Project) Assimilated(name string) bool {
	p.t.Helper()
	return p.job(name).AssimilateState == state.AssimilateDone
}

// Jobs returns the names of the app's jobs, oldest first.
func (p *Project) Jobs() []string {
	p.t.Helper()
	var names []string
	if err := p.st.DB().Select(&names, `SELECT name FROM workunit WHERE appid = ? ORDER BY id`, p.appID); err != nil {
		p.t.Fatalf("jobtest: list jobs: %v", err)
	}
	return names
}

// Input returns the input file of job name as it was staged in the
// download directory (Dir/download).
func (p *Project) Input(name string) []byte {
	p.t.Helper()
	path, err := fanout.Path(filepath.Join(p.Dir, "download"), jobs.InputName(name), fanOut)
	if err != nil {
		p.t.Fatalf("jobtest: input of %s: %v", name, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		p.t.Fatalf("jobtest: input of %s: %v", name, err)
	}
	return b
}

// job returns job name's row.
func (p *Project) job(name string) row.Workunit {
	p.t.Helper()
	wu, err := p.st.WorkunitGetByName(context.Background(), name)
	if err != nil {
		p.t.Fatalf("jobtest: job %s: %v", name, err)
	}
	return wu
}

// addJob inserts job o of the app.
func (p *Project) addJob(o storetest.JobOptions) int64 {
	p.t.Helper()
	o.App = p.appID
	return storetest.Job(p.t, p.st, o).ID
}

// addInstance inserts a reported successful instance of job id with
// verdict vs, whose output files are outs, uploaded and finished as the
// data server leaves them.
func (p *Project) addInstance(id int64, name string, batch int64, outs Files, vs state.ValidateState) int64 {
	p.t.Helper()
	files := make([]jobxml.OutputFile, 0, len(outs))
	for i, open := range slices.Sorted(maps.Keys(outs)) {
		f := jobxml.OutputFile{Name: jobxml.OutputName(name, i), OpenName: open, MaxNbytes: 1e6, CopyFile: true}
		files = append(files, f)
		path, err := fanout.Path(filepath.Join(p.Dir, "upload"), f.Name, fanOut)
		if err == nil {
			err = os.MkdirAll(filepath.Dir(path), 0o755)
		}
		if err == nil {
			err = os.WriteFile(path, []byte(outs[open]), outputfile.FinishedMode)
		}
		if err == nil {
			// WriteFile's mode is narrowed by the umask; a finished upload's is exact.
			err = os.Chmod(path, outputfile.FinishedMode)
		}
		if err != nil {
			p.t.Fatalf("jobtest: output %s of %s: %v", open, name, err)
		}
	}
	doc, err := jobxml.FormatResult(files)
	if err != nil {
		p.t.Fatalf("jobtest: instance %s: %v", name, err)
	}
	return storetest.Instance(p.t, p.st, storetest.InstanceOptions{Job: id, App: p.appID, Name: name, Batch: batch,
		ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ValidateState: vs, XMLDocIn: doc}).ID
}
