package scheduler

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/store"
)

// Bounds of one group commit: requests, and bytes of reported text (a
// report may carry 64 KiB of stderr twice over).
const (
	commitMaxOps   = 256
	commitMaxBytes = 4 << 20
)

// defaultCommitLanes is how many group commits may run at once. One: the
// shared read of the next requests (reader) runs while a commit waits for
// its log flush, so the database already works on both cores, and a
// second lane only halves the batches (BenchmarkDispatch: 0.23 against
// 0.30 ms of database CPU per request, and as many requests per second).
const defaultCommitLanes = 1

// The stage label values of stage_duration_seconds.
const (
	stageRead   = "read"
	stageCommit = "commit"
)

// commitOp is one request's writes waiting for a group commit, and then
// their outcome.
type commitOp struct {
	ctx   context.Context
	batch store.SchedBatch
	out   store.SchedOutcome
	err   error
}

// committer turns the writes of concurrent requests into few transactions
// (a group of SchedulerCommit calls): each batch of queued requests is one
// SchedulerCommit, and each waiter gets its own rows' outcomes.
//
// Concurrent batches touch disjoint instances but may share jobs and hosts;
// the store takes row locks in id order and retries a deadlock, and each
// row's outcome is decided under its lock, so two lanes keep every
// guarantee of one.
type committer struct {
	g    group[commitOp]
	wait prometheus.Observer // seconds from queueing to the commit's end
	// today counts the jobs sent that host_app_version does not hold yet;
	// a commit writes them when they are due.
	today *jobsToday
	now   func() time.Time
}

// newCommitter returns a committer of lanes concurrent commits (0:
// defaultCommitLanes), each bounded by timeout; m receives the batch sizes
// and waits.
func newCommitter(st Store, timeout time.Duration, lanes int, m *Metrics, now func() time.Time) *committer {
	if lanes <= 0 {
		lanes = defaultCommitLanes
	}
	c := &committer{wait: m.stageWait.WithLabelValues(stageCommit), today: &jobsToday{}, now: now}
	c.g = group[commitOp]{lanes: lanes, size: commitBatchSize,
		run: func(ops []*groupOp[commitOp], release func()) {
			c.runCommit(st, timeout, ops, release)
			m.commitBatch.Observe(float64(len(ops)))
		}}
	return c
}

// flush writes every job count not written yet, in a commit of its own: a
// scheduler that stops calls it last, so nothing is forgotten.
func (c *committer) flush(ctx context.Context, st Store) error {
	taken := c.today.take(c.now(), true)
	if taken == nil {
		return nil
	}
	_, err := st.SchedulerCommit(ctx, store.SchedBatch{JobsToday: taken})
	c.today.done(taken, err == nil, c.now())
	return err
}

// commit records b durably and returns what became of each of its reports
// and sends. An error means nothing of b was written.
func (c *committer) commit(ctx context.Context, b store.SchedBatch) (store.SchedOutcome, error) {
	start := time.Now()
	op := c.g.do(commitOp{ctx: ctx, batch: b})
	c.wait.Observe(time.Since(start).Seconds())
	return op.out, op.err
}

// commitBatchSize bounds a batch by requests and by reported bytes.
func commitBatchSize(queue []*groupOp[commitOp]) int {
	n, size := 0, 0
	for n < len(queue) && n < commitMaxOps && (n == 0 || size < commitMaxBytes) {
		for _, r := range queue[n].item.batch.Reports {
			size += len(r.StderrOut) + len(r.XMLDocOut)
		}
		n++
	}
	return n
}

// runCommit commits ops as one transaction and gives each its outcome.
//
// The next batch starts as soon as this one's statements are done and only
// its log flush is left (release): its statements then run while the
// flush waits, and a row both batches touch simply waits for this commit.
//
// The jobs sent by earlier commits are written with it once they are due
// (jobsToday), and its own sends are counted for a later one.
func (c *committer) runCommit(st Store, timeout time.Duration, ops []*groupOp[commitOp], release func()) {
	// Every request of a server has its quota: the first one's serves.
	all := store.SchedBatch{Committing: release, DailyResultQuota: ops[0].item.batch.DailyResultQuota,
		JobsToday: c.today.take(c.now(), false)}
	for _, op := range ops {
		all.Reports = append(all.Reports, op.item.batch.Reports...)
		all.Sends = append(all.Sends, op.item.batch.Sends...)
		all.Hosts = append(all.Hosts, op.item.batch.Hosts...)
	}
	// The flush serves every waiter: the leader's own deadline (or its
	// client hanging up) must not cut it short.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ops[0].item.ctx), timeout)
	out, err := st.SchedulerCommit(fctx, all)
	cancel()
	c.today.done(all.JobsToday, err == nil, c.now())
	if err == nil {
		c.today.add(out.JobsToday, c.now())
	}
	nr, ns := 0, 0
	for _, op := range ops {
		b := op.item.batch
		if err != nil {
			op.item.err = err
		} else {
			op.item.out = store.SchedOutcome{Workunits: out.Workunits, Results: out.Results,
				Reports: out.Reports[nr : nr+len(b.Reports)],
				Sends:   out.Sends[ns : ns+len(b.Sends)]}
		}
		nr += len(b.Reports)
		ns += len(b.Sends)
	}
}
