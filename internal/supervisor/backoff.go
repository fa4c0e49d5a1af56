package supervisor

import "time"

// backoff is the pause before restarting a daemon: Min after a run that
// lasted at least Stable, doubling with each quick failure up to Max. A
// daemon that crashes at once (bad configuration, database down) is
// therefore retried ever more slowly, while one that fails after a long
// healthy run is back after Min.
type backoff struct {
	min, max, stable time.Duration
	cur              time.Duration
}

func newBackoff(min, max, stable time.Duration) *backoff {
	return &backoff{min: min, max: max, stable: stable, cur: min}
}

// next returns the pause before the next start, given how long the process
// that just exited had been up.
func (b *backoff) next(uptime time.Duration) time.Duration {
	if uptime >= b.stable {
		b.cur = b.min
	}
	d := b.cur
	b.cur = min(b.cur*2, b.max)
	return d
}
