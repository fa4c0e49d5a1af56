package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/taskserver/taskserver/internal/scheduler/decide"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// schedFixture is one job with two unsent instances, one user with two hosts.
type schedFixture struct {
	st           *store.Store
	wuID         int64
	r1, r2       int64
	user         int64
	host1, host2 int64
}

func newSchedFixture(t *testing.T) schedFixture {
	t.Helper()
	st := storetest.New(t)
	f := schedFixture{st: st}
	appID := storetest.App(t, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
	f.wuID = storetest.Job(t, st, storetest.JobOptions{CreateTime: 1, App: appID, Name: "wu",
		TransitionTime: state.NoTransition, DelayBound: 100, RscFpopsEst: 1e9}).ID
	f.r1 = storetest.Instance(t, st, storetest.InstanceOptions{CreateTime: 1, Job: f.wuID, ServerState: state.ServerUnsent, Name: "wu_0"}).ID
	f.r2 = storetest.Instance(t, st, storetest.InstanceOptions{CreateTime: 1, Job: f.wuID, ServerState: state.ServerUnsent, Name: "wu_1"}).ID
	f.user = storetest.User(t, st, storetest.UserOptions{CreateTime: 1, EmailAddr: "a@example.com", Name: "a", Authenticator: "k"}).ID
	f.host1 = storetest.Host(t, st, storetest.HostOptions{CreateTime: 1, User: f.user}).ID
	f.host2 = storetest.Host(t, st, storetest.HostOptions{CreateTime: 1, User: f.user}).ID
	return f
}

// send commits a batch of the one send p, as the scheduler does for a
// request that reports nothing, and returns what became of the send.
func (f schedFixture) send(t *testing.T, p store.SchedSend) error {
	t.Helper()
	out, err := f.st.SchedulerCommit(context.Background(), store.SchedBatch{Sends: []store.SchedSend{p}})
	if err != nil {
		t.Fatalf("SchedulerCommit(send of result %d) = %v", p.ResultID, err)
	}
	return out.Sends[0]
}

// report commits a batch of the one report r with its host's row as it is
// (a request that changed nothing else about its host), and returns what
// became of the report.
func (f schedFixture) report(t *testing.T, r store.SchedReport) store.SchedReportOutcome {
	t.Helper()
	ctx := context.Background()
	h, err := f.st.HostGet(ctx, r.HostID)
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.st.SchedulerCommit(ctx, store.SchedBatch{Reports: []store.SchedReport{r},
		Hosts: []store.SchedHost{{Host: h}}})
	if err != nil {
		t.Fatalf("SchedulerCommit(report of result %d) = %v", r.ResultID, err)
	}
	return out.Reports[0]
}

func TestSchedulerCommitSendClaimsOncePerUser(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	ctx := context.Background()
	p := store.SchedSend{ResultID: f.r1, WorkunitID: f.wuID, HostID: f.host1, UserID: f.user,
		AppVersionID: 3, AppVersionNum: 100, ReportDeadline: 1100, Now: 1000}
	if err := f.send(t, p); err != nil {
		t.Fatalf("send(r1) = %v, want nil", err)
	}
	r, _ := f.st.ResultGet(ctx, f.r1)
	if r.ServerState != state.ServerInProgress || r.HostID != f.host1 || r.UserID != f.user ||
		r.ReportDeadline != 1100 || r.SentTime != 1000 || r.AppVersionID != 3 || r.AppVersionNum != 100 {
		t.Fatalf("after the send, result = %+v", r)
	}
	wu, _ := f.st.WorkunitGet(ctx, f.wuID)
	if wu.TransitionTime != 1100 {
		t.Fatalf("after the send, transition_time = %d, want the deadline 1100", wu.TransitionTime)
	}

	// Same user, other host, other instance of the same job: refused.
	p2 := p
	p2.ResultID, p2.HostID = f.r2, f.host2
	if err := f.send(t, p2); !errors.Is(err, decide.ErrAlreadySentToUser) {
		t.Fatalf("send(r2, same user) = %v, want ErrAlreadySentToUser", err)
	}
	if r, _ := f.st.ResultGet(ctx, f.r2); r.ServerState != state.ServerUnsent {
		t.Fatalf("refused send changed r2: %+v", r)
	}

	// Another user may take r2, but not r1 (no longer unsent).
	other := storetest.User(t, f.st, storetest.UserOptions{CreateTime: 1, EmailAddr: "b@example.com", Name: "b", Authenticator: "k2"}).ID
	p3 := p
	p3.UserID = other
	if err := f.send(t, p3); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("send(r1 again, other user) = %v, want ErrConflict", err)
	}
	p3.ResultID = f.r2
	if err := f.send(t, p3); err != nil {
		t.Fatalf("send(r2, other user) = %v, want nil (the conflicting attempt must have left no workunit_user row)", err)
	}
}

