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

// commitOp is one request's writes waiting for a group commit.
type commitOp struct {
	batch store.SchedBatch
	// lead is sent true when this op's request is to run the next flush,
	// and closed when the op has its outcome.
	lead chan bool
	out  store.SchedOutcome
	err  error
}

// committer turns the writes of concurrent requests into few transactions:
// a request hands its writes over and waits; one request at a time (the
// leader) runs every write queued so far as one SchedulerCommit, answers
// each waiter with its own rows' outcomes, and hands the lead to the first
// request queued meanwhile. There is no timer: a batch is whatever queued
// while the previous flush ran, so a lone request commits at once. No
// goroutine outlives a request.
type committer struct {
	st      Store
	timeout time.Duration
	flushes func(ops int) // observes each flush's size; may be nil

	mu    sync.Mutex
	queue []*commitOp
	busy  bool
}

// commit records b durably and returns what became of each of its reports
// and sends. An error means nothing of b was written.
func (c *committer) commit(ctx context.Context, b store.SchedBatch) (store.SchedOutcome, error) {
	op := &commitOp{batch: b, lead: make(chan bool, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, op)
	lead := !c.busy
	c.busy = true
	c.mu.Unlock()
	if !lead {
		if _, ok := <-op.lead; !ok {
			return op.out, op.err
		}
	}
	c.flush(ctx)
	return op.out, op.err
}

// flush takes the queue's head (this leader's own op first), commits it,
// answers its ops and passes the lead on.
func (c *committer) flush(ctx context.Context) {
	c.mu.Lock()
	n, size := 0, 0
	for n < len(c.queue) && n < commitMaxOps && (n == 0 || size < commitMaxBytes) {
		for _, r := range c.queue[n].batch.Reports {
			size += len(r.StderrOut) + len(r.XMLDocOut)
		}
		n++
	}
	ops := c.queue[:n:n]
	c.queue = c.queue[n:]
	c.mu.Unlock()

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
	for i, op := range ops {
		if err != nil {
			op.err = err
		} else {
			op.out = store.SchedOutcome{Workunits: out.Workunits, Results: out.Results,
				Reports: out.Reports[nr : nr+len(op.batch.Reports)],
				Sends:   out.Sends[ns : ns+len(op.batch.Sends)]}
		}
		nr += len(op.batch.Reports)
		ns += len(op.batch.Sends)
		if i > 0 {
			close(op.lead)
		}
	}

	c.mu.Lock()
	if len(c.queue) > 0 {
		c.queue[0].lead <- true
	} else {
		c.busy = false
	}
	c.mu.Unlock()
}
