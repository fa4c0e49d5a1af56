package assimilator

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// addNamedJob inserts a succeeded job ready for assimilation whose
// canonical instance has the outputs "result", "log" and the optional
// "extra", of which files (logical name → content) are uploaded.
func (b *bundle) addNamedJob(t *testing.T, name string, files map[string]string) (int64, row.Result) {
	t.Helper()
	wuID := storetest.Job(t, b.st, storetest.JobOptions{CreateTime: t0, App: b.appID, Name: name, MinQuorum: 1,
		TargetNResults: 1, MaxErrorResults: 3, MaxTotalResults: 6, MaxSuccessResults: 3,
		AssimilateState: state.AssimilateReady, TransitionTime: state.NoTransition}).ID
	rname := name + "_0"
	outs := storetest.Outputs(rname, []string{"result", "log", "extra"}, 1e6)
	outs[2].Optional = true
	doc, err := jobxml.FormatResult(outs)
	if err != nil {
		t.Fatal(err)
	}
	r := storetest.Instance(t, b.st, storetest.InstanceOptions{CreateTime: t0, Job: wuID, Name: rname,
		ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ValidateState: state.ValidateValid, XMLDocIn: doc})
	if _, err := b.st.DB().Exec(`UPDATE workunit SET canonical_resultid = ? WHERE id = ?`, r.ID, wuID); err != nil {
		t.Fatal(err)
	}
	for i, o := range outs {
		if body, ok := files[o.OpenName]; ok {
			b.upload1(t, jobxml.OutputName(rname, i), []byte(body))
		}
	}
	return wuID, r
}

// TestCopyDeliversEveryOutputUnderItsLogicalName: the copy handler puts
// every output of the canonical instance in <results>/<job>/<open name>;
// an optional output the instance does not have is skipped, a required one
// missing holds the job back.
func TestCopyDeliversEveryOutputUnderItsLogicalName(t *testing.T) {
	t.Parallel()
	for _, copyOnly := range []bool{false, true} {
		b := setup(t)
		all, _ := b.addNamedJob(t, "all", map[string]string{"result": "42", "log": "ran", "extra": "x"})
		noExtra, _ := b.addNamedJob(t, "noextra", map[string]string{"result": "43", "log": "ran too"})
		noLog, _ := b.addNamedJob(t, "nolog", map[string]string{"result": "44", "extra": "y"})
		closed, _ := b.addNamedJob(t, "closed", map[string]string{"result": "45", "log": "l"})
		// The scheduler closed the output the host did not upload.
		closedExtra, err := fanout.Path(b.upload, jobxml.OutputName("closed_0", 2), fanoutN)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := outputfile.Close(closedExtra); err != nil {
			t.Fatal(err)
		}
		runOnce(t, b.serviceWith(b.fileHandler(copyOnly), b.st, Config{}))
		for id, want := range map[int64]state.AssimilateState{all: state.AssimilateDone, noExtra: state.AssimilateDone,
			noLog: state.AssimilateReady, closed: state.AssimilateDone} {
			if st := b.state(t, id); st != want {
				t.Errorf("copy only %v: job %d = %v, want %v", copyOnly, id, st, want)
			}
		}
		b.wantFiles(t, map[string]string{"all/result": "42", "all/log": "ran", "all/extra": "x",
			"noextra/result": "43", "noextra/log": "ran too", "closed/result": "45", "closed/log": "l"})
	}
}

// TestCommandGetsEveryOutputByLogicalName: the command handler's program
// gets the outputs the canonical instance has, one argument each, and their
// logical names in TASKSERVER_OUTPUT_NAMES.
func TestCommandGetsEveryOutputByLogicalName(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	script := writeScript(t, dir, "h.sh", `log=$1; shift
{ printf '%s|' "$TASKSERVER_OUTPUT_NAMES"; for f in "$@"; do printf '%s,' "$(cat "$f")"; done; echo; } >> "$log"
`)
	h := CommandHandler{Argv: []string{"/bin/sh", script, log}, UploadDir: b.upload, Fanout: fanoutN, Timeout: time.Minute}
	wu := row.Workunit{ID: 1, Name: "j"}
	_, r := b.addNamedJob(t, "j", map[string]string{"result": "42", "log": "ran"})
	if err := h.Handle(context.Background(), wu, &r); err != nil {
		t.Fatal(err)
	}
	_, r = b.addNamedJob(t, "k", map[string]string{"result": "43", "log": "ran", "extra": "x"})
	if err := h.Handle(context.Background(), wu, &r); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if want := "result\nlog|42,ran,\nresult\nlog\nextra|43,ran,x,\n"; string(got) != want {
		t.Errorf("the program saw %q, want %q", got, want)
	}
}
