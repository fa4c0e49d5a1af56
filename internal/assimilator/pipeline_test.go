package assimilator_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/assimilator"
	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
	"github.com/taskserver/taskserver/internal/transitioner"
	"github.com/taskserver/taskserver/internal/validator"
)

const (
	t0      = 1_700_000_000
	fanoutN = 8
)

type service interface {
	RunOnce(ctx context.Context) (int, error)
}

// pipeline is the three back-end daemons over one database and project
// directory, with a fake clock, and the scheduler's part played by hand.
type pipeline struct {
	t       *testing.T
	st      *store.Store
	now     int64
	upload  string
	results string
	appID   int64
	trans   service
	valid   service
	assim   service
	userID  [3]int64
	hostID  [3]int64
	jobName string
	jobID   int64
}

func newPipeline(t *testing.T) *pipeline {
	t.Helper()
	dir := t.TempDir()
	p := &pipeline{t: t, st: storetest.New(t), now: t0, upload: filepath.Join(dir, "upload"),
		results: filepath.Join(dir, "results"), jobName: "demo_job"}
	clock := func() time.Time { return time.Unix(p.now, 0) }
	log := slog.New(slog.DiscardHandler)
	var err error
	p.appID = storetest.App(t, p.st, storetest.AppOptions{CreateTime: t0, Name: demoapp.AppName, UserFriendlyName: "Demo"}).ID
	for i := range 3 {
		email := string(rune('a'+i)) + "@example.com"
		p.userID[i] = storetest.User(t, p.st, storetest.UserOptions{CreateTime: t0, EmailAddr: email, Name: email, Authenticator: email}).ID
		p.hostID[i] = storetest.Host(t, p.st, storetest.HostOptions{CreateTime: t0, User: p.userID[i]}).ID
	}
	if p.trans, err = transitioner.New(transitioner.Config{Mod: 1, Batch: 500, MaxOutputBytes: transitioner.DefaultMaxOutputBytes,
		TailInterval: transitioner.DefaultTailInterval}, transitioner.Deps{Store: p.st, Log: log, Now: clock}); err != nil {
		t.Fatal(err)
	}
	if p.valid, err = validator.New(validator.Config{App: demoapp.AppName, UploadDir: p.upload, Fanout: fanoutN,
		Mod: 1, Batch: 500, Workers: validator.DefaultWorkers}, validator.Deps{Store: p.st, Log: log, Now: clock}); err != nil {
		t.Fatal(err)
	}
	if p.assim, err = assimilator.New(assimilator.Config{App: demoapp.AppName, Mod: 1, Batch: 500}, assimilator.Deps{Store: p.st,
		Handler: &assimilator.FileHandler{Dir: p.results, UploadDir: p.upload, Fanout: fanoutN}, Log: log, Now: clock}); err != nil {
		t.Fatal(err)
	}
	p.jobID = storetest.Job(t, p.st, storetest.JobOptions{CreateTime: t0, App: p.appID, Name: p.jobName,
		RscFpopsEst: 86400e9, DelayBound: 1000, MinQuorum: 2, TargetNResults: 2, MaxErrorResults: 3,
		MaxTotalResults: 6, MaxSuccessResults: 3, TransitionTime: t0}).ID
	return p
}

func (p *pipeline) run(name string, s service) {
	p.t.Helper()
	if _, err := s.RunOnce(context.Background()); err != nil {
		p.t.Fatalf("%s RunOnce: %v", name, err)
	}
}

func (p *pipeline) exec(q string, args ...any) {
	p.t.Helper()
	if _, err := p.st.DB().Exec(q, args...); err != nil {
		p.t.Fatalf("exec %q: %v", q, err)
	}
}

func (p *pipeline) instances() []row.Result {
	p.t.Helper()
	rs, err := p.st.ResultListByWorkunit(context.Background(), p.jobID)
	if err != nil {
		p.t.Fatalf("ResultListByWorkunit: %v", err)
	}
	return rs
}

func (p *pipeline) job() row.Workunit {
	p.t.Helper()
	wu, err := p.st.WorkunitGet(context.Background(), p.jobID)
	if err != nil {
		p.t.Fatalf("WorkunitGet: %v", err)
	}
	return wu
}

// send plays the scheduler sending instance r to volunteer v.
func (p *pipeline) send(r row.Result, v int) {
	p.t.Helper()
	deadline := p.now + 1000
	p.exec(`UPDATE workunit SET transition_time = LEAST(transition_time, ?) WHERE id = ?`, deadline, p.jobID)
	p.exec(`UPDATE result SET server_state = ?, hostid = ?, userid = ?, sent_time = ?, report_deadline = ?
        WHERE id = ? AND server_state = ?`, state.ServerInProgress, p.hostID[v], p.userID[v], p.now, deadline,
		r.ID, state.ServerUnsent)
}

