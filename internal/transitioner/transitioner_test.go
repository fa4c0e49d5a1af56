package transitioner

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

const t0 = 1_700_000_000

type bundle struct {
	st    *store.Store
	now   atomic.Int64
	appID int64
	m     *Metrics
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{st: storetest.New(t), m: NewMetrics(prometheus.NewRegistry())}
	b.now.Store(t0)
	id := storetest.App(t, b.st, storetest.AppOptions{CreateTime: t0, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
	b.appID = id
	return b
}

func (b *bundle) clock() time.Time { return time.Unix(b.now.Load(), 0) }

func (b *bundle) service(st Store, mod, index, batch int) *Service {
	return mustNew(New(Config{Mod: mod, ModIndex: index, Batch: batch, MaxOutputBytes: 5000, TailInterval: DefaultTailInterval},
		Deps{Store: st, Metrics: b.m, Now: b.clock}))
}

// mustNew returns the Service New made, and panics with New's error for
// a test's invalid Config.
func mustNew(s *Service, err error) *Service {
	if err != nil {
		panic(fmt.Sprintf("transitioner.New: %v", err))
	}
	return s
}

// addJob inserts a job due now: quorum 2, target 2, BOINC's default limits.
func (b *bundle) addJob(t *testing.T, name string, mod ...func(*storetest.JobOptions)) int64 {
	t.Helper()
	wu := storetest.JobOptions{CreateTime: t0, App: b.appID, Name: name, Batch: 3, Priority: 5, DelayBound: 3600,
		RscFpopsEst: 1e12, MinQuorum: 2, TargetNResults: 2, MaxErrorResults: 3, MaxTotalResults: 6,
		MaxSuccessResults: 3, TransitionTime: b.now.Load()}
	for _, m := range mod {
		m(&wu)
	}
	return storetest.Job(t, b.st, wu).ID
}

func (b *bundle) addResult(t *testing.T, wuID int64, r storetest.InstanceOptions) int64 {
	t.Helper()
	r.Job, r.CreateTime, r.App = wuID, t0, b.appID
	return storetest.Instance(t, b.st, r).ID
}

func (b *bundle) results(t *testing.T, wuID int64) []row.Result {
	t.Helper()
	return storetest.Results(t, b.st, wuID)
}

func (b *bundle) job(t *testing.T, id int64) row.Workunit {
	t.Helper()
	return storetest.Workunit(t, b.st, id)
}

func (b *bundle) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	storetest.Exec(t, b.st, q, args...)
}

// trigger does what every program does to ask for a transition.
func (b *bundle) trigger(t *testing.T, wuID int64) {
	t.Helper()
	b.exec(t, `UPDATE workunit SET transition_time = LEAST(transition_time - 1, ?) WHERE id = ?`, b.now.Load(), wuID)
}

// send does what the scheduler does when it sends instance id: claim it and
// bring the job's transition_time down to the deadline.
func (b *bundle) send(t *testing.T, wuID, id, deadline int64) {
	t.Helper()
	b.exec(t, `UPDATE workunit SET transition_time = LEAST(transition_time, ?) WHERE id = ?`, deadline, wuID)
	b.exec(t, `UPDATE result SET server_state = ?, report_deadline = ?, sent_time = ? WHERE id = ? AND server_state = ?`,
		state.ServerInProgress, deadline, b.now.Load(), id, state.ServerUnsent)
}

func runOnce(t *testing.T, s *Service) int {
	t.Helper()
	n, err := s.RunOnce(context.Background())
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	return n
}

func TestCreatesInstancesExactlyToTargetOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wuID := b.addJob(t, "job")
	s := b.service(b.st, 1, 0, 100)

	if n := runOnce(t, s); n != 1 {
		t.Fatalf("first RunOnce = %d jobs, want 1", n)
	}
	rs := b.results(t, wuID)
	if len(rs) != 2 {
		t.Fatalf("after one pass: %d instances, want 2", len(rs))
	}
	for i, r := range rs {
		if want := fmt.Sprintf("job_%d", i); r.Name != want || r.ServerState != state.ServerUnsent ||
			r.AppID != b.appID || r.Batch != 3 || r.Priority != 5 || r.CreateTime != t0 {
			t.Errorf("instance %d = %+v; want name %s, UNSENT, app/batch/priority copied", i, r, want)
		}
		outs, err := jobxml.ParseResult(r.XMLDocIn)
		if err != nil || len(outs) != 1 || outs[0].Name != r.Name+"_0" || outs[0].OpenName != "out" || outs[0].MaxNbytes != 5000 {
			t.Errorf("instance %s xml_doc_in %q parses to %+v, %v; want one output %s_0 open as out, 5000 bytes",
				r.Name, r.XMLDocIn, outs, err, r.Name)
		}
	}
	if wu := b.job(t, wuID); wu.TransitionTime != state.NoTransition {
		t.Errorf("transition_time = %d, want NoTransition: only unsent instances", wu.TransitionTime)
	}
	if n := runOnce(t, s); n != 0 {
		t.Errorf("second RunOnce = %d jobs, want 0: nothing is due", n)
	}
	b.trigger(t, wuID)
	runOnce(t, s)
	if rs := b.results(t, wuID); len(rs) != 2 {
		t.Errorf("after a trigger and another pass: %d instances, want still 2", len(rs))
	}
	if got := testutil.ToFloat64(b.m.created); got != 2 {
		t.Errorf("results_created_total = %v, want 2", got)
	}
}

func TestModReplicasNeverShareJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []int64
	for i := range 10 {
		ids = append(ids, b.addJob(t, fmt.Sprintf("job%d", i)))
	}
	first := 0
	for _, id := range ids {
		if store.Partition(id, 2) == 0 {
			first++
		}
	}
	if first == 0 || first == len(ids) {
		t.Fatalf("jobs %v all hash to one partition of 2: the test needs both", ids)
	}
	zero := b.service(b.st, 2, 0, 100)
	if n := runOnce(t, zero); n != first {
		t.Fatalf("replica 0 of 2 RunOnce = %d jobs, want %d", n, first)
	}
	for _, id := range ids {
		got, want := len(b.results(t, id)), 0
		if store.Partition(id, 2) == 0 {
			want = 2
		}
		if got != want {
			t.Errorf("after replica 0 only: job %d has %d instances, want %d", id, got, want)
		}
	}

	// Both replicas at once, several passes each, over replica 1's jobs
	// left and ten fresh ones.
	for i := range 10 {
		ids = append(ids, b.addJob(t, fmt.Sprintf("more%d", i)))
	}
	var wg sync.WaitGroup
	var handled atomic.Int64
	errc := make(chan error, 2)
	for idx := range 2 {
		s := b.service(b.st, 2, idx, 3)
		wg.Go(func() {
			for range 10 {
				n, err := s.RunOnce(context.Background())
				if err != nil {
					errc <- err
					return
				}
				handled.Add(int64(n))
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("concurrent RunOnce: %v", err)
	}
	for _, id := range ids {
		if got := len(b.results(t, id)); got != 2 {
			t.Errorf("after both replicas: job %d has %d instances, want 2", id, got)
		}
	}
	if got, want := handled.Load(), int64(len(ids)-first); got != want {
		t.Errorf("replicas handled %d jobs in total, want %d: each job exactly once", got, want)
	}
	if got := testutil.ToFloat64(b.m.conflicts); got != 0 {
		t.Errorf("conflicts_total = %v, want 0: replicas must not touch the same job", got)
	}
}

func TestTimedOutInstanceIsReplaced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wuID := b.addJob(t, "job")
	s := b.service(b.st, 1, 0, 100)
	runOnce(t, s)
	rs := b.results(t, wuID)
	deadline := int64(t0 + 100)
	b.send(t, wuID, rs[0].ID, deadline)
	b.send(t, wuID, rs[1].ID, deadline+50)

	b.now.Store(deadline - 1)
	if n := runOnce(t, s); n != 0 {
		t.Fatalf("RunOnce before the deadline = %d jobs, want 0", n)
	}
	b.now.Store(deadline)
	if n := runOnce(t, s); n != 1 {
		t.Fatalf("RunOnce at the deadline = %d jobs, want 1", n)
	}
	rs = b.results(t, wuID)
	if len(rs) != 3 {
		t.Fatalf("after timeout: %d instances, want 3 (one replacement)", len(rs))
	}
	if rs[0].ServerState != state.ServerOver || rs[0].Outcome != state.OutcomeNoReply || rs[0].ModTime != deadline {
		t.Errorf("timed-out instance = state %v outcome %v mod_time %d; want over, no_reply, %d",
			rs[0].ServerState, rs[0].Outcome, rs[0].ModTime, deadline)
	}
	if rs[1].ServerState != state.ServerInProgress {
		t.Errorf("instance with a later deadline = %v, want still in progress", rs[1].ServerState)
	}
	if rs[2].Name != "job_2" || rs[2].ServerState != state.ServerUnsent {
		t.Errorf("replacement = %s %v, want job_2 unsent", rs[2].Name, rs[2].ServerState)
	}
	if wu := b.job(t, wuID); wu.TransitionTime != deadline+50 {
		t.Errorf("transition_time = %d, want the remaining deadline %d", wu.TransitionTime, deadline+50)
	}
	if got := testutil.ToFloat64(b.m.timedOut); got != 1 {
		t.Errorf("results_timed_out_total = %v, want 1", got)
	}
}

func TestTooManyErrorsFailsJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wuID := b.addJob(t, "job", func(wu *storetest.JobOptions) { wu.MaxErrorResults = 1 })
	for i := range 2 {
		b.addResult(t, wuID, storetest.InstanceOptions{Name: fmt.Sprintf("job_%d", i), ServerState: state.ServerOver,
			Outcome: state.OutcomeClientError})
	}
	unsentID := b.addResult(t, wuID, storetest.InstanceOptions{Name: "job_2", ServerState: state.ServerUnsent})
	s := b.service(b.st, 1, 0, 100)
	runOnce(t, s)

	wu := b.job(t, wuID)
	if wu.ErrorMask != state.ErrTooManyErrorResults || wu.AssimilateState != state.AssimilateReady || wu.NeedValidate {
		t.Errorf("job after too many errors = error_mask %v assimilate %v need_validate %v; want too_many_error_results, ready, false",
			wu.ErrorMask, wu.AssimilateState, wu.NeedValidate)
	}
	rs := b.results(t, wuID)
	if len(rs) != 3 {
		t.Errorf("instances = %d, want 3: none made for a failed job", len(rs))
	}
	for _, r := range rs {
		if r.ID == unsentID && (r.ServerState != state.ServerOver || r.Outcome != state.OutcomeDidntNeed) {
			t.Errorf("unsent instance = %v/%v, want over/didnt_need", r.ServerState, r.Outcome)
		}
	}
	if got := testutil.ToFloat64(b.m.jobErrors.WithLabelValues("too_many_error_results")); got != 1 {
		t.Errorf(`job_errors_total{error="too_many_error_results"} = %v, want 1`, got)
	}
}

func TestTooManyTotalFailsJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wuID := b.addJob(t, "job", func(wu *storetest.JobOptions) { wu.MaxTotalResults = 3; wu.MaxErrorResults = 10 })
	for i := range 3 {
		b.addResult(t, wuID, storetest.InstanceOptions{Name: fmt.Sprintf("job_%d", i), ServerState: state.ServerOver,
			Outcome: state.OutcomeNoReply})
	}
	runOnce(t, b.service(b.st, 1, 0, 100))
	if wu := b.job(t, wuID); wu.ErrorMask != state.ErrTooManyTotalResults {
		t.Errorf("error_mask = %v, want too_many_total_results", wu.ErrorMask)
	}
	if rs := b.results(t, wuID); len(rs) != 3 {
		t.Errorf("instances = %d, want 3: max_total_results reached", len(rs))
	}
}

// hookStore runs before just ahead of the first WorkunitTransitionBatch: it
// plays another program acting between the transitioner's read and its
// write.
type hookStore struct {
	*store.Store
	before func()
}

func (h *hookStore) WorkunitTransitionBatch(ctx context.Context, ps []store.WorkunitTransitionParams) ([]error, error) {
	if h.before != nil {
		h.before()
		h.before = nil
	}
	return h.Store.WorkunitTransitionBatch(ctx, ps)
}

