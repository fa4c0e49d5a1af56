package chaos

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// series samples f every 2 s over a run of duration seconds.
func series(duration float64, f func(at float64) float64) []memSample {
	var xs []memSample
	for at := 0.0; at <= duration; at += 2 {
		v := f(at)
		xs = append(xs, memSample{at: at, rss: v, heap: v, goroutines: math.NaN()})
	}
	return xs
}

func TestBoundCheck(t *testing.T) {
	const mb = 1 << 20
	rng := rand.New(rand.NewPCG(1, 2))
	const duration, cutAt, down = 300.0, 150.0, 10.0
	tests := []struct {
		name   string
		f      func(at float64) float64
		ok     bool
		reason string
	}{
		{"flat", func(float64) float64 { return 40 * mb }, true, ""},
		{"noisy around a level", func(float64) float64 { return 40*mb + rng.Float64()*6*mb }, true, ""},
		{"a start-up climb in the warm-up", func(at float64) float64 { return 20*mb + min(at, 50)*0.5*mb }, true, ""},
		{"a spike during the cut and its settling", func(at float64) float64 {
			if at >= cutAt && at < cutAt+down+settleAfterCut {
				return 200 * mb
			}
			return 40 * mb
		}, true, ""},
		// The rule sees growth of over 20% + 8 MB from one third to the next:
		// here 1 MB/s, 66 MB across the last third.
		{"leaking 1 MB a second", func(at float64) float64 { return 20*mb + at*mb }, false, "grew"},
		{"a step up in the last third", func(at float64) float64 {
			if at > 260 {
				return 80 * mb
			}
			return 40 * mb
		}, false, "grew"},
	}
	w := newBoundWindow(duration, cutAt, down)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := w.check(series(duration, tc.f), "rss", func(m memSample) float64 { return m.rss }, boundSlackBytes, peakOf)
			if g.ok != tc.ok || !strings.Contains(g.note, tc.reason) {
				t.Errorf("check() = ok %v, note %q (middle %.0f, last %.0f); want ok %v, note with %q",
					g.ok, g.note, g.middle, g.last, tc.ok, tc.reason)
			}
		})
	}
}

func TestBoundCheckGoroutinesSlack(t *testing.T) {
	w := newBoundWindow(300, 150, 10)
	get := func(m memSample) float64 { return m.goroutines }
	xs := series(300, func(float64) float64 { return 0 })
	for i := range xs {
		xs[i].goroutines = 14
		if xs[i].at > 250 {
			xs[i].goroutines = 30 // a few connections more: within 20% + 20
		}
	}
	if g := w.check(xs, "goroutines", get, boundSlackGo, floorOf); !g.ok {
		t.Errorf("14 → 30 goroutines: %s, want bounded", g.note)
	}
	for i := range xs {
		xs[i].goroutines = 14 + 2*xs[i].at // two more every second: a leak
	}
	if g := w.check(xs, "goroutines", get, boundSlackGo, floorOf); g.ok {
		t.Errorf("two goroutines a second: bounded (middle %.0f, last %.0f), want grew", g.middle, g.last)
	}
}

// serverSeries models a scheduler's samples over a 10-minute load: base
// goroutines of its own, idle keep-alive connections (one goroutine and one
// socket each), requests in flight at each sample (a connection's socket
// and goroutine plus net/http's background read: two goroutines), and ten
// database connections (a socket and the driver's goroutine each).
func serverSeries(base func(at float64) float64, inFlight func(at float64) float64) []memSample {
	const mb = 1 << 20
	var xs []memSample
	idle := 0.0
	for at := 0.0; at <= 600; at += 2 {
		f := inFlight(at)
		// Connections opened for a burst stay open (idle) a while.
		idle = max(idle*0.95, f, 100)
		xs = append(xs, memSample{at: at, rss: 40 * mb, heap: 20 * mb,
			goroutines: base(at) + idle + 2*f + 10, sockets: idle + f + 10})
	}
	return xs
}

// bursts is a load whose requests in flight mostly stay low, with a burst
// every 50 s whose height grows over the run, half as high again at the
// end as in the middle (the run peaked at 145 goroutines in the
// middle third and 213 in the last): the database slows as its tables
// grow, and the hosts keep asking at the same rate.
func bursts(at float64) float64 {
	if int(at)%50 < 6 {
		return max(10, at/2-60)
	}
	return float64(int(at) % 7)
}

func TestBoundAcceptsLoadAndRefusesLeaks(t *testing.T) {
	w := newBoundWindow(600, 300, 10)
	flat := func(float64) float64 { return 15 }
	tests := []struct {
		name string
		xs   []memSample
		ok   bool
	}{
		{"steady load", serverSeries(flat, func(at float64) float64 { return float64(int(at) % 7) }), true},
		{"load whose bursts grow (the issue's failed run)", serverSeries(flat, bursts), true},
		{"a goroutine leaked every 2 s, no load", serverSeries(func(at float64) float64 { return 15 + at/2 },
			func(float64) float64 { return 0 }), false},
		{"a goroutine leaked every 2 s under growing bursts", serverSeries(func(at float64) float64 { return 15 + at/2 },
			bursts), false},
		{"requests never finishing (in flight only grows)", serverSeries(flat, func(at float64) float64 { return at / 2 }), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := summarize(tc.xs, w)
			if d.Bounded != tc.ok {
				t.Errorf("summarize() bounded %v (goroutines %d/%d/%d, sockets %d/%d/%d, notes %q); want %v", d.Bounded,
					d.GoroutinesFirst, d.GoroutinesPeak, d.GoroutinesLast, d.SocketsFirst, d.SocketsPeak, d.SocketsLast,
					d.Notes, tc.ok)
			}
		})
	}
}