// report plays the volunteer uploading output and the scheduler recording
// the success.
func (p *pipeline) report(r row.Result, output []byte) {
	p.t.Helper()
	path, err := fanout.Path(p.upload, jobxml.OutputName(r.Name, 0), fanoutN)
	if err != nil {
		p.t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(path, output, 0o644); err != nil {
		p.t.Fatal(err)
	}
	if err := os.Chmod(path, outputfile.FinishedMode); err != nil { // as the data server marks it
		p.t.Fatal(err)
	}
	p.exec(`UPDATE workunit SET transition_time = LEAST(transition_time - 1, ?) WHERE id = ?`, p.now, p.jobID)
	p.exec(`UPDATE result SET server_state = ?, outcome = ?, received_time = ? WHERE id = ? AND server_state = ?`,
		state.ServerOver, state.OutcomeSuccess, p.now, r.ID, state.ServerInProgress)
}

func (p *pipeline) checkFinished(wantCanonical string, wantValid map[string]state.ValidateState) {
	p.t.Helper()
	p.run("assimilator", p.assim)
	p.run("transitioner", p.trans)
	body, err := os.ReadFile(filepath.Join(p.results, p.jobName, "out"))
	if err != nil || string(body) != string(demoapp.Output(p.jobName)) {
		p.t.Errorf("results/%s/out = %q, %v; want the demo app's correct output", p.jobName, body, err)
	}
	wu := p.job()
	if wu.AssimilateState != state.AssimilateDone || wu.FileDeleteState != state.FileDeleteReady ||
		wu.TransitionTime != state.NoTransition || wu.NeedValidate {
		p.t.Errorf("finished job = assimilate %v file_delete %v transition_time %d need_validate %v; want done, ready, NoTransition, false",
			wu.AssimilateState, wu.FileDeleteState, wu.TransitionTime, wu.NeedValidate)
	}
	for _, r := range p.instances() {
		if r.ID == wu.CanonicalResultID && r.Name != wantCanonical {
			p.t.Errorf("canonical instance = %s, want %s", r.Name, wantCanonical)
		}
		if want, ok := wantValid[r.Name]; ok && r.ValidateState != want {
			p.t.Errorf("instance %s validate_state = %v, want %v", r.Name, r.ValidateState, want)
		}
		if r.ServerState != state.ServerOver || r.FileDeleteState != state.FileDeleteReady {
			p.t.Errorf("instance %s = %v, file_delete %v; want over, ready", r.Name, r.ServerState, r.FileDeleteState)
		}
	}
}

func TestPipelineAgreeingPair(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	p.run("transitioner", p.trans)
	rs := p.instances()
	if len(rs) != 2 {
		t.Fatalf("instances after creation = %d, want 2", len(rs))
	}
	p.send(rs[0], 0)
	p.send(rs[1], 1)
	p.now += 100
	p.report(rs[0], demoapp.Output(p.jobName))
	p.run("transitioner", p.trans)
	if wu := p.job(); wu.NeedValidate {
		t.Fatalf("need_validate after one report = true, want false: quorum is 2")
	}
	p.report(rs[1], demoapp.Output(p.jobName))
	p.run("transitioner", p.trans)
	if wu := p.job(); !wu.NeedValidate {
		t.Fatalf("need_validate after two reports = false, want true")
	}
	p.run("validator", p.valid)
	p.run("transitioner", p.trans)
	p.checkFinished("demo_job_0", map[string]state.ValidateState{
		"demo_job_0": state.ValidateValid, "demo_job_1": state.ValidateValid})
	for i := range 2 {
		u, _ := p.st.UserGet(context.Background(), p.userID[i])
		if u.TotalCredit != 200 {
			t.Errorf("volunteer %d credit = %g, want 200", i, u.TotalCredit)
		}
	}
}

func TestPipelineWrongAnswerThenTimeout(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	p.run("transitioner", p.trans)
	rs := p.instances()
	p.send(rs[0], 0)
	p.send(rs[1], 1)
	p.now += 100
	p.report(rs[0], []byte("forged\n"))
	p.report(rs[1], demoapp.Output(p.jobName))
	p.run("transitioner", p.trans)
	p.run("validator", p.valid)
	if wu := p.job(); wu.CanonicalResultID != 0 || wu.TargetNResults != 3 {
		t.Fatalf("after disagreement: canonical %d target %d, want 0, 3", wu.CanonicalResultID, wu.TargetNResults)
	}
	p.run("transitioner", p.trans)
	rs = p.instances()
	if len(rs) != 3 || rs[2].Name != "demo_job_2" {
		t.Fatalf("after disagreement: %d instances, want a third named demo_job_2", len(rs))
	}
	// The third volunteer never answers: the instance times out and a
	// fourth one settles the job.
	p.send(rs[2], 2)
	p.run("transitioner", p.trans)
	p.now += 1000
	p.run("transitioner", p.trans)
	rs = p.instances()
	if len(rs) != 4 || rs[2].Outcome != state.OutcomeNoReply {
		t.Fatalf("after the deadline: %d instances, third %v; want 4, the third no_reply", len(rs), rs[2].Outcome)
	}
	p.send(rs[3], 2)
	p.report(rs[3], demoapp.Output(p.jobName))
	p.run("transitioner", p.trans)
	p.run("validator", p.valid)
	p.run("transitioner", p.trans)
	p.checkFinished("demo_job_1", map[string]state.ValidateState{
		"demo_job_0": state.ValidateInvalid, "demo_job_1": state.ValidateValid, "demo_job_3": state.ValidateValid})
	if u, _ := p.st.UserGet(context.Background(), p.userID[0]); u.TotalCredit != 0 {
		t.Errorf("credit of the volunteer with the forged answer = %g, want 0", u.TotalCredit)
	}
}