func TestConcurrentTriggerWins(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wuID := b.addJob(t, "job")
	h := &hookStore{Store: b.st, before: func() { b.trigger(t, wuID) }}
	s := b.service(h, 1, 0, 100)
	runOnce(t, s)
	if rs := b.results(t, wuID); len(rs) != 0 {
		t.Errorf("after losing to a trigger: %d instances, want 0 (whole job rolled back)", len(rs))
	}
	if wu := b.job(t, wuID); wu.TransitionTime != t0-1 {
		t.Errorf("transition_time = %d, want the trigger's %d", wu.TransitionTime, t0-1)
	}
	if got := testutil.ToFloat64(b.m.conflicts); got != 1 {
		t.Errorf("conflicts_total = %v, want 1", got)
	}
	runOnce(t, s)
	if rs := b.results(t, wuID); len(rs) != 2 {
		t.Errorf("next pass: %d instances, want 2", len(rs))
	}
}

func TestInstanceChangedMeanwhileVoidsJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A job with a canonical result: its unsent instance is to be cancelled.
	wuID := b.addJob(t, "job", func(wu *storetest.JobOptions) {
		wu.CanonicalResultID = 1
		wu.AssimilateState = state.AssimilateReady
	})
	rid := b.addResult(t, wuID, storetest.InstanceOptions{Name: "job_0", ServerState: state.ServerUnsent})
	// The scheduler sends it after the read; its LEAST() leaves the due
	// transition_time as it was, so only the instance's condition notices.
	h := &hookStore{Store: b.st, before: func() { b.send(t, wuID, rid, t0+500) }}
	s := b.service(h, 1, 0, 100)
	runOnce(t, s)
	if got := testutil.ToFloat64(b.m.conflicts); got != 1 {
		t.Fatalf("conflicts_total = %v, want 1", got)
	}
	if wu := b.job(t, wuID); wu.TransitionTime != t0 {
		t.Errorf("transition_time = %d, want unchanged %d (rolled back)", wu.TransitionTime, t0)
	}
	runOnce(t, s)
	rs := b.results(t, wuID)
	if rs[0].ServerState != state.ServerInProgress {
		t.Errorf("sent instance = %v, want in progress: never cancelled under the client", rs[0].ServerState)
	}
	if wu := b.job(t, wuID); wu.TransitionTime != t0+500 {
		t.Errorf("transition_time = %d, want the deadline %d", wu.TransitionTime, t0+500)
	}
}

func TestInstanceSentMeanwhileKeepsItsDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wuID := b.addJob(t, "job")
	r0 := b.addResult(t, wuID, storetest.InstanceOptions{Name: "job_0", ServerState: state.ServerUnsent})
	b.addResult(t, wuID, storetest.InstanceOptions{Name: "job_1", ServerState: state.ServerUnsent})
	// Read with two unsent instances (decision: never due again); then one is
	// sent without moving the already-due transition_time.
	h := &hookStore{Store: b.st, before: func() { b.send(t, wuID, r0, t0+300) }}
	runOnce(t, b.service(h, 1, 0, 100))
	if wu := b.job(t, wuID); wu.TransitionTime != t0+300 {
		t.Errorf("transition_time = %d, want %d: the deadline of the instance sent meanwhile", wu.TransitionTime, t0+300)
	}
}

func TestBatchSmallerThanOneJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wuID := b.addJob(t, "job", func(wu *storetest.JobOptions) { wu.MaxErrorResults = 10; wu.MaxTotalResults = 10 })
	for i := range 4 {
		b.addResult(t, wuID, storetest.InstanceOptions{Name: fmt.Sprintf("job_%d", i), ServerState: state.ServerOver,
			Outcome: state.OutcomeClientError})
	}
	other := b.addJob(t, "other")
	s := b.service(b.st, 1, 0, 2)
	for range 3 {
		runOnce(t, s)
	}
	if rs := b.results(t, wuID); len(rs) != 6 || rs[4].Name != "job_4" || rs[5].Name != "job_5" {
		t.Errorf("job with 4 errors read in batches of 2: %d instances, want 6 ending job_4, job_5", len(rs))
	}
	if rs := b.results(t, other); len(rs) != 2 {
		t.Errorf("second job: %d instances, want 2", len(rs))
	}
}

func TestAssimilatedJobFilesMarkedForDeletion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wuID := b.addJob(t, "job", func(wu *storetest.JobOptions) { wu.AssimilateState = state.AssimilateDone })
	var ids []int64
	for i := range 2 {
		ids = append(ids, b.addResult(t, wuID, storetest.InstanceOptions{Name: fmt.Sprintf("job_%d", i), ServerState: state.ServerOver,
			Outcome: state.OutcomeSuccess, ValidateState: state.ValidateValid}))
	}
	b.exec(t, `UPDATE workunit SET canonical_resultid = ? WHERE id = ?`, ids[0], wuID)
	runOnce(t, b.service(b.st, 1, 0, 100))
	if wu := b.job(t, wuID); wu.FileDeleteState != state.FileDeleteReady || wu.TransitionTime != state.NoTransition {
		t.Errorf("job = file_delete_state %v transition_time %d; want ready, NoTransition", wu.FileDeleteState, wu.TransitionTime)
	}
	for _, r := range b.results(t, wuID) {
		if r.FileDeleteState != state.FileDeleteReady {
			t.Errorf("instance %s file_delete_state = %v, want ready", r.Name, r.FileDeleteState)
		}
	}
	// The file deleter finishes; a late trigger must not move it back.
	b.exec(t, `UPDATE workunit SET file_delete_state = ? WHERE id = ?`, state.FileDeleteDone, wuID)
	b.trigger(t, wuID)
	runOnce(t, b.service(b.st, 1, 0, 100))
	if wu := b.job(t, wuID); wu.FileDeleteState != state.FileDeleteDone {
		t.Errorf("after a late trigger file_delete_state = %v, want still done", wu.FileDeleteState)
	}
}

func TestTransitionLagGauge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.addJob(t, "old", func(wu *storetest.JobOptions) { wu.TransitionTime = t0 - 30 })
	b.addJob(t, "new")
	s := b.service(b.st, 1, 0, 100)
	runOnce(t, s)
	if got := testutil.ToFloat64(b.m.lag); got != 30 {
		t.Errorf("transition_lag_seconds = %v, want 30", got)
	}
	runOnce(t, s)
	if got := testutil.ToFloat64(b.m.lag); got != 0 {
		t.Errorf("transition_lag_seconds with nothing due = %v, want 0", got)
	}
}

func TestMisconfiguredTwinsNeverDuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []int64
	for i := range 10 {
		ids = append(ids, b.addJob(t, fmt.Sprintf("job%d", i)))
	}
	// Two replicas that both think they own every job: the guard on
	// transition_time and the unique instance names keep them honest.
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	for range 2 {
		s := b.service(b.st, 1, 0, 4)
		wg.Go(func() {
			for range 6 {
				if _, err := s.RunOnce(context.Background()); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("concurrent RunOnce: %v", err)
	}
	for _, id := range ids {
		if got := len(b.results(t, id)); got != 2 {
			t.Errorf("job %d has %d instances, want exactly 2", id, got)
		}
	}
}
