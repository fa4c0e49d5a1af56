package chaos

import (
	"fmt"
	"math"
	"slices"
)

// The memory bound of the load run: the samples after a warm-up, the
// database cut and the time to settle after it left out, are split in
// three by count; the peak of the last third may exceed the peak of the
// middle third by boundGrowth plus an absolute slack (allocator and GC
// noise at a few MB, a few goroutines coming and going): more is growth
// that would not stop.
//
// The heap in use is judged by the low tenth of each third, not the peak:
// between two collections it holds the garbage made since the first, and
// Go lets that grow to as much again as the live heap, so its peaks follow
// how fast a daemon allocates: a burst of requests, or a full batch after
// the database cut. Right after a collection it holds the live heap, which
// is what a leak raises, troughs included. A 90 s run failed the peak rule
// with the scheduler's heap peaking at 21.9 MB in the middle third and
// 42.0 MB in the last, while the machine ran other tests and requests
// piled up. RSS keeps the peak rule: it is what the machine pays.
//
// Goroutines are judged differently, since their count follows the load:
// a Go server serves each connection on a goroutine of its own, idle
// keep-alive connections included, and a request in flight holds a second
// one (net/http's background read); the MySQL driver keeps one per
// database connection. When requests take longer (the database slows as
// its tables grow, or pauses) the hosts, asking at the same rate, hold
// more requests in flight and open more connections; when they speed up,
// both fall again. A 10-minute run failed the peak rule on 145 goroutines
// in the middle third and 213 in the last, with nothing lost and no memory
// grown: that was load. So goroutines are counted net of open sockets
// (which takes out the connections, idle or not), and the low tenth of the
// last third's counts is compared with the middle third's: a leak (a
// timer, a worker or a request that never ends) raises the count at every
// moment, troughs included, while load raises only its peaks.
const (
	warmUpShare     = 0.20
	settleAfterCut  = 30.0 // seconds left out after the connections return
	boundGrowth     = 0.20
	boundSlackBytes = 8 << 20
	boundSlackGo    = 20
	// minBoundSamples is the fewest samples a third may have for a verdict.
	minBoundSamples = 2
)

// boundWindow is the part of the run the bound check reads, in seconds
// since the load began, and the part of it left out.
type boundWindow struct {
	from, to         float64
	skipFrom, skipTo float64
}

// newBoundWindow is the window of a run of duration seconds whose
// database was cut at cutAt for down seconds (down 0: no cut).
func newBoundWindow(duration, cutAt, down float64) boundWindow {
	w := boundWindow{from: warmUpShare * duration, to: duration}
	if down > 0 {
		w.skipFrom, w.skipTo = cutAt, cutAt+down+settleAfterCut
	}
	return w
}

// growth is the verdict on one measure of one daemon.
type growth struct {
	middle, last float64 // the statistic of the two thirds (NaN: no sample)
	ok           bool
	note         string
}

// statistic sums up one third of a measure's samples for check: peakOf
// for RSS, floorOf for the heap and goroutines (see the bound above).
type statistic struct {
	name string
	of   func(vs []float64) float64
}

// floorShare is the share of a third's samples floorOf leaves below it:
// goroutines and sockets are read a moment apart, and when hundreds of
// connections open or close in between a sample is off by dozens either
// way; the lowest tenth absorbs such samples and still sits in the troughs
// between bursts of load.
const floorShare = 0.10

var (
	peakOf = statistic{"peak", func(vs []float64) float64 {
		m := math.NaN()
		for _, v := range vs {
			m = nanMax(m, v)
		}
		return m
	}}
	floorOf = statistic{"low tenth", func(vs []float64) float64 {
		s := slices.Sorted(slices.Values(vs))
		return s[int(floorShare*float64(len(s)))]
	}}
)

// check compares stat of value over the last third of the window's
// samples with the middle third's, allowing boundGrowth plus slack. Too
// few samples fail: nothing was shown.
func (w boundWindow) check(xs []memSample, what string, value func(memSample) float64, slack float64, stat statistic) growth {
	var vs []float64
	for _, x := range xs {
		v := value(x)
		if math.IsNaN(v) || x.at < w.from || x.at > w.to || (x.at >= w.skipFrom && x.at < w.skipTo) {
			continue
		}
		vs = append(vs, v)
	}
	g := growth{middle: math.NaN(), last: math.NaN()}
	n := len(vs) / 3
	if n < minBoundSamples {
		g.note = fmt.Sprintf("%s: %d samples outside the warm-up and the cut, want %d (run longer)", what, len(vs), 3*minBoundSamples)
		return g
	}
	g.middle, g.last = stat.of(vs[len(vs)-2*n:len(vs)-n]), stat.of(vs[len(vs)-n:])
	// A count net of sockets a little below zero is the two reads' skew:
	// the growth allowed is measured from zero then.
	if g.last > max(g.middle, 0)*(1+boundGrowth)+slack {
		g.note = fmt.Sprintf("%s grew: last third's %s %.0f over middle third's %.0f", what, stat.name, g.last, g.middle)
		return g
	}
	g.ok = true
	return g
}

