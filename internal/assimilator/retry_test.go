package assimilator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

// flakyHandler fails each job's first fails[name] calls with err, then
// succeeds; it records every call.
type flakyHandler struct {
	mu      sync.Mutex
	fails   map[string]int
	err     error
	calls   map[string]int
	handled []string
}

func newFlaky(err error, fails map[string]int) *flakyHandler {
	return &flakyHandler{fails: fails, err: err, calls: map[string]int{}}
}

func (h *flakyHandler) Handle(_ context.Context, wu row.Workunit, _ *row.Result) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls[wu.Name]++
	if h.calls[wu.Name] <= h.fails[wu.Name] {
		return fmt.Errorf("flaky %s: %w", wu.Name, h.err)
	}
	h.handled = append(h.handled, wu.Name)
	return nil
}

func (h *flakyHandler) callsOf(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[name]
}

func (b *bundle) state(t *testing.T, id int64) state.AssimilateState {
	t.Helper()
	return b.job(t, id).AssimilateState
}

func TestFailingJobIsRetriedOnScheduleAndAssimilatedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	flaky := b.addJob(t, "flaky", state.ErrCancelled)
	var others []int64
	for _, name := range []string{"a", "b", "c"} {
		others = append(others, b.addJob(t, name, state.ErrCancelled))
	}
	h := newFlaky(errors.New("archive offline"), map[string]int{"flaky": 3})
	s := b.serviceWith(h, b.st, Config{})

	if n := runOnce(t, s); n != 4 {
		t.Fatalf("first RunOnce tried %d jobs, want 4", n)
	}
	for _, id := range others {
		if st := b.state(t, id); st != state.AssimilateDone {
			t.Errorf("job %d behind a failing one = %v, want done in the same pass", id, st)
		}
	}
	// Failures 1, 2, 3 wait 10 s, 20 s, 40 s: a pass just before each retry
	// is due leaves the job alone, one at the time tries it.
	for i, wait := range []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second} {
		if st := b.state(t, flaky); st != state.AssimilateReady {
			t.Fatalf("failing job after %d failures = %v, want still ready", i+1, st)
		}
		if got := testutil.ToFloat64(b.m.backingOff); got != 1 {
			t.Errorf("jobs_backing_off after %d failures = %v, want 1", i+1, got)
		}
		b.advance(wait - time.Second)
		if n := runOnce(t, s); n != 0 || h.callsOf("flaky") != i+1 {
			t.Fatalf("RunOnce 1 s before retry %d: tried %d, handler calls %d; want 0, %d", i+1, n, h.callsOf("flaky"), i+1)
		}
		b.advance(time.Second)
		if n := runOnce(t, s); n != 1 || h.callsOf("flaky") != i+2 {
			t.Fatalf("RunOnce when retry %d is due: tried %d, handler calls %d; want 1, %d", i+1, n, h.callsOf("flaky"), i+2)
		}
	}
	if st := b.state(t, flaky); st != state.AssimilateDone {
		t.Errorf("job after its handler succeeded = %v, want done", st)
	}
	b.advance(RetryMax)
	if n := runOnce(t, s); n != 0 {
		t.Errorf("RunOnce after everything is done tried %d jobs, want 0", n)
	}
	if got := slices.Sorted(slices.Values(h.handled)); !slices.Equal(got, []string{"a", "b", "c", "flaky"}) {
		t.Errorf("jobs handled successfully = %v, want each job exactly once", got)
	}
	if got := testutil.ToFloat64(b.m.handlerErrors.WithLabelValues(failHandler)); got != 3 {
		t.Errorf(`handler_errors_total{kind="handler"} = %v, want 3`, got)
	}
	if got := testutil.ToFloat64(b.m.backingOff); got != 0 {
		t.Errorf("jobs_backing_off once all are done = %v, want 0", got)
	}
	if got := testutil.ToFloat64(b.m.jobs.WithLabelValues(kindError)); got != 4 {
		t.Errorf(`jobs_assimilated_total{kind="error"} = %v, want 4`, got)
	}
}

