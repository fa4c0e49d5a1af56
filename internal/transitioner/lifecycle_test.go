package transitioner

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store/storetest"
	"github.com/taskserver/taskserver/internal/transition"
)

// tailService is a single replica with tail acceleration on: 5% of a
// batch, stragglers out for half their delay bound.
func (b *bundle) tailService() *Service {
	return mustNew(New(Config{Mod: 1, Batch: 100, MaxOutputBytes: 5000,
		TailInterval: time.Minute, TailFraction: 0.05, TailAfter: 0.5}, Deps{Store: b.st, Metrics: b.m, Now: b.clock}))
}

// holdFailedJobs sets app.hold_failed_jobs.
func (b *bundle) holdFailedJobs(t *testing.T, appID int64, on bool) {
	t.Helper()
	b.exec(t, `UPDATE app SET hold_failed_jobs = ? WHERE id = ?`, on, appID)
}

// addBatch inserts a batch in state st.
func (b *bundle) addBatch(t *testing.T, name string, st row.BatchState) int64 {
	t.Helper()
	res, err := b.st.DB().ExecContext(context.Background(),
		`INSERT INTO batch (create_time, appid, name, state) VALUES (?, ?, ?, ?)`, t0, b.appID, name, st)
	if err != nil {
		t.Fatalf("insert batch %s: %v", name, err)
	}
	id, _ := res.LastInsertId()
	return id
}

// batchState reads a batch's state and completion_time.
func (b *bundle) batchState(t *testing.T, id int64) (row.BatchState, int64) {
	t.Helper()
	var row struct {
		State          row.BatchState `db:"state"`
		CompletionTime int64          `db:"completion_time"`
	}
	if err := b.st.DB().GetContext(context.Background(), &row,
		`SELECT state, completion_time FROM batch WHERE id = ?`, id); err != nil {
		t.Fatalf("read batch %d: %v", id, err)
	}
	return row.State, row.CompletionTime
}

// requeue does what the operator's requeue does (H4's contract): clear the
// hold, give the job its budget again, trigger it.
func (b *bundle) requeue(t *testing.T, wuID int64) {
	t.Helper()
	b.exec(t, `UPDATE workunit SET hold_reason = 0, hold_time = 0, max_error_results = 2 * max_error_results,
max_total_results = 2 * max_total_results, max_success_results = 2 * max_success_results,
transition_time = LEAST(transition_time - 1, ?) WHERE id = ? AND hold_reason <> 0`, b.now.Load(), wuID)
}

// cancel does what the operator's cancel does (H4's contract).
func (b *bundle) cancel(t *testing.T, wuID int64) {
	t.Helper()
	b.exec(t, `UPDATE workunit SET error_mask = error_mask | ?, hold_reason = 0,
transition_time = LEAST(transition_time - 1, ?) WHERE id = ? AND canonical_resultid = 0 AND assimilate_state = 0`,
		state.ErrCancelled, b.now.Load(), wuID)
}

