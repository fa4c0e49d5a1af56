package assimilator

import (
	"testing"
	"time"
)

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		failures int
		r        float64
		want     time.Duration
	}{
		{"first failure waits the minimum", 1, 0, 10 * time.Second},
		{"zero failures count as one", 0, 0, 10 * time.Second},
		{"second failure doubles", 2, 0, 20 * time.Second},
		{"third failure doubles again", 3, 0, 40 * time.Second},
		{"ninth failure is still under the cap", 9, 0, 2560 * time.Second},
		{"tenth failure is capped at an hour", 10, 0, time.Hour},
		{"a thousand failures stay at an hour", 1000, 0, time.Hour},
		{"jitter shortens by up to a fifth", 1, 0.5, 9 * time.Second},
		{"jitter near one shortens by nearly a fifth", 2, 0.999, 20*time.Second - time.Duration(0.999*float64(4*time.Second))},
		{"jitter is clamped above", 1, 7, 8 * time.Second},
		{"jitter is clamped below", 1, -1, 10 * time.Second},
		{"jitter at the cap never exceeds it", 50, 0.25, time.Hour - time.Hour/20},
	} {
		if got := retryDelay(tc.failures, tc.r); got != tc.want {
			t.Errorf("%s: retryDelay(%d, %v) = %s, want %s", tc.name, tc.failures, tc.r, got, tc.want)
		}
	}
}

func TestBackoffTracksJobs(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	b := newBackoff(func() float64 { return 0 })
	if b.waiting(1, now) {
		t.Fatal("waiting(1) before any failure = true, want false")
	}
	if d, n := b.fail(1, now); d != 10*time.Second || n != 1 {
		t.Fatalf("first fail = %s, %d; want 10s, 1", d, n)
	}
	for _, tc := range []struct {
		at   time.Duration
		want bool
	}{{0, true}, {9 * time.Second, true}, {10 * time.Second, false}} {
		if got := b.waiting(1, now.Add(tc.at)); got != tc.want {
			t.Errorf("waiting(1) %s after the failure = %v, want %v", tc.at, got, tc.want)
		}
	}
	if d, n := b.fail(1, now.Add(10*time.Second)); d != 20*time.Second || n != 2 {
		t.Errorf("second fail = %s, %d; want 20s, 2", d, n)
	}
	b.fail(2, now)
	// Sweep 0 saw both; in sweep 1 only job 1 is seen, so job 2 (gone from
	// the queue) is forgotten at its end.
	b.endSweep()
	b.waiting(1, now)
	b.endSweep()
	if b.len() != 1 || !b.waiting(1, now) {
		t.Errorf("after a sweep that saw only job 1: %d jobs tracked, want job 1 only", b.len())
	}
	b.forget(1)
	if b.len() != 0 {
		t.Errorf("after forget: %d jobs tracked, want 0", b.len())
	}
}