func TestFailingJobsAtTheHeadDoNotStarveTheRest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fails := map[string]int{}
	var failing []int64
	for i := range 25 {
		name := fmt.Sprintf("bad%02d", i)
		fails[name] = 1_000_000
		failing = append(failing, b.addJob(t, name, state.ErrCancelled))
	}
	good := []int64{b.addJob(t, "good1", state.ErrCancelled), b.addJob(t, "good2", state.ErrCancelled)}
	h := newFlaky(errors.New("broken"), fails)
	s := b.serviceWith(h, b.st, Config{Batch: 10})
	// Each pass tries 10 jobs and the next goes on after them; by the
	// third, the good jobs behind 25 failing ones are done.
	for range 3 {
		runOnce(t, s)
	}
	for _, id := range good {
		if st := b.state(t, id); st != state.AssimilateDone {
			t.Errorf("good job %d behind 25 failing ones after 3 passes = %v, want done", id, st)
		}
	}
	for _, id := range failing {
		if st := b.state(t, id); st != state.AssimilateReady {
			t.Errorf("failing job %d = %v, want ready (never dropped)", id, st)
		}
	}
	// All 25 are backing off now; a job that becomes ready meanwhile is
	// found at once, past them.
	late := b.addJob(t, "late", state.ErrCancelled)
	if n := runOnce(t, s); n != 1 {
		t.Errorf("RunOnce with 25 jobs backing off and 1 new = tried %d, want 1", n)
	}
	if st := b.state(t, late); st != state.AssimilateDone {
		t.Errorf("new job behind 25 backing off = %v, want done", st)
	}
	if got := testutil.ToFloat64(b.m.handlerErrors.WithLabelValues(failHandler)); got != 25 {
		t.Errorf(`handler_errors_total{kind="handler"} = %v, want 25: each failing job tried once`, got)
	}
	if got := testutil.ToFloat64(b.m.backingOff); got != 25 {
		t.Errorf("jobs_backing_off = %v, want 25", got)
	}
}

func TestHandlerTimeoutIsCountedAsTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.addJob(t, "slow", state.ErrCancelled)
	s := b.serviceWith(newFlaky(context.DeadlineExceeded, map[string]int{"slow": 1}), b.st, Config{})
	runOnce(t, s)
	if got := testutil.ToFloat64(b.m.handlerErrors.WithLabelValues(failTimeout)); got != 1 {
		t.Errorf(`handler_errors_total{kind="timeout"} = %v, want 1`, got)
	}
	b.advance(RetryMin)
	runOnce(t, s)
	if st := b.state(t, id); st != state.AssimilateDone {
		t.Errorf("job after a timeout and a retry = %v, want done", st)
	}
}

func TestMissingOutputIsRetriedOnceUploaded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	missing := b.addJob(t, "missing", 0, nil)
	fine := b.addJob(t, "fine", 0, []byte("ok"))
	s := b.service(1, 0)
	if n := runOnce(t, s); n != 2 {
		t.Fatalf("RunOnce with a missing output tried %d jobs, want 2", n)
	}
	if st := b.state(t, missing); st != state.AssimilateReady {
		t.Errorf("job whose output is missing = %v, want still ready", st)
	}
	if st := b.state(t, fine); st != state.AssimilateDone {
		t.Errorf("other job of the batch = %v, want done", st)
	}
	b.upload1(t, jobxml.OutputName("missing_0", 0), []byte("late"))
	b.advance(RetryMin)
	runOnce(t, s)
	if got := b.read(t, "missing/out"); got != "late" {
		t.Errorf("results/missing/out once its file is there = %q, want late", got)
	}
	if got := b.files(t); !slices.Equal(got, []string{"fine/out", "missing/out"}) {
		t.Errorf("results dir = %v, want [fine/out missing/out]: no temporary files left", got)
	}
}

// panicHandler fails the test if called.
type panicHandler struct{ t *testing.T }

func (h panicHandler) Handle(_ context.Context, wu row.Workunit, _ *row.Result) error {
	h.t.Errorf("handler called for job %s, want known-answer jobs marked done without it", wu.Name)
	return nil
}

func TestKnownAnswerJobIsMarkedDoneWithoutTheHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ok := b.addJob(t, "ka_1_ok", 0, []byte("expected"))
	bad := b.addJob(t, "ka_2_bad", state.ErrTooManyErrorResults)
	for _, id := range []int64{ok, bad} {
		if _, err := b.st.DB().Exec(`UPDATE workunit SET known_answer_id = 9 WHERE id = ?`, id); err != nil {
			t.Fatal(err)
		}
	}
	runOnce(t, b.serviceWith(panicHandler{t}, b.st, Config{}))
	for _, id := range []int64{ok, bad} {
		if st := b.state(t, id); st != state.AssimilateDone {
			t.Errorf("known-answer job %d = %v, want done", id, st)
		}
	}
	if got := testutil.ToFloat64(b.m.jobs.WithLabelValues(kindKnownAnswer)); got != 2 {
		t.Errorf(`jobs_assimilated_total{kind="known_answer"} = %v, want 2`, got)
	}
	if got := testutil.ToFloat64(b.m.jobs.WithLabelValues(kindSuccess)); got != 0 {
		t.Errorf(`jobs_assimilated_total{kind="success"} = %v, want 0`, got)
	}
}