func TestHeldJobIsFrozenThenRequeued(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.holdFailedJobs(t, b.appID, true)
	wuID := b.addJob(t, "job", func(wu *storetest.JobOptions) { wu.MaxErrorResults = 2; wu.MaxTotalResults = 10 })
	for i := range 3 {
		b.addResult(t, wuID, storetest.InstanceOptions{Name: fmt.Sprintf("job_%d", i), ServerState: state.ServerOver,
			Outcome: state.OutcomeClientError})
	}
	unsentID := b.addResult(t, wuID, storetest.InstanceOptions{Name: "job_3", ServerState: state.ServerUnsent})
	b.addResult(t, wuID, storetest.InstanceOptions{Name: "job_4", ServerState: state.ServerInProgress, ReportDeadline: t0 + 100})
	s := b.service(b.st, 1, 0, 100)
	runOnce(t, s)

	wu := b.job(t, wuID)
	if wu.HoldReason != state.ErrTooManyErrorResults || wu.HoldTime != t0 || wu.ErrorMask != 0 ||
		wu.AssimilateState != state.AssimilateInit || wu.NeedValidate || wu.TransitionTime != t0+100 {
		t.Fatalf("job after exhausting its errors = hold %v at %d, error_mask %v, assimilate %v, need_validate %v, "+
			"transition_time %d; want held for too_many_error_results at %d, no error, init, false, %d",
			wu.HoldReason, wu.HoldTime, wu.ErrorMask, wu.AssimilateState, wu.NeedValidate, wu.TransitionTime, t0, t0+100)
	}
	for _, r := range b.results(t, wuID) {
		if r.ID == unsentID && (r.ServerState != state.ServerOver || r.Outcome != state.OutcomeDidntNeed) {
			t.Errorf("unsent instance of the held job = %v/%v, want over/didnt_need", r.ServerState, r.Outcome)
		}
	}
	if got := testutil.ToFloat64(b.m.jobsHeld.WithLabelValues("too_many_error_results")); got != 1 {
		t.Errorf(`jobs_held_total{reason="too_many_error_results"} = %v, want 1`, got)
	}
	if got := testutil.ToFloat64(b.m.jobErrors.WithLabelValues("too_many_error_results")); got != 0 {
		t.Errorf(`job_errors_total{error="too_many_error_results"} = %v, want 0: held, not failed`, got)
	}

	// Frozen: its last instance times out, nothing else happens.
	b.now.Store(t0 + 100)
	runOnce(t, s)
	wu = b.job(t, wuID)
	rs := b.results(t, wuID)
	if len(rs) != 5 || rs[4].Outcome != state.OutcomeNoReply || wu.HoldReason != state.ErrTooManyErrorResults ||
		wu.HoldTime != t0 || wu.TransitionTime != state.NoTransition {
		t.Fatalf("held job after its deadline = %d instances (last %v), hold %v at %d, transition_time %d; "+
			"want 5 (last no_reply), still held since %d, NoTransition", len(rs), rs[len(rs)-1].Outcome,
			wu.HoldReason, wu.HoldTime, wu.TransitionTime, t0)
	}
	if got := testutil.ToFloat64(b.m.jobsHeld.WithLabelValues("too_many_error_results")); got != 1 {
		t.Errorf(`jobs_held_total after a frozen pass = %v, want still 1`, got)
	}

	// Requeued: the budget doubles (4 errors of 4 allowed) and it goes on.
	b.requeue(t, wuID)
	runOnce(t, s)
	wu = b.job(t, wuID)
	rs = b.results(t, wuID)
	if wu.HoldReason != 0 || wu.HoldTime != 0 || wu.ErrorMask != 0 || len(rs) != 7 ||
		rs[5].Name != "job_5" || rs[6].ServerState != state.ServerUnsent {
		t.Errorf("requeued job = hold %v at %d, error_mask %v, %d instances; want not held, no error, 7 instances "+
			"(job_5, job_6 unsent)", wu.HoldReason, wu.HoldTime, wu.ErrorMask, len(rs))
	}
}

func TestHoldPolicyFollowsTheApp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Two client errors, one allowed: exhausted.
	exhausted := func(name string, appID int64) int64 {
		id := b.addJob(t, name, func(wu *storetest.JobOptions) { wu.MaxErrorResults = 1; wu.App = appID })
		for i := range 2 {
			b.addResult(t, id, storetest.InstanceOptions{Name: fmt.Sprintf("%s_%d", name, i), ServerState: state.ServerOver,
				Outcome: state.OutcomeClientError})
		}
		return id
	}
	s := b.service(b.st, 1, 0, 100)
	failed := exhausted("failed", b.appID)
	runOnce(t, s) // reads the apps: no hold

	b.holdFailedJobs(t, b.appID, true)
	b.now.Store(t0 + 10)
	stale := exhausted("stale", b.appID)
	runOnce(t, s) // the cached policy: no hold

	b.now.Store(t0 + 20)
	reread := exhausted("reread", b.appID)
	holding := storetest.App(t, b.st, storetest.AppOptions{CreateTime: t0, Name: "holding",
		UserFriendlyName: "Holding", Weight: 1, HoldFailedJobs: true}).ID
	newApp := exhausted("new_app", holding)
	runOnce(t, s) // an app it has not seen makes it read the apps again

	b.now.Store(t0 + 55)
	b.holdFailedJobs(t, b.appID, false)
	b.holdFailedJobs(t, holding, false)
	cached := exhausted("cached", holding)
	runOnce(t, s) // cache 35 s old: read again

	for _, tc := range []struct {
		name string
		id   int64
		held bool
	}{
		{"job of an app that fails jobs", failed, false},
		{"job decided with the app's cached policy", stale, false},
		{"job decided after the apps were read anew", reread, true},
		{"job of an app created after the cache was read", newApp, true},
		{"job decided after the cache expired", cached, false},
	} {
		wu := b.job(t, tc.id)
		if held := wu.HoldReason != 0; held != tc.held || held == (wu.ErrorMask != 0) {
			t.Errorf("%s: hold %v, error_mask %v; want held %v (else failed)", tc.name, wu.HoldReason, wu.ErrorMask, tc.held)
		}
	}
}

func TestCancelledJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.holdFailedJobs(t, b.appID, true)
	wuID := b.addJob(t, "job")
	s := b.service(b.st, 1, 0, 100)
	runOnce(t, s)
	rs := b.results(t, wuID)
	b.send(t, wuID, rs[0].ID, t0+300)
	b.cancel(t, wuID)
	runOnce(t, s)

	wu := b.job(t, wuID)
	if wu.ErrorMask != state.ErrCancelled || wu.AssimilateState != state.AssimilateReady || wu.HoldReason != 0 ||
		wu.TransitionTime != t0+300 {
		t.Errorf("cancelled job = error_mask %v, assimilate %v, hold %v, transition_time %d; "+
			"want cancelled, ready, not held, %d (its instance out)", wu.ErrorMask, wu.AssimilateState, wu.HoldReason,
			wu.TransitionTime, t0+300)
	}
	rs = b.results(t, wuID)
	if len(rs) != 2 || rs[0].ServerState != state.ServerInProgress ||
		rs[1].ServerState != state.ServerOver || rs[1].Outcome != state.OutcomeDidntNeed {
		t.Errorf("instances of the cancelled job = %d: %v, %v/%v; want 2: in progress (the scheduler aborts it), "+
			"over/didnt_need", len(rs), rs[0].ServerState, rs[1].ServerState, rs[1].Outcome)
	}
}

func TestCancelHeldJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.holdFailedJobs(t, b.appID, true)
	wuID := b.addJob(t, "job", func(wu *storetest.JobOptions) { wu.MaxTotalResults = 2 })
	for i := range 2 {
		b.addResult(t, wuID, storetest.InstanceOptions{Name: fmt.Sprintf("job_%d", i), ServerState: state.ServerOver,
			Outcome: state.OutcomeNoReply})
	}
	s := b.service(b.st, 1, 0, 100)
	runOnce(t, s)
	if wu := b.job(t, wuID); wu.HoldReason != state.ErrTooManyTotalResults {
		t.Fatalf("hold = %v, want too_many_total_results", wu.HoldReason)
	}
	b.cancel(t, wuID)
	runOnce(t, s)
	if wu := b.job(t, wuID); wu.ErrorMask != state.ErrCancelled || wu.HoldReason != 0 ||
		wu.AssimilateState != state.AssimilateReady {
		t.Errorf("held job cancelled = error_mask %v hold %v assimilate %v; want cancelled, not held, ready",
			wu.ErrorMask, wu.HoldReason, wu.AssimilateState)
	}
}

func TestBatchPassMarksFinishedBatchDone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	finished := b.addBatch(t, "finished", row.BatchInProgress)
	open := b.addBatch(t, "open", row.BatchInProgress)
	for i, batch := range []int64{finished, finished, open} {
		b.addJob(t, fmt.Sprintf("job%d", i), func(wu *storetest.JobOptions) {
			wu.Batch, wu.AssimilateState, wu.TransitionTime = batch, state.AssimilateDone, state.NoTransition
		})
	}
	b.addJob(t, "unassimilated", func(wu *storetest.JobOptions) {
		wu.Batch, wu.AssimilateState, wu.TransitionTime = open, state.AssimilateReady, state.NoTransition
	})

	// Only the replica with mod index 0 runs the batch pass.
	if n := runOnce(t, b.service(b.st, 2, 1, 100)); n != 0 {
		t.Errorf("replica 1 of 2 RunOnce = %d, want 0", n)
	}
	if st, _ := b.batchState(t, finished); st != row.BatchInProgress {
		t.Fatalf("after replica 1: batch %v, want still in progress", st)
	}

	s := b.service(b.st, 2, 0, 100)
	if n := runOnce(t, s); n != 1 {
		t.Errorf("replica 0 RunOnce = %d, want 1 (one batch done)", n)
	}
	if st, at := b.batchState(t, finished); st != row.BatchDone || at != t0 {
		t.Errorf("finished batch = %v at %d, want done at %d", st, at, t0)
	}
	if st, _ := b.batchState(t, open); st != row.BatchInProgress {
		t.Errorf("batch with a job not assimilated = %v, want in progress", st)
	}
	if got := testutil.ToFloat64(b.m.batchesDone); got != 1 {
		t.Errorf("batches_completed_total = %v, want 1", got)
	}
	if n := runOnce(t, s); n != 0 {
		t.Errorf("RunOnce again within the tail interval = %d, want 0", n)
	}
}

