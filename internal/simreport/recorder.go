package simreport

import (
	"math"
	"sync"
)

// DefaultInterval is the series interval NewRecorder uses when given none:
// one hour, fine enough to see a scheduling period's swings over a run of
// simulated days.
const DefaultInterval = 3600.0

// maxBuckets bounds the series and the per-minute RPC counts, so a stray
// timestamp (a clock in nanoseconds, +Inf) cannot exhaust memory; events
// beyond it are counted in the last bucket.
const maxBuckets = 1 << 20

// counters is one project's event tallies.
type counters struct {
	target       float64
	cpu          float64
	rpcs         int64
	rpcFailures  int64
	workFetched  float64
	tasksFetched int64
	completed    int64
	reported     int64
	missed       int64
	noWork       int64
	shortfalls   map[string]int64
}

// Recorder accumulates a run's events and builds its Report. It is safe for
// concurrent use: the live client calls it from one goroutine per host, the
// simulator millions of times from one. A call takes a mutex and adds to
// fixed per-project arrays; only the series and the per-minute RPC counts
// grow, and only when an event's time passes their end.
//
// Every method taking a project takes its index in the names given to
// NewRecorder; any other index is a programmer's mistake and panics.
type Recorder struct {
	mu        sync.Mutex
	names     []string
	interval  float64
	projects  []counters
	available float64
	// buckets holds the series: CPU seconds of project p in interval i at
	// buckets[i*len(names)+p]. Interval i covers (i*interval, (i+1)*interval].
	buckets []float64
	// rpcMinutes counts RPCs started in minute m of the clock at index m.
	rpcMinutes []int64
	lastAt     float64 // latest event time seen, for a report without a duration
}

// NewRecorder returns a Recorder for the named projects (their order is the
// order of Report.Projects and of every Sample's shares), sampling shares
// over time every interval seconds (DefaultInterval when interval <= 0).
func NewRecorder(projects []string, interval float64) *Recorder {
	if !(interval > 0) || math.IsInf(interval, 0) {
		interval = DefaultInterval
	}
	names := make([]string, len(projects))
	copy(names, projects)
	return &Recorder{
		names:    names,
		interval: interval,
		projects: make([]counters, len(projects)),
	}
}

// AddTarget adds one host attachment's weight to a project's target share:
// the project's share fraction on that host x the host's CPUs x the fraction
// of time the host is on. ResourceShare is the projects' targets normalised.
func (r *Recorder) AddTarget(project int, weight float64) {
	if !finitePositive(weight) {
		return
	}
	r.mu.Lock()
	r.projects[project].target += weight
	r.mu.Unlock()
}

// AddAvailable adds CPU seconds of capacity the hosts had while on; CPU
// utilisation and idle time are measured against it.
func (r *Recorder) AddAvailable(cpuSeconds float64) {
	if !finitePositive(cpuSeconds) {
		return
	}
	r.mu.Lock()
	r.available += cpuSeconds
	r.mu.Unlock()
}

// CPU records cpuSeconds computed for a project, attributed to the series
// interval containing at. An event exactly at an interval's end belongs to
// that interval, since the CPU was computed before it. Callers split long
// spans at interval ends, or report CPU per scheduling event, so that the
// series is as fine as they need.
func (r *Recorder) CPU(project int, at, cpuSeconds float64) {
	if !finitePositive(cpuSeconds) {
		return
	}
	i := r.bucketIndex(at)
	r.mu.Lock()
	r.projects[project].cpu += cpuSeconds
	n := len(r.names)
	if need := (i + 1) * n; need > len(r.buckets) {
		r.buckets = grow(r.buckets, need)
	}
	r.buckets[i*n+project] += cpuSeconds
	r.seen(at)
	r.mu.Unlock()
}