func nanMax(a, b float64) float64 {
	if math.IsNaN(a) || b > a {
		return b
	}
	return a
}

// goroutinesNet is a sample's goroutines less its open sockets (see the
// bound above); its goroutines alone when the sockets are unknown.
func goroutinesNet(m memSample) float64 {
	if math.IsNaN(m.sockets) {
		return m.goroutines
	}
	return m.goroutines - m.sockets
}

// DaemonMemory is one daemon's memory, goroutines and open sockets over the
// load: the first, peak and last samples, and whether memory and
// goroutines net of sockets stayed bounded. Sockets are reported, not
// judged: how many connections are open is the load's to decide.
type DaemonMemory struct {
	RSSFirst        int64    `json:"rss_first_bytes"`
	RSSPeak         int64    `json:"rss_peak_bytes"`
	RSSLast         int64    `json:"rss_last_bytes"`
	HeapFirst       int64    `json:"heap_inuse_first_bytes"`
	HeapPeak        int64    `json:"heap_inuse_peak_bytes"`
	HeapLast        int64    `json:"heap_inuse_last_bytes"`
	GoroutinesFirst int      `json:"goroutines_first"`
	GoroutinesPeak  int      `json:"goroutines_peak"`
	GoroutinesLast  int      `json:"goroutines_last"`
	SocketsFirst    int      `json:"sockets_first"`
	SocketsPeak     int      `json:"sockets_peak"`
	SocketsLast     int      `json:"sockets_last"`
	CPUSeconds      float64  `json:"cpu_seconds"`
	Samples         int      `json:"samples"`
	Bounded         bool     `json:"bounded"`
	Notes           []string `json:"notes,omitempty"`
}

// span is the first, peak and last value of one measure over the samples.
type span struct{ first, peak, last int64 }

func spanOf(xs []memSample, value func(memSample) float64) span {
	first, peak, last := math.NaN(), math.NaN(), math.NaN()
	for _, x := range xs {
		v := value(x)
		if math.IsNaN(v) {
			continue
		}
		if math.IsNaN(first) {
			first = v
		}
		peak, last = nanMax(peak, v), v
	}
	return span{int64OrZero(first), int64OrZero(peak), int64OrZero(last)}
}

// summarize makes a daemon's DaemonMemory from its samples and checks its
// RSS, heap and goroutines net of sockets against w.
func summarize(xs []memSample, w boundWindow) DaemonMemory {
	d := DaemonMemory{Samples: len(xs)}
	rss := spanOf(xs, func(m memSample) float64 { return m.rss })
	heap := spanOf(xs, func(m memSample) float64 { return m.heap })
	gor := spanOf(xs, func(m memSample) float64 { return m.goroutines })
	sock := spanOf(xs, func(m memSample) float64 { return m.sockets })
	d.RSSFirst, d.RSSPeak, d.RSSLast = rss.first, rss.peak, rss.last
	d.HeapFirst, d.HeapPeak, d.HeapLast = heap.first, heap.peak, heap.last
	d.GoroutinesFirst, d.GoroutinesPeak, d.GoroutinesLast = int(gor.first), int(gor.peak), int(gor.last)
	d.SocketsFirst, d.SocketsPeak, d.SocketsLast = int(sock.first), int(sock.peak), int(sock.last)

	judged := []struct {
		what  string
		value func(memSample) float64
		slack float64
		stat  statistic
	}{
		{"rss", func(m memSample) float64 { return m.rss }, boundSlackBytes, peakOf},
		{"heap_inuse", func(m memSample) float64 { return m.heap }, boundSlackBytes, floorOf},
		{"goroutines net of sockets", goroutinesNet, boundSlackGo, floorOf},
	}
	d.Bounded = true
	for _, j := range judged {
		if g := w.check(xs, j.what, j.value, j.slack, j.stat); !g.ok {
			d.Bounded = false
			d.Notes = append(d.Notes, g.note)
		}
	}
	return d
}

func int64OrZero(v float64) int64 {
	if math.IsNaN(v) {
		return 0
	}
	return int64(v)
}