func TestSchedulerCommitReportOnlyFromItsHostAndOnce(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	ctx := context.Background()
	if err := f.send(t, store.SchedSend{ResultID: f.r1, WorkunitID: f.wuID, HostID: f.host1,
		UserID: f.user, ReportDeadline: 5000, Now: 1000}); err != nil {
		t.Fatal(err)
	}
	rep := store.SchedReport{ResultID: f.r1, WorkunitID: f.wuID, HostID: f.host2, Outcome: state.OutcomeSuccess,
		ClientState: state.ClientFilesUploaded, CPUTime: 3, ElapsedTime: 4, StderrOut: "err", XMLDocOut: "<file_info/>", Now: 2000}
	if o := f.report(t, rep); !errors.Is(o.Err, store.ErrConflict) {
		t.Fatalf("report from another host = %+v, want ErrConflict", o)
	}
	if wu, _ := f.st.WorkunitGet(ctx, f.wuID); wu.TransitionTime != 5000 {
		t.Fatalf("refused report moved transition_time to %d, want it left (5000)", wu.TransitionTime)
	}
	if r, _ := f.st.ResultGet(ctx, f.r1); r.ServerState != state.ServerInProgress || r.HostID != f.host1 {
		t.Fatalf("refused report changed the result: %+v", r)
	}
	rep.HostID = f.host1
	if o := f.report(t, rep); o.Err != nil || o.Outcome != state.OutcomeSuccess || o.Late {
		t.Fatalf("report = %+v, want recorded, on time", o)
	}
	r, _ := f.st.ResultGet(ctx, f.r1)
	if r.ServerState != state.ServerOver || r.Outcome != state.OutcomeSuccess || r.ReceivedTime != 2000 ||
		r.CPUTime != 3 || r.ElapsedTime != 4 || r.StderrOut != "err" || r.XMLDocOut != "<file_info/>" {
		t.Fatalf("after the report, result = %+v", r)
	}
	wu, _ := f.st.WorkunitGet(ctx, f.wuID)
	if wu.TransitionTime != 2000 {
		t.Fatalf("after the report, transition_time = %d, want now (2000)", wu.TransitionTime)
	}
	if o := f.report(t, rep); !errors.Is(o.Err, store.ErrConflict) {
		t.Fatalf("second report = %+v, want ErrConflict", o)
	}
	if wu2, _ := f.st.WorkunitGet(ctx, f.wuID); wu2.TransitionTime != 2000 {
		t.Fatalf("refused second report moved transition_time to %d", wu2.TransitionTime)
	}
}

func TestResultListHostInProgressAndByIDs(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	ctx := context.Background()
	if err := f.send(t, store.SchedSend{ResultID: f.r2, WorkunitID: f.wuID, HostID: f.host1,
		UserID: f.user, AppVersionNum: 7, ReportDeadline: 5000, Now: 1000}); err != nil {
		t.Fatal(err)
	}
	got, err := f.st.ResultListHostInProgress(ctx, f.host1, 10)
	if err != nil || len(got) != 1 || got[0].ID != f.r2 || got[0].Name != "wu_1" || got[0].RscFpopsEst != 1e9 ||
		got[0].AppVersionNum != 7 || got[0].ReportDeadline != 5000 {
		t.Fatalf("ResultListHostInProgress = %+v, %v; want only wu_1", got, err)
	}
	if got, _ := f.st.ResultListHostInProgress(ctx, f.host2, 10); len(got) != 0 {
		t.Fatalf("ResultListHostInProgress(host2) = %+v, want none", got)
	}
	rs, err := f.st.ResultListByIDs(ctx, []int64{f.r2, f.r1, f.r2 + 1000})
	if err != nil || len(rs) != 2 || rs[0].ID != f.r1 || rs[1].ID != f.r2 {
		t.Fatalf("ResultListByIDs = %+v, %v", rs, err)
	}
	wus, err := f.st.WorkunitListByIDs(ctx, []int64{f.wuID})
	if err != nil || len(wus) != 1 || wus[0].Name != "wu" {
		t.Fatalf("WorkunitListByIDs = %+v, %v", wus, err)
	}
}
