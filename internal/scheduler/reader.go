package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/store"
)

// readLanes is how many shared reads may run at once. One, as for the
// commits: reads and commits overlap each other, and a second lane of
// either only makes batches smaller.
const readLanes = 1

// readMaxOps bounds the requests of one shared read.
const readMaxOps = 256

// readOp is one request's account, host and instance read, and then what
// it found.
type readOp struct {
	ctx   context.Context
	key   store.AuthHost
	found store.UserHostHeld
	err   error
}

// reader reads the account, host, instances in progress and
// host_app_version rows of concurrent requests together (a group of
// UserHostHeldList calls): four statements
// for a batch of requests instead of a joined query each. A request alone
// keeps its one joined query.
type reader struct {
	g    group[readOp]
	wait prometheus.Observer // seconds from queueing to the read's end
}

// newReader returns a reader of st; each shared read is bounded by timeout.
// m receives the batch sizes and waits.
func newReader(st Store, timeout time.Duration, m *Metrics) *reader {
	return &reader{wait: m.stageWait.WithLabelValues(stageRead),
		g: group[readOp]{lanes: readLanes,
			size: func(q []*groupOp[readOp]) int { return min(len(q), readMaxOps) },
			run: func(ops []*groupOp[readOp], _ func()) {
				runRead(st, timeout, ops)
				m.readBatch.Observe(float64(len(ops)))
			}}}
}

// read returns what the database holds for k. store.ErrNotFound means no
// user has k's account key.
func (r *reader) read(ctx context.Context, k store.AuthHost) (store.UserHostHeld, error) {
	start := time.Now()
	op := r.g.do(readOp{ctx: ctx, key: k})
	r.wait.Observe(time.Since(start).Seconds())
	if op.err == nil && !op.found.UserFound {
		return op.found, store.ErrNotFound
	}
	return op.found, op.err
}

// runRead reads ops' rows and gives each its own.
func runRead(st Store, timeout time.Duration, ops []*groupOp[readOp]) {
	if len(ops) == 1 {
		op := &ops[0].item
		op.found, op.err = readOne(op.ctx, st, op.key)
		return
	}
	keys := make([]store.AuthHost, len(ops))
	for i, op := range ops {
		keys[i] = op.item.key
	}
	// The read serves every waiter: the leader's own deadline must not cut
	// it short.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ops[0].item.ctx), timeout)
	found, err := st.UserHostHeldList(ctx, keys, maxInProgressListed)
	cancel()
	for i, op := range ops {
		if err != nil {
			op.item.err = err
		} else {
			op.item.found = found[i]
		}
	}
}

// readOne is a lone request's read: one joined query.
func readOne(ctx context.Context, st Store, k store.AuthHost) (store.UserHostHeld, error) {
	var f store.UserHostHeld
	var err error
	if k.WantHeld {
		f, err = st.UserHostHeldGet(ctx, k.Auth, k.HostID, maxInProgressListed)
	} else {
		f, err = st.UserHostGet(ctx, k.Auth, k.HostID)
	}
	if errors.Is(err, store.ErrNotFound) {
		return f, nil
	}
	f.UserFound = err == nil
	return f, err
}
