package validator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
	"github.com/taskserver/taskserver/job"
)

// batchFailingStore is the real store whose batch write fails, and whose
// single-job write fails for one job: the store error a batch cannot
// recover from by itself.
type batchFailingStore struct {
	*store.Store
	poison int64
}

func (s batchFailingStore) WorkunitValidateBatch(context.Context, store.WorkunitValidateBatchParams) ([]int64, error) {
	return nil, errors.New("batch refused")
}

func (s batchFailingStore) WorkunitValidate(ctx context.Context, p store.WorkunitValidateParams) error {
	if p.ID == s.poison {
		return errors.New("row refused")
	}
	return s.Store.WorkunitValidate(ctx, p)
}

func TestFailedBatchIsWrittenJobByJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u1, h1 := b.volunteer(t, "a@example.com")
	u2, h2 := b.volunteer(t, "b@example.com")
	var ids []int64
	for i := range 3 {
		name := fmt.Sprintf("job%d", i)
		id := b.addJob(t, name)
		b.addSuccess(t, id, name+"_0", u1, h1, []byte("42\n"), state.ValidateInit)
		b.addSuccess(t, id, name+"_1", u2, h2, []byte("42\n"), state.ValidateInit)
		ids = append(ids, id)
	}
	svc := mustNew(New(withDefaults(Config{App: "demo", UploadDir: b.upload, Fanout: fanoutN}),
		Deps{Store: batchFailingStore{Store: b.st, poison: ids[1]}, Metrics: b.m, Now: func() time.Time { return time.Unix(b.now, 0) }}))
	if n := runOnce(t, svc); n != 3 {
		t.Errorf("RunOnce = %d jobs, want 3", n)
	}
	for i, id := range ids {
		wu := b.job(t, id)
		if poisoned := i == 1; wu.NeedValidate != poisoned || (wu.CanonicalResultID == 0) != poisoned {
			t.Errorf("job %d need_validate %v canonical %d; want written unless it is the refused one (%v)", i,
				wu.NeedValidate, wu.CanonicalResultID, poisoned)
		}
	}
	if uc, hc := b.credit(t, u1, h1); uc != 400 || hc != 400 {
		t.Errorf("credit after two of three jobs = %g / %g, want 400 / 400", uc, hc)
	}
	if got := testutil.ToFloat64(b.m.transient); got != 1 {
		t.Errorf("transient_errors_total = %v, want 1 (the refused job)", got)
	}
	if _, ok := svc.retry[ids[1]]; !ok {
		t.Errorf("the refused job is not put off for a later pass")
	}
}

// recordingChecker is Bitwise that records the stderr_out of each instance
// it reads, to see which columns a project's own checker gets.
type recordingChecker struct {
	Bitwise
	mu     *sync.Mutex
	stderr map[int64]string
}

func (c recordingChecker) Init(ctx context.Context, r row.Result, files []job.Output) (any, error) {
	c.mu.Lock()
	c.stderr[r.ID] = r.StderrOut
	c.mu.Unlock()
	return c.Bitwise.Init(ctx, r, files)
}

func TestProjectCheckerGetsWholeInstances(t *testing.T) {
	t.Parallel()
	c := recordingChecker{mu: &sync.Mutex{}, stderr: map[int64]string{}}
	b := setupApp(t, storetest.AppOptions{CreateTime: t0, Name: "demo", UserFriendlyName: "Demo", Weight: 1}, c)
	u, h := b.volunteer(t, "a@example.com")
	id := b.addJob(t, "job")
	r0 := b.addSuccess(t, id, "job_0", u, h, []byte("x"), state.ValidateInit)
	r1 := b.addSuccess(t, id, "job_1", u, h, []byte("x"), state.ValidateInit)
	b.exec(t, `UPDATE result SET stderr_out = CONCAT('stderr of ', name) WHERE workunitid = ?`, id)
	runOnce(t, b.svc)
	if c.stderr[r0] != "stderr of job_0" || c.stderr[r1] != "stderr of job_1" {
		t.Errorf("checker saw stderr_out %v, want each instance's own", c.stderr)
	}
	if wu := b.job(t, id); wu.CanonicalResultID != r0 {
		t.Errorf("canonical = %d, want %d", wu.CanonicalResultID, r0)
	}
}

