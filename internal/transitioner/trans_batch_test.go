package transitioner

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// The pass writes every job in one transaction; these tests check that a
// job that changed, or that the server refuses, is left alone while the
// others of the batch are written.

func TestTriggeredJobAloneLosesItsBatchWrite(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first, mid, last := b.addJob(t, "first"), b.addJob(t, "mid"), b.addJob(t, "last")
	h := &hookStore{Store: b.st, before: func() { b.trigger(t, mid) }}
	s := b.service(h, 1, 0, 100)
	runOnce(t, s)
	for _, id := range []int64{first, last} {
		if rs := b.results(t, id); len(rs) != 2 {
			t.Errorf("job %d beside a triggered one: %d instances, want 2", id, len(rs))
		}
	}
	if rs := b.results(t, mid); len(rs) != 0 {
		t.Errorf("triggered job: %d instances, want 0 (its write dropped)", len(rs))
	}
	if wu := b.job(t, mid); wu.TransitionTime != t0-1 {
		t.Errorf("triggered job's transition_time = %d, want the trigger's %d", wu.TransitionTime, t0-1)
	}
	if got := testutil.ToFloat64(b.m.conflicts); got != 1 {
		t.Errorf("conflicts_total = %v, want 1", got)
	}
	if got := testutil.ToFloat64(b.m.jobs); got != 2 {
		t.Errorf("jobs_transitioned_total = %v, want 2", got)
	}
	runOnce(t, s)
	if rs := b.results(t, mid); len(rs) != 2 {
		t.Errorf("triggered job after the next pass: %d instances, want 2", len(rs))
	}
}

func TestChangedInstanceVoidsOnlyItsJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Two finished jobs, each with an unsent instance to cancel; one of
	// them is sent between the read and the write.
	mk := func(name string) (int64, int64) {
		id := b.addJob(t, name, func(wu *storetest.JobOptions) {
			wu.CanonicalResultID = 1
			wu.AssimilateState = state.AssimilateReady
		})
		return id, b.addResult(t, id, storetest.InstanceOptions{Name: name + "_0", ServerState: state.ServerUnsent})
	}
	sentJob, sentID := mk("sent")
	keptJob, keptID := mk("kept")
	h := &hookStore{Store: b.st, before: func() { b.send(t, sentJob, sentID, t0+500) }}
	runOnce(t, b.service(h, 1, 0, 100))
	if r := b.results(t, sentJob)[0]; r.ServerState != state.ServerInProgress {
		t.Errorf("instance sent meanwhile = %v, want in progress", r.ServerState)
	}
	if wu := b.job(t, sentJob); wu.TransitionTime != t0 {
		t.Errorf("job of the instance sent meanwhile: transition_time %d, want %d (not written)", wu.TransitionTime, t0)
	}
	if r := b.results(t, keptJob)[0]; r.ID != keptID || r.ServerState != state.ServerOver || r.Outcome != state.OutcomeDidntNeed {
		t.Errorf("other job's unsent instance = %v/%v, want over/didnt_need", r.ServerState, r.Outcome)
	}
	if wu := b.job(t, keptJob); wu.TransitionTime != state.NoTransition {
		t.Errorf("other job's transition_time = %d, want NoTransition", wu.TransitionTime)
	}
	if got := testutil.ToFloat64(b.m.conflicts); got != 1 {
		t.Errorf("conflicts_total = %v, want 1", got)
	}
}

func TestDuplicateInstanceNameFailsOnlyItsJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Job "dup"'s second instance would be called dup_1, which an unrelated
	// job's instance already is: the batch's insert is refused, and the
	// batch is written job by job.
	dup := b.addJob(t, "dup")
	other := b.addJob(t, "other", func(wu *storetest.JobOptions) { wu.TransitionTime = state.NoTransition })
	b.addResult(t, other, storetest.InstanceOptions{Name: "dup_1", ServerState: state.ServerUnsent})
	ok := b.addJob(t, "ok")
	runOnce(t, b.service(b.st, 1, 0, 100))
	if rs := b.results(t, dup); len(rs) != 0 {
		t.Errorf("job whose instance name is taken: %d instances, want 0", len(rs))
	}
	if rs := b.results(t, ok); len(rs) != 2 {
		t.Errorf("job beside it: %d instances, want 2", len(rs))
	}
	if got := testutil.ToFloat64(b.m.conflicts); got != 1 {
		t.Errorf("conflicts_total = %v, want 1", got)
	}
}

func TestRefusedJobDoesNotHoldBackItsBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A 254-byte job name leaves no room for "_0": the server refuses the
	// instance (strict mode), for this job only.
	long := b.addJob(t, strings.Repeat("x", 254))
	ok := b.addJob(t, "ok")
	var strict int
	if err := b.st.DB().GetContext(context.Background(), &strict,
		`SELECT @@SESSION.sql_mode LIKE '%STRICT_TRANS_TABLES%'`); err != nil || strict == 0 {
		t.Skipf("server not in strict mode (%v): a long name is truncated, not refused", err)
	}
	_, err := b.service(b.st, 1, 0, 100).RunOnce(context.Background())
	if err == nil {
		t.Errorf("RunOnce with a job the server refuses: nil error, want that job's error")
	}
	if rs := b.results(t, ok); len(rs) != 2 {
		t.Errorf("job beside a refused one: %d instances, want 2", len(rs))
	}
	if rs := b.results(t, long); len(rs) != 0 {
		t.Errorf("refused job: %d instances, want 0", len(rs))
	}
	if wu := b.job(t, long); wu.TransitionTime != t0 {
		t.Errorf("refused job's transition_time = %d, want %d (still due)", wu.TransitionTime, t0)
	}
}
