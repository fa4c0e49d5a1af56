package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/scheduler/decide"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func (f schedFixture) newUser(t *testing.T, name string) int64 {
	t.Helper()
	id := storetest.User(t, f.st, storetest.UserOptions{CreateTime: 1, EmailAddr: name + "@example.com", Name: name,
		Authenticator: "k_" + name}).ID
	return id
}

func (f schedFixture) workunit(t *testing.T, id int64) row.Workunit {
	t.Helper()
	return storetest.Workunit(t, f.st, id)
}

func (f schedFixture) result(t *testing.T, id int64) row.Result {
	t.Helper()
	return storetest.Result(t, f.st, id)
}

func (f schedFixture) countUserRows(t *testing.T, user int64) int {
	t.Helper()
	var n int
	if err := f.st.DB().Get(&n, `SELECT COUNT(*) FROM workunit_user WHERE workunitid = ? AND userid = ?`, f.wuID, user); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSchedulerCommitSendHomogeneousRedundancy(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	bob := f.newUser(t, "bob")
	send := func(r, user int64, class int) error {
		return f.send(t, store.SchedSend{ResultID: r, WorkunitID: f.wuID, HostID: f.host1, UserID: user,
			ReportDeadline: 1100, Now: 1000, HRClass: class})
	}
	if err := send(f.r1, f.user, 2001003); err != nil {
		t.Fatalf("send(r1, class 2001003) to an unbound job = %v, want nil", err)
	}
	if got := f.workunit(t, f.wuID).HRClass; got != 2001003 {
		t.Fatalf("hr_class after the first send = %d, want 2001003", got)
	}
	if err := send(f.r2, bob, 3002000); !errors.Is(err, decide.ErrHRMismatch) {
		t.Fatalf("send(r2, class 3002000) to a job bound to 2001003 = %v, want ErrHRMismatch", err)
	}
	if r := f.result(t, f.r2); r.ServerState != state.ServerUnsent || f.countUserRows(t, bob) != 0 {
		t.Fatalf("after a class mismatch: r2 %+v, workunit_user rows of bob %d; want unsent and none", r, f.countUserRows(t, bob))
	}
	if got := f.workunit(t, f.wuID).HRClass; got != 2001003 {
		t.Fatalf("hr_class after a mismatch = %d, want 2001003 unchanged", got)
	}
	// The same class again: the job is already bound to it.
	if err := send(f.r2, bob, 2001003); err != nil {
		t.Fatalf("send(r2, the job's own class) = %v, want nil", err)
	}
}

func TestSchedulerCommitSendReplicateRaisesQuorum(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	ctx := context.Background()
	if _, err := f.st.DB().ExecContext(ctx, `UPDATE workunit SET min_quorum = 1, target_nresults = 1, replication_quorum = 3,
		transition_time = ? WHERE id = ?`, state.NoTransition, f.wuID); err != nil {
		t.Fatal(err)
	}
	// A trusted host: nothing raised.
	if err := f.send(t, store.SchedSend{ResultID: f.r1, WorkunitID: f.wuID, HostID: f.host1, UserID: f.user,
		ReportDeadline: 5000, Now: 1000}); err != nil {
		t.Fatal(err)
	}
	if wu := f.workunit(t, f.wuID); wu.MinQuorum != 1 || wu.TargetNResults != 1 || wu.TransitionTime != 5000 {
		t.Fatalf("job after a send without replication = quorum %d target %d transition %d; want 1, 1, 5000",
			wu.MinQuorum, wu.TargetNResults, wu.TransitionTime)
	}
	bob := f.newUser(t, "bob")
	if err := f.send(t, store.SchedSend{ResultID: f.r2, WorkunitID: f.wuID, HostID: f.host2, UserID: bob,
		ReportDeadline: 6000, Now: 2000, Replicate: true}); err != nil {
		t.Fatal(err)
	}
	if wu := f.workunit(t, f.wuID); wu.MinQuorum != 3 || wu.TargetNResults != 3 || wu.TransitionTime != 2000 {
		t.Fatalf("job after a replicating send = quorum %d target %d transition %d; want 3, 3 and woken (2000)",
			wu.MinQuorum, wu.TargetNResults, wu.TransitionTime)
	}
}

func TestSchedulerCommitSendReplicateLeavesOtherJobsAlone(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	ctx := context.Background()
	// replication_quorum 0: not adaptive (a known-answer job, say).
	if _, err := f.st.DB().ExecContext(ctx, `UPDATE workunit SET min_quorum = 2, target_nresults = 2 WHERE id = ?`, f.wuID); err != nil {
		t.Fatal(err)
	}
	if err := f.send(t, store.SchedSend{ResultID: f.r1, WorkunitID: f.wuID, HostID: f.host1, UserID: f.user,
		ReportDeadline: 5000, Now: 1000, Replicate: true}); err != nil {
		t.Fatal(err)
	}
	if wu := f.workunit(t, f.wuID); wu.MinQuorum != 2 || wu.TargetNResults != 2 || wu.TransitionTime != 5000 {
		t.Fatalf("non-adaptive job after a replicating send = quorum %d target %d transition %d; want 2, 2, 5000",
			wu.MinQuorum, wu.TargetNResults, wu.TransitionTime)
	}
}

func TestSchedulerCommitSendCouldntSend(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	bad := errors.New("no input")
	var seen row.Workunit
	p := store.SchedSend{ResultID: f.r1, WorkunitID: f.wuID, HostID: f.host1, UserID: f.user,
		ReportDeadline: 5000, Now: 1000, HRClass: 7, Replicate: true,
		CheckWorkunit: func(wu row.Workunit) error { seen = wu; return bad }}
	err := f.send(t, p)
	if !errors.Is(err, decide.ErrCouldntSend) || !errors.Is(err, bad) {
		t.Fatalf("send of a job its check refuses = %v, want ErrCouldntSend wrapping the reason", err)
	}
	if seen.ID != f.wuID || seen.Name != "wu" {
		t.Fatalf("CheckWorkunit was given %+v, want job %d", seen, f.wuID)
	}
	r := f.result(t, f.r1)
	if r.ServerState != state.ServerOver || r.Outcome != state.OutcomeCouldntSend || r.HostID != 0 {
		t.Fatalf("unsendable instance = %+v, want OVER/COULDNT_SEND on no host", r)
	}
	wu := f.workunit(t, f.wuID)
	if wu.TransitionTime != 1000 || wu.HRClass != 0 {
		t.Fatalf("job after COULDNT_SEND = transition %d hr_class %d; want woken (1000) and unbound", wu.TransitionTime, wu.HRClass)
	}
	if n := f.countUserRows(t, f.user); n != 0 {
		t.Fatalf("workunit_user rows after COULDNT_SEND = %d, want 0", n)
	}
	// It is no longer unsent: a second attempt conflicts.
	if err := f.send(t, p); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("send of an instance already COULDNT_SEND = %v, want ErrConflict", err)
	}
}