// failMarkStore is the real store whose first WorkunitMarkAssimilatedBatch
// fails.
type failMarkStore struct {
	*store.Store
	mu     sync.Mutex
	failed bool
}

func (s *failMarkStore) WorkunitMarkAssimilatedBatch(ctx context.Context, ids []int64, now int64) ([]int64, error) {
	s.mu.Lock()
	fail := !s.failed
	s.failed = true
	s.mu.Unlock()
	if fail {
		return nil, errors.New("connection reset")
	}
	return s.Store.WorkunitMarkAssimilatedBatch(ctx, ids, now)
}

func TestDatabaseFailureWhenMarkingIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.addJob(t, "job", state.ErrCancelled)
	h := newFlaky(nil, nil)
	s := b.serviceWith(h, &failMarkStore{Store: b.st}, Config{})
	if n, err := s.RunOnce(context.Background()); n != 1 || err != nil {
		t.Fatalf("RunOnce with the mark failing = %d, %v; want 1 tried, no pass error", n, err)
	}
	if got := testutil.ToFloat64(b.m.handlerErrors.WithLabelValues(failDB)); got != 1 {
		t.Errorf(`handler_errors_total{kind="db"} = %v, want 1`, got)
	}
	if st := b.state(t, id); st != state.AssimilateReady {
		t.Errorf("job whose mark failed = %v, want still ready", st)
	}
	b.advance(RetryMin)
	runOnce(t, s)
	if st := b.state(t, id); st != state.AssimilateDone || h.callsOf("job") != 2 {
		t.Errorf("after the retry: job %v, handler calls %d; want done, 2 (the handler is idempotent)", st, h.callsOf("job"))
	}
}

func TestBackoffForgetsJobsThatLeftTheQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.addJob(t, "gone", state.ErrCancelled)
	s := b.serviceWith(newFlaky(errors.New("no"), map[string]int{"gone": 1_000_000}), b.st, Config{})
	runOnce(t, s)
	if got := testutil.ToFloat64(b.m.backingOff); got != 1 {
		t.Fatalf("jobs_backing_off after a failure = %v, want 1", got)
	}
	// The operator settles the job by hand.
	if _, err := b.st.DB().Exec(`UPDATE workunit SET assimilate_state = ? WHERE id = ?`, state.AssimilateDone, id); err != nil {
		t.Fatal(err)
	}
	runOnce(t, s)
	if got := testutil.ToFloat64(b.m.backingOff); got != 0 {
		t.Errorf("jobs_backing_off once the job left the queue = %v, want 0", got)
	}
}

func TestCommandHandlerFailingOnceIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.addJob(t, "job", 0, []byte("digest 7\n"))
	dir := t.TempDir()
	marker, done := filepath.Join(dir, "tried"), filepath.Join(dir, "done")
	script := writeScript(t, dir, "ingest.sh", `marker=$1 done=$2; shift 2
if [ ! -e "$marker" ]; then touch "$marker"; echo "database busy" >&2; exit 1; fi
cat "$@" >> "$done"
`)
	h := CommandHandler{Argv: []string{script, marker, done}, UploadDir: b.upload, Fanout: fanoutN, Timeout: time.Minute}
	s := b.serviceWith(h, b.st, Config{})
	runOnce(t, s)
	if st := b.state(t, id); st != state.AssimilateReady {
		t.Fatalf("job after the command exited 1 = %v, want still ready", st)
	}
	b.advance(RetryMin)
	runOnce(t, s)
	if st := b.state(t, id); st != state.AssimilateDone {
		t.Errorf("job after the command's retry succeeded = %v, want done", st)
	}
	if got, err := os.ReadFile(done); err != nil || string(got) != "digest 7\n" {
		t.Errorf("what the command ingested = %q, %v; want the canonical output once", got, err)
	}
}
