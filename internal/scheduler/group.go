package scheduler

import "sync"

// groupOp is one caller's item waiting in a group.
type groupOp[T any] struct {
	item T
	// lead receives the batch this op's caller is to run (its own op
	// first), and is closed when the op has its outcome.
	lead chan []*groupOp[T]
}

// group runs the work of concurrent callers in shared batches: a caller
// queues its item and waits; up to lanes callers at a time (the leaders)
// each run what queued so far as one batch, fill in each item's outcome,
// and hand the lead, with the next batch, to the first caller queued
// meanwhile. There is no timer: a batch is whatever queued while the lanes
// were busy, so a lone caller runs at once. No goroutine outlives a call.
//
// The scheduler uses it twice: to read the account, host and instances of
// many requests with one query each (reader), and to commit their writes
// in one transaction (committer). Per-statement cost (a round trip, the
// server's parse and plan) is what dominates at small batches, so sharing
// statements is most of the saving.
type group[T any] struct {
	lanes int // most batches at once; at least 1
	// size is how many items of the queue's head make the next batch; at
	// least 1.
	size func(queue []*groupOp[T]) int
	// run does a batch's work and records each item's outcome in the item.
	// It may call release once its remaining work no longer needs the lane
	// to itself (the commit's log flush): the next batch then starts.
	run func(batch []*groupOp[T], release func())

	mu     sync.Mutex
	queue  []*groupOp[T]
	active int // batches running or handed over
}

// do queues item, waits until its batch ran, and returns the item with its
// outcome.
func (g *group[T]) do(item T) T {
	op := &groupOp[T]{item: item, lead: make(chan []*groupOp[T], 1)}
	g.mu.Lock()
	g.queue = append(g.queue, op)
	var batch []*groupOp[T]
	if g.active < max(g.lanes, 1) {
		// A free lane means nothing was waiting: the queue is this op.
		g.active++
		batch = g.take()
	}
	g.mu.Unlock()
	for batch == nil {
		var ok bool
		if batch, ok = <-op.lead; !ok {
			return op.item
		}
	}
	released := false
	release := func() {
		if released {
			return
		}
		released = true
		g.mu.Lock()
		if len(g.queue) > 0 {
			next := g.take()
			next[0].lead <- next
		} else {
			g.active--
		}
		g.mu.Unlock()
	}
	g.run(batch, release)
	for _, o := range batch {
		if o != op {
			close(o.lead)
		}
	}
	release()
	return op.item
}

// take removes the next batch from the queue's head. The caller holds mu.
func (g *group[T]) take() []*groupOp[T] {
	n := min(max(g.size(g.queue), 1), len(g.queue))
	ops := g.queue[:n:n]
	g.queue = g.queue[n:]
	return ops
}
