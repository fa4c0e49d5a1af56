package simreport

import (
	"maps"
	"math"
)

// Report builds the run's report from the events recorded so far. meta
// supplies what the recorder cannot know — Clock, Scenario, Strategy,
// RuntimeStat, Hosts, CPUs, DurationSeconds, WallSeconds — and Report fills
// in IntervalSeconds, Projects, Totals and Series, replacing whatever meta
// held there. When meta.DurationSeconds is 0 the time of the latest event is
// used. The series runs to the end of the duration: intervals without
// computing have all-zero shares and carry the cumulative shares forward.
func (r *Recorder) Report(meta Report) Report {
	r.mu.Lock()
	defer r.mu.Unlock()

	out := meta
	if !(out.DurationSeconds > 0) {
		out.DurationSeconds = r.lastAt
	}
	out.IntervalSeconds = r.interval
	out.Projects = r.projectReports()
	out.Totals = r.totals(out.Projects)
	out.Series = r.series(out.DurationSeconds)
	return out
}

// projectReports turns the tallies into per-project figures; r.mu is held.
func (r *Recorder) projectReports() []ProjectReport {
	var targetSum, cpuSum float64
	for _, p := range r.projects {
		targetSum += p.target
		cpuSum += p.cpu
	}
	out := make([]ProjectReport, len(r.projects))
	for i, p := range r.projects {
		out[i] = ProjectReport{
			Name:               r.names[i],
			ResourceShare:      fraction(p.target, targetSum),
			AchievedShare:      fraction(p.cpu, cpuSum),
			CPUSeconds:         p.cpu,
			RPCs:               p.rpcs,
			RPCFailures:        p.rpcFailures,
			WorkFetchedSeconds: p.workFetched,
			TasksFetched:       p.tasksFetched,
			TasksCompleted:     p.completed,
			TasksReported:      p.reported,
			DeadlinesMissed:    p.missed,
			NoWorkReplies:      p.noWork,
			Shortfalls:         maps.Clone(p.shortfalls),
		}
	}
	return out
}

// totals sums the projects and measures utilisation and RPC peaks; r.mu is
// held.
func (r *Recorder) totals(projects []ProjectReport) Totals {
	var t Totals
	for _, p := range projects {
		t.CPUSeconds += p.CPUSeconds
		t.RPCs += p.RPCs
		t.RPCFailures += p.RPCFailures
		t.WorkFetchedSeconds += p.WorkFetchedSeconds
		t.TasksFetched += p.TasksFetched
		t.TasksCompleted += p.TasksCompleted
		t.TasksReported += p.TasksReported
		t.DeadlinesMissed += p.DeadlinesMissed
		t.NoWorkReplies += p.NoWorkReplies
		t.MaxShareError = max(t.MaxShareError, math.Abs(p.AchievedShare-p.ResourceShare))
	}
	t.AvailableCPUSeconds = r.available
	t.CPUUtilisation = fraction(t.CPUSeconds, r.available)
	if t.CPUUtilisation > 1 && t.CPUUtilisation < 1+1e-9 {
		// CPU and capacity are sums of the same seconds added in different
		// orders; only rounding puts one above the other. A real excess
		// (a caller recording CPU a host did not have) stays visible.
		t.CPUUtilisation = 1
	}
	t.IdleCPUSeconds = max(r.available-t.CPUSeconds, 0)
	t.IdleFraction = fraction(t.IdleCPUSeconds, r.available)
	var peak int64
	for _, n := range r.rpcMinutes {
		peak = max(peak, n)
	}
	t.MaxRPCsPerMinute = float64(peak)
	return t
}

// series turns the interval buckets into samples up to duration; r.mu is
// held. The last sample ends at the duration when that falls inside it.
func (r *Recorder) series(duration float64) []Sample {
	n := len(r.names)
	if n == 0 {
		return []Sample{}
	}
	count := len(r.buckets) / n
	if duration > 0 {
		count = max(count, min(int(math.Ceil(duration/r.interval)), maxBuckets))
	}
	out := make([]Sample, count)
	sofar := make([]float64, n)
	var sofarSum float64
	for i := range out {
		var row []float64
		if (i+1)*n <= len(r.buckets) {
			row = r.buckets[i*n : (i+1)*n]
		}
		var sum float64
		for _, c := range row {
			sum += c
		}
		s := Sample{
			Time:       float64(i+1) * r.interval,
			Shares:     make([]float64, n),
			Cumulative: make([]float64, n),
		}
		if i == count-1 && duration > float64(i)*r.interval && duration < s.Time {
			s.Time = duration
		}
		for p, c := range row {
			s.Shares[p] = fraction(c, sum)
			sofar[p] += c
		}
		sofarSum += sum
		for p := range sofar {
			s.Cumulative[p] = fraction(sofar[p], sofarSum)
		}
		out[i] = s
	}
	return out
}

// fraction is part/whole, 0 when the whole is not positive.
func fraction(part, whole float64) float64 {
	if !(whole > 0) {
		return 0
	}
	return part / whole
}
