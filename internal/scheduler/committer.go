package scheduler

import (
	"context"
	"sync"
	"time"

	"github.com/taskserver/taskserver/internal/store"
)

// Bounds of one group commit: requests, and bytes of reported text (a
// report may carry 64 KiB of stderr twice over).
const (
	commitMaxOps   = 256
	commitMaxBytes = 4 << 20
)

// defaultCommitLanes is how many group commits may run at once. Two let
// one batch's statements run while the other waits for its log flush, so
// the database works on both cores; more only makes batches smaller.
const defaultCommitLanes = 2

// commitOp is one request's writes waiting for a group commit.
type commitOp struct {
	batch store.SchedBatch
	// lead receives the batch this op's request is to commit (its own op
	// first), and is closed when the op has its outcome.
	lead chan []*commitOp
	out  store.SchedOutcome
	err  error
}

// committer turns the writes of concurrent requests into few transactions:
// a request hands its writes over and waits; up to lanes requests at a time
// (the leaders) each run the writes queued so far as one SchedulerCommit,
// answer each waiter with its own rows' outcomes, and hand the lead, with
// the next batch, to the first request queued meanwhile. There is no timer:
// a batch is whatever queued while the lanes were busy, so a lone request
// commits at once. No goroutine outlives a request.
//
// Concurrent batches touch disjoint instances but may share jobs and hosts;
// the store takes row locks in id order and retries a deadlock, and each
// row's outcome is decided under its lock, so two lanes keep every
// guarantee of one.
type committer struct {
	st      Store
	timeout time.Duration
	lanes   int           // most flushes at once; 0 means defaultCommitLanes
	flushes func(ops int) // observes each flush's size; may be nil

	mu     sync.Mutex
	queue  []*commitOp
	active int // flushes running or handed over
}

// commit records b durably and returns what became of each of its reports
// and sends. An error means nothing of b was written.
func (c *committer) commit(ctx context.Context, b store.SchedBatch) (store.SchedOutcome, error) {
	op := &commitOp{batch: b, lead: make(chan []*commitOp, 1)}
	lanes := c.lanes
	if lanes <= 0 {
		lanes = defaultCommitLanes
	}
	c.mu.Lock()
	c.queue = append(c.queue, op)
	var batch []*commitOp
	if c.active < lanes {
		// A free lane means nothing was waiting: the queue is this op.
		c.active++
		batch = c.take()
	}
	c.mu.Unlock()
	for batch == nil {
		var ok bool
		if batch, ok = <-op.lead; !ok {
			return op.out, op.err
		}
	}
	c.flush(ctx, batch)
	return op.out, op.err
}

// take removes the next batch from the queue's head. The caller holds mu.
func (c *committer) take() []*commitOp {
	n, size := 0, 0
	for n < len(c.queue) && n < commitMaxOps && (n == 0 || size < commitMaxBytes) {
		for _, r := range c.queue[n].batch.Reports {
			size += len(r.StderrOut) + len(r.XMLDocOut)
		}
		n++
	}
	ops := c.queue[:n:n]
	c.queue = c.queue[n:]
	return ops
}

// flush commits ops, answers them and passes the lane on: to the first
// request queued meanwhile, with its batch, or back to free.
func (c *committer) flush(ctx context.Context, ops []*commitOp) {
	var all store.SchedBatch
	for _, op := range ops {
		all.Reports = append(all.Reports, op.batch.Reports...)
		all.Sends = append(all.Sends, op.batch.Sends...)
		all.Hosts = append(all.Hosts, op.batch.Hosts...)
	}
	// The flush serves every waiter: the leader's own deadline (or its
	// client hanging up) must not cut it short.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	out, err := c.st.SchedulerCommit(fctx, all)
	cancel()
	if c.flushes != nil {
		c.flushes(len(ops))
	}
	nr, ns := 0, 0
	for _, op := range ops {
		if err != nil {
			op.err = err
		} else {
			op.out = store.SchedOutcome{Workunits: out.Workunits, Results: out.Results,
				Reports: out.Reports[nr : nr+len(op.batch.Reports)],
				Sends:   out.Sends[ns : ns+len(op.batch.Sends)]}
		}
		nr += len(op.batch.Reports)
		ns += len(op.batch.Sends)
		close(op.lead) // the leader's own op: nobody reads it any more
	}

	c.mu.Lock()
	if len(c.queue) > 0 {
		next := c.take()
		next[0].lead <- next
	} else {
		c.active--
	}
	c.mu.Unlock()
}
