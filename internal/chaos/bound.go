package chaos

import (
	"fmt"
	"math"
)

// The memory bound of the load run: the samples after a warm-up, the
// database cut and the time to settle after it left out, are split in
// three by count; the peak of the last third may exceed the peak of the
// middle third by boundGrowth plus an absolute slack (allocator and GC
// noise at a few MB, a burst of connection goroutines): more is growth
// that would not stop.
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
	middle, last float64 // the peaks of the two thirds (NaN: no sample)
	ok           bool
	note         string
}

// check compares the peak of value over the last third of the window's
// samples with the middle third's, allowing boundGrowth plus slack. Too
// few samples fail: nothing was shown.
func (w boundWindow) check(xs []memSample, what string, value func(memSample) float64, slack float64) growth {
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
	for _, v := range vs[len(vs)-2*n : len(vs)-n] {
		g.middle = nanMax(g.middle, v)
	}
	for _, v := range vs[len(vs)-n:] {
		g.last = nanMax(g.last, v)
	}
	if g.last > g.middle*(1+boundGrowth)+slack {
		g.note = fmt.Sprintf("%s grew: last third's peak %.0f over middle third's %.0f", what, g.last, g.middle)
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

// DaemonMemory is one daemon's memory and goroutines over the load: the
// first, peak and last samples, and whether they stayed bounded.
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
	CPUSeconds      float64  `json:"cpu_seconds"`
	Samples         int      `json:"samples"`
	Bounded         bool     `json:"bounded"`
	Notes           []string `json:"notes,omitempty"`
}

// summarize makes a daemon's DaemonMemory from its samples and checks
// its RSS, heap and goroutines against w.
func summarize(xs []memSample, w boundWindow) DaemonMemory {
	var d DaemonMemory
	d.Samples = len(xs)
	measures := []struct {
		what                string
		value               func(memSample) float64
		slack               float64
		first, peak, last   *int64
		firstG, peakG, lstG *int
	}{
		{what: "rss", value: func(m memSample) float64 { return m.rss }, slack: boundSlackBytes,
			first: &d.RSSFirst, peak: &d.RSSPeak, last: &d.RSSLast},
		{what: "heap_inuse", value: func(m memSample) float64 { return m.heap }, slack: boundSlackBytes,
			first: &d.HeapFirst, peak: &d.HeapPeak, last: &d.HeapLast},
		{what: "goroutines", value: func(m memSample) float64 { return m.goroutines }, slack: boundSlackGo,
			firstG: &d.GoroutinesFirst, peakG: &d.GoroutinesPeak, lstG: &d.GoroutinesLast},
	}
	d.Bounded = true
	for _, ms := range measures {
		first, peak, last := math.NaN(), math.NaN(), math.NaN()
		for _, x := range xs {
			v := ms.value(x)
			if math.IsNaN(v) {
				continue
			}
			if math.IsNaN(first) {
				first = v
			}
			peak, last = nanMax(peak, v), v
		}
		if ms.first != nil {
			*ms.first, *ms.peak, *ms.last = int64OrZero(first), int64OrZero(peak), int64OrZero(last)
		} else {
			*ms.firstG, *ms.peakG, *ms.lstG = int(int64OrZero(first)), int(int64OrZero(peak)), int(int64OrZero(last))
		}
		if g := w.check(xs, ms.what, ms.value, ms.slack); !g.ok {
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