func TestSchedulerCommitLateReportIsAccepted(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	ctx := context.Background()
	if err := f.send(t, store.SchedSend{ResultID: f.r1, WorkunitID: f.wuID, HostID: f.host1,
		UserID: f.user, ReportDeadline: 1100, Now: 1000}); err != nil {
		t.Fatal(err)
	}
	// The transitioner timed it out.
	if _, err := f.st.DB().ExecContext(ctx, `UPDATE result SET server_state = ?, outcome = ? WHERE id = ?`,
		state.ServerOver, state.OutcomeNoReply, f.r1); err != nil {
		t.Fatal(err)
	}
	rep := store.SchedReport{ResultID: f.r1, WorkunitID: f.wuID, HostID: f.host1, Outcome: state.OutcomeSuccess,
		ClientState: state.ClientFilesUploaded, CPUTime: 30, ElapsedTime: 31, ClaimedCredit: 0.25, Now: 1400}
	if o := f.report(t, rep); o.Err != nil || !o.Late || o.Outcome != state.OutcomeSuccess || o.Turnaround != 400 {
		t.Fatalf("late report of an instance OVER/NO_REPLY = %+v, want recorded late, turnaround 400", o)
	}
	r := f.result(t, f.r1)
	if r.ServerState != state.ServerOver || r.Outcome != state.OutcomeSuccess || r.ValidateState != state.ValidateInit ||
		r.ClaimedCredit != 0.25 || r.ReceivedTime != 1400 || r.CPUTime != 30 {
		t.Fatalf("late success recorded as %+v, want OVER/SUCCESS, validate INIT, claimed 0.25", r)
	}
	if wu := f.workunit(t, f.wuID); wu.TransitionTime != 1099 {
		t.Fatalf("transition_time after a late report = %d, want moved on from the deadline 1100 (1099)", wu.TransitionTime)
	}
	h, _ := f.st.HostGet(ctx, f.host1)
	if h.AvgTurnaround != 400 || h.ErrorStreak != 0 {
		t.Fatalf("host after a success = avg_turnaround %v error_streak %d; want 400, 0", h.AvgTurnaround, h.ErrorStreak)
	}
	// Recorded now: a recorded success is never overwritten by reporting
	// it again.
	rep.Outcome, rep.Now = state.OutcomeClientError, 1500
	if o := f.report(t, rep); !errors.Is(o.Err, store.ErrConflict) {
		t.Fatalf("report of an instance OVER/SUCCESS = %+v, want ErrConflict", o)
	}
	if r := f.result(t, f.r1); r.Outcome != state.OutcomeSuccess || r.ReceivedTime != 1400 {
		t.Fatalf("refused report changed the recorded success: %+v", r)
	}
}