// heapSeries models a daemon's heap in use, sampled every 2 s over 300 s:
// a base (its caches, and anything leaked), the live data of the work in
// hand at that moment (requests in flight, a batch), and the garbage made
// since the last collection, which Go lets grow to as much again as the
// live heap: the sample falls somewhere on that sawtooth.
func heapSeries(base, work func(at float64) float64) []memSample {
	var xs []memSample
	for i, at := 0, 0.0; at <= 300; i, at = i+1, at+2 {
		live := base(at) + work(at)
		garbage := live * float64(i%5) / 4
		xs = append(xs, memSample{at: at, rss: 60 << 20, heap: live + garbage, goroutines: 10, sockets: 0})
	}
	return xs
}

func TestBoundHeapJudgedByItsFloor(t *testing.T) {
	const mb = 1 << 20
	w := newBoundWindow(300, 150, 10)
	flat := func(float64) float64 { return 15 * mb }
	leaking := func(at float64) float64 { return 15*mb + at*mb } // 1 MB a second
	// Bursts of work every 30 s, 4 MB in the middle third and 14 MB at
	// the end (a full batch after the cut, requests piling up on a busy
	// machine), none between them.
	bursts := func(at float64) float64 {
		if int(at)%30 >= 8 {
			return 0
		}
		if at > 240 {
			return 14 * mb
		}
		return 4 * mb
	}
	none := func(float64) float64 { return 0 }
	tests := []struct {
		name       string
		base, work func(at float64) float64
		ok         bool
	}{
		{"steady", flat, none, true},
		{"bursts of work, bigger at the end", flat, bursts, true},
		{"leaking 1 MB a second", leaking, none, false},
		{"leaking 1 MB a second under bursts", leaking, bursts, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if d := summarize(heapSeries(tc.base, tc.work), w); d.Bounded != tc.ok {
				t.Errorf("summarize() bounded %v (heap %d/%d/%d, notes %q); want %v", d.Bounded,
					d.HeapFirst, d.HeapPeak, d.HeapLast, d.Notes, tc.ok)
			}
		})
	}
	// The peak rule refuses the bigger bursts: the case above tells the
	// rules apart.
	xs := heapSeries(flat, bursts)
	if g := w.check(xs, "heap_inuse", func(m memSample) float64 { return m.heap }, boundSlackBytes, peakOf); g.ok {
		t.Errorf("peak rule on bigger bursts at the end: bounded (middle %.0f, last %.0f), want grew", g.middle, g.last)
	}
}

func TestBoundGoroutinesToleratesSkewBetweenReads(t *testing.T) {
	// The scheduler's samples of a 3-minute run: about 12 goroutines net
	// of sockets in the troughs, hundreds in the bursts, and two samples
	// (-13 in the middle third, 5 in the last) taken while connections
	// came and went between the two reads. Bounded.
	w := newBoundWindow(180, 97, 12)
	nets := []float64{12, 48, 35, 104, 45, 177, 304, 304, 77, 144, 373, 36, 16, 11, 175, 93, 44, 67, 17, 13, 45, 13,
		156, 157, 49, 13, 18, 140, 236, 120, 12, 74, 41, 62, 39, 22, 23, 69, 135, 73, 252, 163, 227, 13, 23, -13, 13,
		12, 13, 12, 11, 63, 35, 184, 65, 15, 58, 156, 105, 222, 147, 206, 273, 202, 16, 202, 90, 110, 115, 84, 186,
		226, 231, 168, 155, 79, 98, 111, 85, 64, 5, 161, 175, 204, 143, 269, 11, 15, 177, 13, 87, 93}
	var xs []memSample
	for i, n := range nets {
		xs = append(xs, memSample{at: float64(2 * i), rss: 1, heap: 1, goroutines: n + 150, sockets: 150})
	}
	if d := summarize(xs, w); !d.Bounded {
		t.Errorf("summarize() of a measured run = not bounded (%q), want bounded", d.Notes)
	}
}

func TestBoundCheckWantsEnoughSamples(t *testing.T) {
	w := newBoundWindow(30, 15, 5) // the cut and its settling cover most of the run
	g := w.check(series(30, func(float64) float64 { return 1 }), "rss", func(m memSample) float64 { return m.rss }, 0, peakOf)
	if g.ok || !strings.Contains(g.note, "run longer") {
		t.Errorf("check() of a 30 s run = ok %v, note %q; want not ok, run longer", g.ok, g.note)
	}
}

func TestSummarizeFirstPeakLast(t *testing.T) {
	xs := []memSample{
		{at: 0, rss: 10, heap: 5, goroutines: math.NaN()},
		{at: 1, rss: 30, heap: 9, goroutines: 20},
		{at: 2, rss: 20, heap: 7, goroutines: 15},
	}
	d := summarize(xs, newBoundWindow(3, 0, 0))
	if d.RSSFirst != 10 || d.RSSPeak != 30 || d.RSSLast != 20 || d.HeapPeak != 9 ||
		d.GoroutinesFirst != 20 || d.GoroutinesPeak != 20 || d.GoroutinesLast != 15 || d.Samples != 3 {
		t.Errorf("summarize() = %+v; want rss 10/30/20, heap peak 9, goroutines 20/20/15, 3 samples", d)
	}
	if d.Bounded {
		t.Error("three samples judged bounded, want too few for a verdict")
	}
}

func TestCounterAddsOverRestarts(t *testing.T) {
	var c counter
	for _, v := range []float64{100, 150, math.NaN(), 170, 20, 50} { // restarted after 170
		c.add(v)
	}
	if c.total != 120 {
		t.Errorf("total = %v, want 120 (50 + 20 + 20 + 30)", c.total)
	}
}