func TestManyJobsInOnePass(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var vols [][2]int64
	for i := range 4 {
		u, h := b.volunteer(t, fmt.Sprintf("v%d@example.com", i))
		vols = append(vols, [2]int64{u, h})
	}
	const jobs = 30
	for i := range jobs {
		name := fmt.Sprintf("job%d", i)
		id := b.addJob(t, name)
		v0, v1 := vols[i%4], vols[(i+1)%4]
		out := []byte("same")
		odd := out
		if i%5 == 0 {
			odd = []byte("different") // inconclusive: wants a third instance
		}
		b.addSuccess(t, id, name+"_0", v0[0], v0[1], out, state.ValidateInit)
		b.addSuccess(t, id, name+"_1", v1[0], v1[1], odd, state.ValidateInit)
	}
	svc := b.service(Config{App: "demo", Batch: 1000, Workers: 3})
	if n := runOnce(t, svc); n != jobs {
		t.Fatalf("RunOnce = %d jobs, want %d", n, jobs)
	}
	var credit float64
	for _, v := range vols {
		uc, hc := b.credit(t, v[0], v[1])
		if uc != hc {
			t.Errorf("user %d credit %g, host %d credit %g; want equal", v[0], uc, v[1], hc)
		}
		credit += uc
	}
	// 24 agreeing jobs, two valid instances each, 200 credits apiece.
	if want := float64(24 * 2 * 200); credit != want {
		t.Errorf("credit granted = %g, want %g", credit, want)
	}
	if got := testutil.ToFloat64(b.m.jobs); got != jobs {
		t.Errorf("jobs_validated_total = %v, want %d", got, jobs)
	}
	if got := testutil.ToFloat64(b.m.results.WithLabelValues(outcomeInconclusive)); got != 12 {
		t.Errorf("inconclusive results = %v, want 12", got)
	}
	if n := runOnce(t, svc); n != 0 {
		t.Errorf("second RunOnce = %d jobs, want 0", n)
	}
}

// racedStore is the real store with a twin validator that reads the same
// jobs and writes its verdicts first: before this validator's first write
// (the batch, or with failBatch its first job-by-job write), the twin runs
// a whole pass.
type racedStore struct {
	*store.Store
	twin      func()
	once      *sync.Once
	failBatch bool
}

func (s racedStore) WorkunitValidateBatch(ctx context.Context, p store.WorkunitValidateBatchParams) ([]int64, error) {
	if s.failBatch {
		return nil, errors.New("batch refused")
	}
	s.once.Do(s.twin)
	return s.Store.WorkunitValidateBatch(ctx, p)
}

func (s racedStore) WorkunitValidate(ctx context.Context, p store.WorkunitValidateParams) error {
	s.once.Do(s.twin)
	return s.Store.WorkunitValidate(ctx, p)
}

// Two validators that judged the same jobs (misconfigured twins, or one
// restarted while the old one still runs) grant the credit once: the one
// that writes second conflicts on every job, in the batch and job by job.
func TestRacingValidatorsGrantCreditOnce(t *testing.T) {
	t.Parallel()
	for _, failBatch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch fails %v", failBatch), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			u1, h1 := b.volunteer(t, "a@example.com")
			u2, h2 := b.volunteer(t, "b@example.com")
			for i := range 2 {
				name := fmt.Sprintf("job%d", i)
				id := b.addJob(t, name)
				b.addSuccess(t, id, name+"_0", u1, h1, []byte("42\n"), state.ValidateInit)
				b.addSuccess(t, id, name+"_1", u2, h2, []byte("42\n"), state.ValidateInit)
			}
			twin := b.service(Config{App: "demo"})
			raced := racedStore{Store: b.st, once: &sync.Once{}, failBatch: failBatch, twin: func() {
				if n, err := twin.RunOnce(context.Background()); n != 2 || err != nil {
					t.Errorf("twin RunOnce = %d, %v; want 2 jobs", n, err)
				}
			}}
			m := NewMetrics(prometheus.NewRegistry())
			svc := mustNew(New(withDefaults(Config{App: "demo", UploadDir: b.upload, Fanout: fanoutN}),
				Deps{Store: raced, Metrics: m, Now: func() time.Time { return time.Unix(b.now+60, 0) }}))
			runOnce(t, svc)
			for _, v := range [][2]int64{{u1, h1}, {u2, h2}} {
				if uc, hc := b.credit(t, v[0], v[1]); uc != 400 || hc != 400 {
					t.Errorf("user %d / host %d credit = %g / %g after two jobs judged twice, want 400 / 400",
						v[0], v[1], uc, hc)
				}
			}
			if got := testutil.ToFloat64(m.conflicts); got != 2 {
				t.Errorf("conflicts_total of the second writer = %v, want 2", got)
			}
		})
	}
}
