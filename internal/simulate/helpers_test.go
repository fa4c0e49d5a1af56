package simulate

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/simreport"
)

const hour = Duration(time.Hour)

// threeProjects is a population of hosts with 1 to 8 CPUs, on 60-100% of
// the time, attached to three projects with shares 50/30/20 that always
// have work: the reference scenario's shape at a size tests can afford.
// Their schedulers let a host hold as many tasks as its client asks for
// (an in-progress limit of 100 per CPU): these scenarios test the client's
// policies, which the scheduler's default of 4 per CPU would cap (hosts at
// the limit ask again each request_delay); the limit itself is tested by
// TestServerDecidesAsTheScheduler.
func threeProjects(hosts int, seed uint64, strategy string) Scenario {
	sc := Scenario{
		Name:          "three-projects",
		Seed:          seed,
		Hosts:         hosts,
		Duration:      48 * hour,
		SampleEvery:   hour,
		Strategy:      strategy,
		ConnectPeriod: 12 * hour,
		SchedPeriod:   hour,
		ReportMargin:  12 * hour,
		Population: Population{
			NCPUs:       []CPUChoice{{CPUs: 1, Weight: 20}, {CPUs: 2, Weight: 35}, {CPUs: 4, Weight: 35}, {CPUs: 8, Weight: 10}},
			Flops:       Range{Min: 1e9, Max: 1e10},
			OnFrac:      Range{Min: 0.6, Max: 1},
			MeanOn:      8 * hour,
			StartWithin: hour,
		},
		Projects: []Project{
			{Name: "alpha", Share: 50, Job: Job{FpopsEst: 2e13, RuntimeSpread: 0.2, DelayBound: 72 * hour}},
			{Name: "beta", Share: 30, Job: Job{FpopsEst: 1e13, RuntimeSpread: 0.2, DelayBound: 36 * hour}},
			{Name: "gamma", Share: 20, Job: Job{FpopsEst: 2.5e13, RuntimeSpread: 0.3, DelayBound: 96 * hour}},
		},
	}
	for j := range sc.Projects {
		sc.Projects[j].Server.MaxInProgressPerCPU = 100
	}
	return sc
}

// simulate runs a scenario with test knobs and returns the engine (for its
// counters, servers and hosts) and the report. It fails the test on an
// error and on a broken engine invariant.
func simulate(t testing.TB, sc Scenario, opts runOptions) (*sim, simreport.Report) {
	t.Helper()
	start := time.Now()
	s, err := newSim(sc, opts)
	if err != nil {
		t.Fatalf("newSim(%s) = %v", sc.Name, err)
	}
	if err := s.run(context.Background()); err != nil {
		t.Fatalf("run(%s) = %v", sc.Name, err)
	}
	if s.stats.overbooked > 0 {
		t.Errorf("%s: %d wake-ups found a host running more tasks than it has CPUs", sc.Name, s.stats.overbooked)
	}
	if s.stats.stalls > s.stats.wakeups/10 {
		t.Errorf("%s: %d of %d wake-ups were asked for at or before the present; want few (the policy's NextRPCTime and NextRPC disagree)",
			sc.Name, s.stats.stalls, s.stats.wakeups)
	}
	return s, s.report(time.Since(start))
}

// rpcsPerMinute is the mean and the peak of a server's RPCs per minute
// over [from, to) seconds.
func rpcsPerMinute(srv *server, from, to float64) (mean float64, peak int32) {
	lo, hi := int(from/60), min(int(to/60), len(srv.rpcMinutes))
	var sum int64
	for _, n := range srv.rpcMinutes[lo:hi] {
		sum += int64(n)
		peak = max(peak, n)
	}
	return float64(sum) / float64(hi-lo), peak
}

// projectIndex is the position of the named project in a report.
func projectIndex(t testing.TB, r simreport.Report, name string) int {
	t.Helper()
	for i, p := range r.Projects {
		if p.Name == name {
			return i
		}
	}
	t.Fatalf("report has no project %q", name)
	return -1
}

// hostShareErrors is, for every host that computed anything, the largest
// difference between the fraction of its CPU a project got and the
// project's share fraction on that host, sorted.
func hostShareErrors(s *sim) []float64 {
	var errs []float64
	for _, h := range s.hosts {
		var total, shares float64
		for k, p := range h.policy.Projects {
			total += h.cpu[k]
			shares += p.Share
		}
		if total == 0 {
			continue
		}
		worst := 0.0
		for k, p := range h.policy.Projects {
			worst = max(worst, math.Abs(h.cpu[k]/total-p.Share/shares))
		}
		errs = append(errs, worst)
	}
	slices.Sort(errs)
	return errs
}

// quantile is the q-quantile of sorted xs (0 for none).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[min(len(xs)-1, int(q*float64(len(xs))))]
}