// RPC records a scheduler RPC to a project started at time at; failed means
// it got no usable reply.
func (r *Recorder) RPC(project int, at float64, failed bool) {
	m := minuteIndex(at)
	r.mu.Lock()
	p := &r.projects[project]
	p.rpcs++
	if failed {
		p.rpcFailures++
	}
	if m >= len(r.rpcMinutes) {
		r.rpcMinutes = growInt(r.rpcMinutes, m+1)
	}
	r.rpcMinutes[m]++
	r.seen(at)
	r.mu.Unlock()
}

// Fetched records tasks received from a project in one reply and their
// estimated CPU seconds in all.
func (r *Recorder) Fetched(project int, tasks int, estCPUSeconds float64) {
	if !finitePositive(estCPUSeconds) {
		estCPUSeconds = 0
	}
	r.mu.Lock()
	p := &r.projects[project]
	p.tasksFetched += int64(max(tasks, 0))
	p.workFetched += estCPUSeconds
	r.mu.Unlock()
}

// NoWork records a work request to a project that brought no task.
func (r *Recorder) NoWork(project int) {
	r.mu.Lock()
	r.projects[project].noWork++
	r.mu.Unlock()
}

// Shortfall records a work request to a project that the scheduler sent
// less than asked, and why (a reason of send_shortfall_total).
func (r *Recorder) Shortfall(project int, reason string) {
	r.mu.Lock()
	p := &r.projects[project]
	if p.shortfalls == nil {
		p.shortfalls = map[string]int64{}
	}
	p.shortfalls[reason]++
	r.mu.Unlock()
}

// Completed records a task of a project whose computation finished.
func (r *Recorder) Completed(project int) {
	r.mu.Lock()
	r.projects[project].completed++
	r.mu.Unlock()
}

// Reported records a task the project's scheduler acknowledged; late means
// it was reported after its deadline, which counts as a deadline missed.
func (r *Recorder) Reported(project int, late bool) {
	r.mu.Lock()
	p := &r.projects[project]
	p.reported++
	if late {
		p.missed++
	}
	r.mu.Unlock()
}

// Missed records a deadline missed by a task that was never reported in
// time: unfinished past its deadline when the run ended, or aborted because
// of it. A task reported late is counted by Reported instead.
func (r *Recorder) Missed(project int) {
	r.mu.Lock()
	r.projects[project].missed++
	r.mu.Unlock()
}

// seen notes an event's time; r.mu is held.
func (r *Recorder) seen(at float64) {
	if at > r.lastAt && !math.IsInf(at, 1) {
		r.lastAt = at
	}
}

// boundarySlack is how far past an interval's end, in intervals, a time
// still counts as at its end: a caller's k*interval may come back from the
// division as k plus a rounding error, and must not spill into interval k.
const boundarySlack = 1e-9

// bucketIndex is the series interval holding time at: interval i covers
// (i*interval, (i+1)*interval], times at or before 0 (and NaN) go to 0.
func (r *Recorder) bucketIndex(at float64) int {
	if !(at > 0) {
		return 0
	}
	f := math.Ceil(at/r.interval-boundarySlack) - 1
	if !(f < maxBuckets) {
		return maxBuckets - 1
	}
	return max(int(f), 0)
}

// minuteIndex is the minute of the clock an RPC at time at falls in.
func minuteIndex(at float64) int {
	if !(at > 0) {
		return 0
	}
	f := math.Floor(at / 60)
	if !(f < maxBuckets) {
		return maxBuckets - 1
	}
	return int(f)
}

// grow extends s with zeros to length n, at least doubling its capacity so
// that extending the series one interval at a time stays amortised O(1).
func grow(s []float64, n int) []float64 {
	if n <= cap(s) {
		return s[:n]
	}
	t := make([]float64, n, max(n, 2*cap(s)))
	copy(t, s)
	return t
}

// growInt is grow for counts.
func growInt(s []int64, n int) []int64 {
	if n <= cap(s) {
		return s[:n]
	}
	t := make([]int64, n, max(n, 2*cap(s)))
	copy(t, s)
	return t
}

// finitePositive reports whether x is a usable amount: > 0 and finite.
func finitePositive(x float64) bool {
	return x > 0 && !math.IsInf(x, 1)
}
