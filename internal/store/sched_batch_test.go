package store_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/scheduler/decide"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// TestSchedulerCommitDecidesEachRow puts into one batch two sends of one job
// to one user (on two hosts), a send of an instance that is no longer unsent,
// a report, a foreign report and an unsendable send: each gets its own
// outcome and the refused ones change nothing.
func TestSchedulerCommitDecidesEachRow(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	ctx := context.Background()
	now := int64(1000)
	send := func(res, host int64) store.SchedSend {
		return store.SchedSend{ResultID: res, WorkunitID: f.wuID, HostID: host, UserID: f.user, AppVersionID: 7,
			AppVersionNum: 100, ReportDeadline: now + 100, Now: now}
	}
	// Job 2: one instance in progress on host1 (to report), one on host2.
	wu2 := storetest.Job(t, f.st, storetest.JobOptions{CreateTime: 1, App: 1, Name: "wu2",
		TransitionTime: state.NoTransition, DelayBound: 100}).ID
	var r3, r4 int64
	for i, p := range []*int64{&r3, &r4} {
		*p = storetest.Instance(t, f.st, storetest.InstanceOptions{CreateTime: 1, Job: wu2, ServerState: state.ServerUnsent,
			Name: "wu2_" + string(rune('0'+i))}).ID
	}
	bob := storetest.User(t, f.st, storetest.UserOptions{CreateTime: 1, EmailAddr: "b@example.com", Name: "b", Authenticator: "kb"}).ID
	hostB := storetest.Host(t, f.st, storetest.HostOptions{CreateTime: 1, User: bob}).ID
	if _, err := f.st.SchedulerCommit(ctx, store.SchedBatch{Sends: []store.SchedSend{
		{ResultID: r3, WorkunitID: wu2, HostID: f.host1, UserID: f.user, ReportDeadline: 500, Now: 400},
		{ResultID: r4, WorkunitID: wu2, HostID: hostB, UserID: bob, ReportDeadline: 500, Now: 400},
	}}); err != nil {
		t.Fatal(err)
	}

	unsendable := send(f.r2, f.host2)
	unsendable.CheckWorkunit = func(row.Workunit) error { return errors.New("bad input name") }
	out, err := f.st.SchedulerCommit(ctx, store.SchedBatch{
		Reports: []store.SchedReport{
			{ResultID: r3, WorkunitID: wu2, HostID: f.host1, Outcome: state.OutcomeSuccess, ClientState: 5,
				CPUTime: 1.5, StderrOut: "ok \xff", XMLDocOut: "<file_info/>", Now: now},
			{ResultID: r4, WorkunitID: wu2, HostID: f.host1, Outcome: state.OutcomeSuccess, Now: now}, // bob's
		},
		Sends: []store.SchedSend{send(f.r1, f.host1), send(f.r2, f.host2),
			{ResultID: r4, WorkunitID: wu2, HostID: 999, UserID: 999, ReportDeadline: now + 100, Now: now}},
		Hosts: []store.SchedHost{{Host: row.Host{ID: f.host1, RPCSeqno: 9, RPCTime: now, LastIPAddr: "10.0.0.1"}}},
	})
	if err != nil {
		t.Fatalf("SchedulerCommit = %v", err)
	}
	if o := out.Reports[0]; o.Err != nil || o.Outcome != state.OutcomeSuccess || o.Turnaround != float64(now-400) {
		t.Fatalf("report of host1's instance = %+v, want recorded, turnaround %d", o, now-400)
	}
	if o := out.Reports[1]; !errors.Is(o.Err, store.ErrConflict) {
		t.Fatalf("report of another host's instance = %+v, want ErrConflict", o)
	}
	if err := out.Sends[0]; err != nil {
		t.Fatalf("first send of the job to the user = %v, want nil", err)
	}
	if err := out.Sends[1]; !errors.Is(err, decide.ErrAlreadySentToUser) {
		t.Fatalf("second send of the job to the user in the same batch = %v, want ErrAlreadySentToUser", err)
	}
	if err := out.Sends[2]; !errors.Is(err, store.ErrConflict) {
		t.Fatalf("send of an instance in progress = %v, want ErrConflict", err)
	}
	if r := out.Results[f.r1]; r.HostID != f.host1 || r.ServerState != state.ServerInProgress || r.Name != "wu_0" {
		t.Fatalf("sent row returned = %+v", r)
	}

	r := storetest.Result(t, f.st, r3)
	if r.ServerState != state.ServerOver || r.Outcome != state.OutcomeSuccess || r.CPUTime != 1.5 || r.StderrOut != "ok \xff" ||
		r.ReceivedTime != now || r.ValidateState != state.ValidateInit {
		t.Fatalf("reported instance = %+v", r)
	}
	if got := throughputSince(t, f.st, 1); got.Day.Reported != 1 || got.Hour.Reported != 1 {
		t.Fatalf("throughput = %+v, want the 1 report recorded (not the foreign one)", got)
	}
	if r := storetest.Result(t, f.st, r4); r.ServerState != state.ServerInProgress || r.HostID != hostB {
		t.Fatalf("foreign report changed bob's instance: %+v", r)
	}
	if r := storetest.Result(t, f.st, f.r2); r.ServerState != state.ServerUnsent {
		t.Fatalf("refused send changed the instance: %+v", r)
	}
	if wu := storetest.Workunit(t, f.st, wu2); wu.TransitionTime != min(500-1, now) {
		t.Fatalf("reported job transition_time = %d, want triggered to %d", wu.TransitionTime, 499)
	}
	if wu := storetest.Workunit(t, f.st, f.wuID); wu.TransitionTime != now+100 {
		t.Fatalf("sent job transition_time = %d, want the deadline %d", wu.TransitionTime, now+100)
	}
	h, err := f.st.HostGet(ctx, f.host1)
	if err != nil {
		t.Fatal(err)
	}
	if h.RPCSeqno != 9 || h.LastIPAddr != "10.0.0.1" || h.AvgTurnaround != float64(now-400) {
		t.Fatalf("host after the batch = %+v, want seqno 9, ip, avg_turnaround %d", h, now-400)
	}

	// Unsendable: the instance becomes COULDNT_SEND, the job is woken.
	out, err = f.st.SchedulerCommit(ctx, store.SchedBatch{Sends: []store.SchedSend{unsendable}})
	if err != nil || !errors.Is(out.Sends[0], decide.ErrCouldntSend) {
		t.Fatalf("unsendable send = %v, %v; want ErrCouldntSend", out.Sends, err)
	}
	if r := storetest.Result(t, f.st, f.r2); r.ServerState != state.ServerOver || r.Outcome != state.OutcomeCouldntSend {
		t.Fatalf("unsendable instance = %+v, want OVER/COULDNT_SEND", r)
	}
}

