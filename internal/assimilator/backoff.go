package assimilator

import "time"

// The retry schedule of a job whose handler failed: RetryMin after the first
// failure, doubling with each further one, never more than RetryMax.
const (
	RetryMin = 10 * time.Second
	RetryMax = time.Hour
)

// retryDelay is the pause after a job's failures-th consecutive failure.
// r in [0, 1) shortens it by up to a fifth, so jobs that failed together
// (a handler outage) do not all come back in the same pass; the jitter only
// shortens, so the schedule's bounds hold.
func retryDelay(failures int, r float64) time.Duration {
	d := RetryMax
	// 10 s << 9 is already past an hour; the bound also keeps the shift
	// from overflowing.
	if shift := max(failures, 1) - 1; shift < 16 {
		d = min(RetryMin<<shift, RetryMax)
	}
	r = min(max(r, 0), 1)
	return d - time.Duration(float64(d/5)*r)
}

// retryState is one job's place in its back-off.
type retryState struct {
	failures int
	next     time.Time
	// sweep is the sweep in which the job was last seen READY.
	sweep uint64
}

// backoff remembers, in memory, the jobs whose handler failed and when each
// may be tried again. The jobs stay READY in the database: a restart only
// means they are tried again at once. Not safe for concurrent use; one pass
// runs at a time.
type backoff struct {
	jobs  map[int64]*retryState
	sweep uint64
	rand  func() float64
}

func newBackoff(rand func() float64) *backoff {
	return &backoff{jobs: map[int64]*retryState{}, rand: rand}
}

// waiting records that job id was seen READY and reports whether it is
// still backing off at now.
func (b *backoff) waiting(id int64, now time.Time) bool {
	st, ok := b.jobs[id]
	if !ok {
		return false
	}
	st.sweep = b.sweep
	return now.Before(st.next)
}

// fail records a failure of job id at now and returns the pause before its
// next try.
func (b *backoff) fail(id int64, now time.Time) (time.Duration, int) {
	st, ok := b.jobs[id]
	if !ok {
		st = &retryState{}
		b.jobs[id] = st
	}
	st.failures++
	st.sweep = b.sweep
	d := retryDelay(st.failures, b.rand())
	st.next = now.Add(d)
	return d, st.failures
}

// forget drops job id: it is done, or no longer ours.
func (b *backoff) forget(id int64) { delete(b.jobs, id) }

// endSweep is called when the scan has gone through every READY job once
// since the last call: a job not seen meanwhile left READY some other way
// (an operator, another process) and is forgotten, so the map cannot grow
// without bound.
func (b *backoff) endSweep() {
	for id, st := range b.jobs {
		if st.sweep != b.sweep {
			delete(b.jobs, id)
		}
	}
	b.sweep++
}

func (b *backoff) len() int { return len(b.jobs) }