func TestSchedulerCommitReportTooLateAndHostReliability(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	ctx := context.Background()
	bob := f.newUser(t, "bob")
	for _, s := range []struct {
		r, host, user int64
	}{{f.r1, f.host1, f.user}, {f.r2, f.host2, bob}} {
		if err := f.send(t, store.SchedSend{ResultID: s.r, WorkunitID: f.wuID, HostID: s.host,
			UserID: s.user, ReportDeadline: 5000, Now: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.st.DB().ExecContext(ctx, `UPDATE workunit SET error_mask = ? WHERE id = ?`, state.ErrTooManyErrorResults, f.wuID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.DB().ExecContext(ctx, `UPDATE host SET consecutive_valid = 7, error_streak = 2, avg_turnaround = 100 WHERE id = ?`, f.host2); err != nil {
		t.Fatal(err)
	}
	if o := f.report(t, store.SchedReport{ResultID: f.r1, WorkunitID: f.wuID, HostID: f.host1,
		Outcome: state.OutcomeSuccess, ClientState: state.ClientFilesUploaded, Now: 2000}); o.Err != nil {
		t.Fatal(o.Err)
	}
	if r := f.result(t, f.r1); r.Outcome != state.OutcomeSuccess || r.ValidateState != state.ValidateTooLate {
		t.Fatalf("success for a failed job = %+v, want SUCCESS with validate_state TOO_LATE", r)
	}
	if o := f.report(t, store.SchedReport{ResultID: f.r2, WorkunitID: f.wuID, HostID: f.host2,
		Outcome: state.OutcomeClientError, ClientState: state.ClientComputeError, Now: 2000}); o.Err != nil {
		t.Fatal(o.Err)
	}
	if r := f.result(t, f.r2); r.Outcome != state.OutcomeClientError || r.ValidateState != state.ValidateInit {
		t.Fatalf("error for a failed job = %+v, want CLIENT_ERROR with validate_state INIT", r)
	}
	h, _ := f.st.HostGet(ctx, f.host2)
	if h.ErrorStreak != 3 || h.ConsecutiveValid != 0 || h.AvgTurnaround != 100 {
		t.Fatalf("host after a client error = error_streak %d consecutive_valid %d avg_turnaround %v; want 3, 0, 100 (unchanged)",
			h.ErrorStreak, h.ConsecutiveValid, h.AvgTurnaround)
	}
	h, _ = f.st.HostGet(ctx, f.host1)
	if h.AvgTurnaround != 1000 {
		t.Fatalf("host after its first success = avg_turnaround %v, want 1000", h.AvgTurnaround)
	}
}

func TestSchedulerCommitReportTooLateAfterAssimilation(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	ctx := context.Background()
	if err := f.send(t, store.SchedSend{ResultID: f.r1, WorkunitID: f.wuID, HostID: f.host1,
		UserID: f.user, ReportDeadline: 5000, Now: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.DB().ExecContext(ctx, `UPDATE workunit SET canonical_resultid = ?, assimilate_state = ? WHERE id = ?`,
		f.r2, state.AssimilateDone, f.wuID); err != nil {
		t.Fatal(err)
	}
	if o := f.report(t, store.SchedReport{ResultID: f.r1, WorkunitID: f.wuID, HostID: f.host1,
		Outcome: state.OutcomeSuccess, ClientState: state.ClientFilesUploaded, Now: 2000}); o.Err != nil {
		t.Fatal(o.Err)
	}
	if r := f.result(t, f.r1); r.ValidateState != state.ValidateTooLate {
		t.Fatalf("success for an assimilated job = validate_state %v, want TOO_LATE", r.ValidateState)
	}
}

func TestResultDetachHost(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	ctx := context.Background()
	bob := f.newUser(t, "bob")
	// A second job, so host1 holds two instances.
	wu2 := storetest.Job(t, f.st, storetest.JobOptions{CreateTime: 1, Name: "wu2", TransitionTime: state.NoTransition, DelayBound: 100}).ID
	r3 := storetest.Instance(t, f.st, storetest.InstanceOptions{CreateTime: 1, Job: wu2, ServerState: state.ServerUnsent, Name: "wu2_0"}).ID
	for _, s := range []struct {
		r, wu, host, user int64
	}{{f.r1, f.wuID, f.host1, f.user}, {r3, wu2, f.host1, f.user}, {f.r2, f.wuID, f.host2, bob}} {
		if err := f.send(t, store.SchedSend{ResultID: s.r, WorkunitID: s.wu, HostID: s.host,
			UserID: s.user, ReportDeadline: 5000, Now: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := f.st.ResultDetachHost(ctx, f.host1, 3000)
	if err != nil || n != 2 {
		t.Fatalf("ResultDetachHost(host1) = %d, %v; want 2, nil", n, err)
	}
	for _, id := range []int64{f.r1, r3} {
		if r := f.result(t, id); r.ServerState != state.ServerOver || r.Outcome != state.OutcomeClientDetached || r.ReceivedTime != 3000 {
			t.Fatalf("instance %d of the detached host = %+v, want OVER/CLIENT_DETACHED received 3000", id, r)
		}
	}
	for _, wu := range []int64{f.wuID, wu2} {
		if got := f.workunit(t, wu).TransitionTime; got != 3000 {
			t.Fatalf("job %d transition_time after detach = %d, want woken (3000)", wu, got)
		}
	}
	if r := f.result(t, f.r2); r.ServerState != state.ServerInProgress {
		t.Fatalf("another host's instance after detach = %+v, want still in progress", r)
	}
	if n, err := f.st.ResultDetachHost(ctx, f.host1, 3100); err != nil || n != 0 {
		t.Fatalf("ResultDetachHost again = %d, %v; want 0, nil", n, err)
	}
	// The detached host may still report it late.
	if o := f.report(t, store.SchedReport{ResultID: f.r1, WorkunitID: f.wuID, HostID: f.host1,
		Outcome: state.OutcomeSuccess, ClientState: state.ClientFilesUploaded, Now: 3200}); o.Err != nil || !o.Late {
		t.Fatalf("late report of a detached instance = %+v, want recorded late", o)
	}
}

// A late report after the file deleter went over the instance puts its
// file_delete_state back to READY, so the output just uploaded is deleted
// too rather than left behind.
func TestSchedulerCommitLateReportAfterFileDeletionMarksFilesAgain(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	ctx := context.Background()
	if err := f.send(t, store.SchedSend{ResultID: f.r1, WorkunitID: f.wuID, HostID: f.host1,
		UserID: f.user, ReportDeadline: 1100, Now: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.DB().ExecContext(ctx, `UPDATE result SET server_state = ?, outcome = ?, file_delete_state = ? WHERE id = ?`,
		state.ServerOver, state.OutcomeNoReply, state.FileDeleteDone, f.r1); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.DB().ExecContext(ctx, `UPDATE workunit SET canonical_resultid = ?, assimilate_state = ?, file_delete_state = ? WHERE id = ?`,
		f.r2, state.AssimilateDone, state.FileDeleteDone, f.wuID); err != nil {
		t.Fatal(err)
	}
	if o := f.report(t, store.SchedReport{ResultID: f.r1, WorkunitID: f.wuID, HostID: f.host1,
		Outcome: state.OutcomeSuccess, ClientState: state.ClientFilesUploaded, Now: 2000}); o.Err != nil || !o.Late {
		t.Fatalf("late report after file deletion = %+v, want recorded late", o)
	}
	r := f.result(t, f.r1)
	if r.Outcome != state.OutcomeSuccess || r.ValidateState != state.ValidateTooLate || r.FileDeleteState != state.FileDeleteReady {
		t.Fatalf("late success after file deletion = outcome %v validate %v file_delete %v; want success, too_late, ready",
			r.Outcome, r.ValidateState, r.FileDeleteState)
	}
}