// TestSchedulerCommitHostCounters: a client error and two successes of one
// host in one batch move its counters as three batches of one report would.
func TestSchedulerCommitHostCounters(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	ctx := context.Background()
	storetest.Exec(t, f.st, `UPDATE host SET avg_turnaround = 100, consecutive_valid = 4 WHERE id = ?`, f.host1)
	var ids []int64
	for i := range 3 {
		wu := storetest.Job(t, f.st, storetest.JobOptions{CreateTime: 1, App: 1, Name: "c" + string(rune('0'+i)),
			TransitionTime: state.NoTransition}).ID
		id := storetest.Instance(t, f.st, storetest.InstanceOptions{CreateTime: 1, Job: wu, ServerState: state.ServerInProgress,
			Host: f.host1, SentTime: 10, Name: "c" + string(rune('0'+i)) + "_0"}).ID
		ids = append(ids, id)
	}
	rep := func(i int, o state.Outcome, now int64) store.SchedReport {
		r := storetest.Result(t, f.st, ids[i])
		return store.SchedReport{ResultID: r.ID, WorkunitID: r.WorkunitID, HostID: f.host1, Outcome: o, Now: now}
	}
	_, err := f.st.SchedulerCommit(ctx, store.SchedBatch{
		Reports: []store.SchedReport{rep(0, state.OutcomeSuccess, 60), rep(1, state.OutcomeClientError, 60), rep(2, state.OutcomeSuccess, 210)},
		Hosts:   []store.SchedHost{{Host: row.Host{ID: f.host1, RPCSeqno: 1, RPCTime: 210}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	h, _ := f.st.HostGet(ctx, f.host1)
	want := decide.NextAvgTurnaround(decide.NextAvgTurnaround(100, 50), 200)
	if h.ErrorStreak != 1 || h.ConsecutiveValid != 0 || math.Abs(h.AvgTurnaround-want) > 1e-9 {
		t.Fatalf("host = streak %d valid %d avg %v; want 1, 0, %v", h.ErrorStreak, h.ConsecutiveValid, h.AvgTurnaround, want)
	}
}

// TestSchedulerCommitSendKeepsFlopsEstimate sends three instances in one
// batch with the speeds the reply told their clients: each instance keeps
// its own (each row's value is chosen by its id), and a speed no column can hold
// is stored as none.
func TestSchedulerCommitSendKeepsFlopsEstimate(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	ctx := context.Background()
	wu2 := storetest.Job(t, f.st, storetest.JobOptions{CreateTime: 1, App: 1, Name: "wu2",
		TransitionTime: state.NoTransition, DelayBound: 100}).ID
	r3 := storetest.Instance(t, f.st, storetest.InstanceOptions{CreateTime: 1, Job: wu2, ServerState: state.ServerUnsent, Name: "wu2_0"}).ID
	bob := storetest.User(t, f.st, storetest.UserOptions{CreateTime: 1, EmailAddr: "b@example.com", Name: "b", Authenticator: "kb"}).ID
	hostB := storetest.Host(t, f.st, storetest.HostOptions{CreateTime: 1, User: bob}).ID
	sends := []store.SchedSend{
		{ResultID: f.r1, WorkunitID: f.wuID, HostID: f.host1, UserID: f.user, AppVersionID: 7, FlopsEstimate: 2.5e10, ReportDeadline: 1100, Now: 1000},
		{ResultID: f.r2, WorkunitID: f.wuID, HostID: hostB, UserID: bob, AppVersionID: 8, FlopsEstimate: 1.5e11, ReportDeadline: 1100, Now: 1000},
		{ResultID: r3, WorkunitID: wu2, HostID: f.host1, UserID: f.user, AppVersionID: 7, FlopsEstimate: math.Inf(1), ReportDeadline: 1100, Now: 1000},
	}
	out, err := f.st.SchedulerCommit(ctx, store.SchedBatch{Sends: sends})
	if err != nil {
		t.Fatalf("SchedulerCommit = %v", err)
	}
	want := []float64{2.5e10, 1.5e11, 0}
	for i, s := range sends {
		if out.Sends[i] != nil {
			t.Fatalf("send %d = %v, want nil", i, out.Sends[i])
		}
		r, err := f.st.ResultGet(ctx, s.ResultID)
		if err != nil {
			t.Fatal(err)
		}
		if r.FlopsEstimate != want[i] || r.AppVersionID != s.AppVersionID {
			t.Errorf("send %d: result flops_estimate = %g, app_version_id = %d, want %g, %d", i, r.FlopsEstimate, r.AppVersionID, want[i], s.AppVersionID)
		}
	}
}

// TestSchedulerCommitRetriesAKeyConflictFromAnotherNode: on a Galera
// cluster the job lock is one node's, so another node's send of the job to
// the same user can land between a batch's read of workunit_user and its
// insert. The primary key refuses the second row, and the batch is re-run
// (not failed as a whole): the re-run reads the row and refuses only that
// send, while the batch's other send goes through.
func TestSchedulerCommitRetriesAKeyConflictFromAnotherNode(t *testing.T) {
	f := newSchedFixture(t)
	ctx := context.Background()
	wu2 := storetest.Job(t, f.st, storetest.JobOptions{CreateTime: 1, App: 1, Name: "wu2",
		TransitionTime: state.NoTransition, DelayBound: 100}).ID
	r3 := storetest.Instance(t, f.st, storetest.InstanceOptions{CreateTime: 1, Job: wu2, ServerState: state.ServerUnsent,
		Name: "wu2_0"}).ID
	var once sync.Once
	defer store.SetSchedAfterRead(func() {
		once.Do(func() {
			// What another node's send of r2 to the user leaves here.
			if _, err := f.st.DB().Exec(`INSERT INTO workunit_user (workunitid, userid, resultid) VALUES (?, ?, ?)`,
				f.wuID, f.user, f.r2); err != nil {
				t.Errorf("the other node's row: %v", err)
			}
		})
	})()
	out, err := f.st.SchedulerCommit(ctx, store.SchedBatch{Sends: []store.SchedSend{
		{ResultID: f.r1, WorkunitID: f.wuID, HostID: f.host1, UserID: f.user, ReportDeadline: 1100, Now: 1000},
		{ResultID: r3, WorkunitID: wu2, HostID: f.host1, UserID: f.user, ReportDeadline: 1100, Now: 1000},
	}})
	if err != nil {
		t.Fatalf("SchedulerCommit with another node's send landing mid-batch = %v, want the batch re-run", err)
	}
	if !errors.Is(out.Sends[0], decide.ErrAlreadySentToUser) || out.Sends[1] != nil {
		t.Fatalf("sends = %v, want [ErrAlreadySentToUser nil]", out.Sends)
	}
	if r := storetest.Result(t, f.st, f.r1); r.ServerState != state.ServerUnsent {
		t.Fatalf("refused send changed its instance: %+v", r)
	}
	if r := storetest.Result(t, f.st, r3); r.ServerState != state.ServerInProgress {
		t.Fatalf("the other send = %+v, want in progress", r)
	}
}

// TestSchedulerCommitSendWritesItsJobRow: a send whose job keeps every
// value (its transition_time already before the deadline, as for a job due
// for transition) still writes the job row, so that on a cluster it
// conflicts with a transitioner that read the instance unsent on another
// node (certification sees only rows written).
func TestSchedulerCommitSendWritesItsJobRow(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	if _, err := f.st.DB().Exec(`UPDATE workunit SET transition_time = 500, mod_time = 7 WHERE id = ?`, f.wuID); err != nil {
		t.Fatal(err)
	}
	if err := f.send(t, store.SchedSend{ResultID: f.r1, WorkunitID: f.wuID, HostID: f.host1, UserID: f.user,
		ReportDeadline: 1100, Now: 5}); err != nil {
		t.Fatal(err)
	}
	wu := storetest.Workunit(t, f.st, f.wuID)
	if wu.TransitionTime != 500 || wu.ModTime != 8 {
		t.Fatalf("job after the send: transition_time %d, mod_time %d; want 500 (kept) and 8 (written, growing)",
			wu.TransitionTime, wu.ModTime)
	}
}
