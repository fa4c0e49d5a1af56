package clientpolicy

import "slices"

// medianHistory is how many of a project's latest task runtimes the median is taken over. It bounds
// the memory a long-lived host spends per project; an odd number so the median is one observed value.
const medianHistory = 101

// runtimeStats summarises the CPU seconds a project's completed tasks took on this host, for the
// seed-004 strategies, which predict the next task's cost from the past ones.
//
// The average covers every completion since the host started (a running mean, O(1) memory). The median
// covers the latest medianHistory completions: it is recomputed once per completion, as the seed notes,
// so that reading it while scheduling costs nothing.
type runtimeStats struct {
	n      int64     // completions recorded
	mean   float64   // running mean of every completion
	window []float64 // ring buffer of the latest completions, at most medianHistory long
	next   int       // where the next completion goes in window once it is full
	median float64   // median of window, kept current by add
}

// add records the CPU seconds of a completed task. Negative or NaN inputs are a caller's bug and are
// ignored rather than allowed to poison every later prediction.
func (s *runtimeStats) add(cpuSeconds float64) {
	if !(cpuSeconds >= 0) {
		return
	}
	s.n++
	s.mean += (cpuSeconds - s.mean) / float64(s.n)
	if len(s.window) < medianHistory {
		s.window = append(s.window, cpuSeconds)
	} else {
		s.window[s.next] = cpuSeconds
		s.next = (s.next + 1) % medianHistory
	}
	s.median = medianOf(s.window)
}

// value is the statistic the strategy asked for, or fallback while nothing has completed yet (the
// caller passes the mean estimate of the project's tasks then). An unknown stat reads as the average,
// the configuration default.
func (s *runtimeStats) value(stat RuntimeStat, fallback float64) float64 {
	if s.n == 0 {
		return fallback
	}
	if stat == StatMedian {
		return s.median
	}
	return s.mean
}

// count is how many completions have been recorded.
func (s *runtimeStats) count() int64 { return s.n }

// medianOf is the median of xs (the mean of the two middle values for an even length), 0 for none.
// It sorts a copy: the window is small and completions are rare next to scheduling decisions.
func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sorted := slices.Clone(xs)
	slices.Sort(sorted)
	mid := len(sorted) / 2
	if len(sorted)%2 == 1 {
		return sorted[mid]
	}
	return (sorted[mid-1] + sorted[mid]) / 2
}