func TestTailAcceleration(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Batch of 20 with one straggler (5%): its instance out for 2000 s of a
	// 3600 s delay bound, past half of it.
	tail := b.addBatch(t, "tail", row.BatchInProgress)
	for i := range 19 {
		b.addJob(t, fmt.Sprintf("done%d", i), func(wu *storetest.JobOptions) {
			wu.Batch, wu.AssimilateState, wu.TransitionTime = tail, state.AssimilateDone, state.NoTransition
		})
	}
	straggler := b.addJob(t, "straggler", func(wu *storetest.JobOptions) {
		wu.Batch, wu.MinQuorum, wu.TargetNResults, wu.TransitionTime = tail, 1, 1, t0+1600
	})
	b.addResult(t, straggler, storetest.InstanceOptions{Name: "straggler_0", ServerState: state.ServerInProgress,
		SentTime: t0 - 2000, ReportDeadline: t0 + 1600})
	// Same shape, but its instance went out only 1000 s ago.
	young := b.addBatch(t, "young", row.BatchInProgress)
	b.addJob(t, "young_done", func(wu *storetest.JobOptions) {
		wu.Batch, wu.AssimilateState, wu.TransitionTime = young, state.AssimilateDone, state.NoTransition
	})
	recent := b.addJob(t, "recent", func(wu *storetest.JobOptions) {
		wu.Batch, wu.MinQuorum, wu.TargetNResults, wu.TransitionTime = young, 1, 1, t0+2600
	})
	b.addResult(t, recent, storetest.InstanceOptions{Name: "recent_0", ServerState: state.ServerInProgress,
		SentTime: t0 - 1000, ReportDeadline: t0 + 2600})

	s := b.tailService()
	runOnce(t, s)
	wu := b.job(t, straggler)
	if wu.TailCopies != 1 || wu.TargetNResults != 2 || wu.TransitionTime != t0+1600 {
		t.Fatalf("straggler = tail_copies %d target %d transition_time %d; want 1, 2, %d (the copy made in the same pass)",
			wu.TailCopies, wu.TargetNResults, wu.TransitionTime, t0+1600)
	}
	rs := b.results(t, straggler)
	if len(rs) != 2 || rs[1].SendFlags != row.SendReliableOnly || rs[1].Priority != 5+transition.TailPriorityBoost ||
		rs[1].ServerState != state.ServerUnsent {
		t.Fatalf("straggler's instances = %d, new one %+v; want 2, the new one unsent, reliable-only, priority %d",
			len(rs), rs[len(rs)-1], 5+transition.TailPriorityBoost)
	}
	if got := testutil.ToFloat64(b.m.tailCopies); got != 1 {
		t.Errorf("tail_copies_total = %v, want 1", got)
	}
	if wu := b.job(t, recent); wu.TailCopies != 0 || len(b.results(t, recent)) != 1 {
		t.Errorf("job out for less than half its delay bound: tail_copies %d, want 0 and no new instance", wu.TailCopies)
	}

	// A later pass: the copy is sent, and still no second copy of the same
	// job; the young batch's straggler now qualifies.
	b.send(t, straggler, rs[1].ID, t0+5000)
	b.now.Store(t0 + 1000)
	runOnce(t, s)
	if wu := b.job(t, straggler); wu.TailCopies != 1 || len(b.results(t, straggler)) != 2 {
		t.Errorf("straggler after a second pass = tail_copies %d, %d instances; want 1, 2", wu.TailCopies,
			len(b.results(t, straggler)))
	}
	if wu := b.job(t, recent); wu.TailCopies != 1 || len(b.results(t, recent)) != 2 {
		t.Errorf("young batch's straggler at 2000 s out = tail_copies %d, %d instances; want 1, 2", wu.TailCopies,
			len(b.results(t, recent)))
	}
}

func TestTailAccelerationOnlyInTheTail(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Two of twenty unfinished: more than 5%, no copies. With fraction 0
	// (disabled) a lone straggler gets none either.
	batch := b.addBatch(t, "wide", row.BatchInProgress)
	var open []int64
	for i := range 20 {
		id := b.addJob(t, fmt.Sprintf("j%d", i), func(wu *storetest.JobOptions) {
			wu.Batch, wu.AssimilateState, wu.TransitionTime = batch, state.AssimilateDone, state.NoTransition
			if i < 2 {
				wu.AssimilateState, wu.MinQuorum, wu.TargetNResults = state.AssimilateInit, 1, 1
			}
		})
		if i < 2 {
			b.addResult(t, id, storetest.InstanceOptions{Name: fmt.Sprintf("j%d_0", i), ServerState: state.ServerInProgress,
				SentTime: t0 - 3000, ReportDeadline: t0 + 600})
			open = append(open, id)
		}
	}
	runOnce(t, b.tailService())
	for _, id := range open {
		if wu := b.job(t, id); wu.TailCopies != 0 {
			t.Errorf("job %d of a batch 10%% unfinished: tail_copies %d, want 0", id, wu.TailCopies)
		}
	}

	off := mustNew(New(Config{Mod: 1, Batch: 500, MaxOutputBytes: DefaultMaxOutputBytes, TailInterval: DefaultTailInterval,
		TailAfter: 0.5}, Deps{Store: b.st, Metrics: b.m, Now: b.clock}))
	b.exec(t, `UPDATE workunit SET assimilate_state = ? WHERE id = ?`, state.AssimilateDone, open[1])
	runOnce(t, off)
	if wu := b.job(t, open[0]); wu.TailCopies != 0 {
		t.Errorf("lone straggler with tail acceleration off: tail_copies %d, want 0", wu.TailCopies)
	}
}
