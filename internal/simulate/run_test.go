package simulate

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// small is a scenario that runs in a fraction of a second.
func small(seed uint64) Scenario {
	sc := threeProjects(20, seed, "edf")
	sc.Duration = 12 * hour
	return sc
}

func TestRunIsDeterministic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, err := Run(ctx, small(7))
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	b, err := Run(ctx, small(7))
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	a.WallSeconds, b.WallSeconds = 0, 0
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two runs of one scenario and seed differ:\n%+v\nvs\n%+v", a.Totals, b.Totals)
	}
	c, err := Run(ctx, small(8))
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	c.WallSeconds = 0
	if reflect.DeepEqual(a.Totals, c.Totals) {
		t.Fatal("seeds 7 and 8 gave identical totals; the seed does not reach the run")
	}
}

func TestRunFillsTheReport(t *testing.T) {
	t.Parallel()
	sc := small(1)
	s, r := simulate(t, sc, runOptions{})
	for j, srv := range s.servers {
		p := r.Projects[j]
		var rpcs int64
		for _, n := range srv.rpcMinutes {
			rpcs += int64(n)
		}
		if rpcs != p.RPCs || srv.reports != p.TasksReported || srv.lateReports > p.DeadlinesMissed {
			t.Errorf("project %s: server saw %d RPCs, %d reports, %d late; report says %d RPCs, %d reported, %d missed",
				p.Name, rpcs, srv.reports, srv.lateReports, p.RPCs, p.TasksReported, p.DeadlinesMissed)
		}
	}
	if r.Clock != "simulated" || r.Scenario != sc.Name || r.Strategy != "edf" || r.RuntimeStat != "average" {
		t.Errorf("meta = %q %q %q %q, want simulated %q edf average", r.Clock, r.Scenario, r.Strategy, r.RuntimeStat, sc.Name)
	}
	if r.Hosts != 20 || r.CPUs < 20 || r.DurationSeconds != 12*3600 {
		t.Errorf("hosts %d cpus %d duration %g, want 20, >= 20, 43200", r.Hosts, r.CPUs, r.DurationSeconds)
	}
	if len(r.Projects) != 3 || len(r.Series) != 12 {
		t.Fatalf("%d projects and %d samples, want 3 and 12 (hourly over 12h)", len(r.Projects), len(r.Series))
	}
	tot := r.Totals
	if tot.TasksFetched == 0 || tot.TasksCompleted == 0 || tot.RPCs == 0 || tot.CPUSeconds == 0 {
		t.Errorf("totals %+v: want tasks fetched and completed, RPCs and CPU", tot)
	}
	if tot.CPUSeconds > tot.AvailableCPUSeconds*(1+1e-9) {
		t.Errorf("computed %g CPU s of %g available", tot.CPUSeconds, tot.AvailableCPUSeconds)
	}
	if tot.TasksCompleted > tot.TasksFetched || tot.TasksReported > tot.TasksCompleted {
		t.Errorf("fetched %d completed %d reported %d: want fetched >= completed >= reported",
			tot.TasksFetched, tot.TasksCompleted, tot.TasksReported)
	}
}

// TestHostsAreOnTheirOnFraction checks the on/off periods: over two days
// the CPU capacity the hosts offered is what their on fractions promise.
func TestHostsAreOnTheirOnFraction(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2} {
		sc := threeProjects(200, seed, "debt")
		sc.Projects = sc.Projects[:1]
		sc.Population.OnFrac = Range{Min: 0.2, Max: 0.9}
		sc.Population.MeanOn = 2 * hour
		sc.Population.StartWithin = 0
		s, r := simulate(t, sc, runOptions{})
		var want float64
		for _, h := range s.hosts {
			want += float64(h.policy.NCPUs) * h.onFrac * sc.Duration.Seconds()
		}
		got := r.Totals.AvailableCPUSeconds
		t.Logf("seed %d: available %.0f CPU s, on fractions promise %.0f (ratio %.4f)", seed, got, want, got/want)
		if math.Abs(got/want-1) > 0.05 {
			t.Errorf("seed %d: hosts offered %.0f CPU s, their on fractions promise %.0f; want within 5%%", seed, got, want)
		}
	}
}

func TestOutageForTheWholeRunFailsEveryRPC(t *testing.T) {
	t.Parallel()
	sc := small(1)
	for i := range sc.Projects {
		sc.Projects[i].Server.Outages = []Window{{Start: 0, End: sc.Duration}}
	}
	s, r := simulate(t, sc, runOptions{})
	if r.Totals.RPCs == 0 || r.Totals.RPCFailures != r.Totals.RPCs {
		t.Fatalf("%d RPCs, %d failed; want some, all failed", r.Totals.RPCs, r.Totals.RPCFailures)
	}
	if r.Totals.TasksFetched != 0 || r.Totals.CPUSeconds != 0 {
		t.Fatalf("fetched %d tasks and computed %g CPU s with every server down; want 0", r.Totals.TasksFetched, r.Totals.CPUSeconds)
	}
	// Back-off: a host retries a project at most about log2(12h/1m)+12h/4h times.
	if perHostProject := float64(r.Totals.RPCs) / float64(len(s.hosts)*3); perHostProject > 15 {
		t.Fatalf("%.1f RPCs per host and project over 12h of outage; want <= 15 (exponential back-off)", perHostProject)
	}
}

func TestRunRejectsAnInvalidScenario(t *testing.T) {
	t.Parallel()
	sc := small(1)
	sc.Projects[0].Share = -1
	_, err := Run(context.Background(), sc)
	if err == nil || !strings.Contains(err.Error(), "projects[0].share") {
		t.Fatalf("Run(negative share) = %v, want an error naming projects[0].share", err)
	}
}

func TestRunStopsWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, small(1))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run(cancelled context) = %v, want context.Canceled", err)
	}
}

func TestServerSendsWorkCoveringTheRequest(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name             string
		seconds, flops   float64
		maxTasks         int
		wantN            int
		wantEst, wantDue float64
	}{
		{"covers the request", 10_000, 1e9, 50, 10, 1000, 100 + 3600},
		{"rounds up", 10_001, 1e9, 50, 11, 1000, 100 + 3600},
		{"at least one", 1, 1e9, 50, 1, 1000, 100 + 3600},
		{"at most max_tasks", 1e9, 1e10, 5, 5, 100, 100 + 3600},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(Project{Job: Job{FpopsEst: 1e12, DelayBound: hour}, Server: Server{MaxTasks: c.maxTasks}}, 3600)
			got := srv.work(c.seconds, c.flops, 1, 100, rand.New(rand.NewPCG(1, 2)))
			if len(got) != c.wantN {
				t.Fatalf("work(%g s) = %d tasks, want %d", c.seconds, len(got), c.wantN)
			}
			for _, nt := range got {
				if nt.estCPU != c.wantEst || nt.trueCPU != c.wantEst || nt.deadline != c.wantDue {
					t.Fatalf("task %+v, want estimate = true runtime = %g, deadline %g", nt, c.wantEst, c.wantDue)
				}
			}
		})
	}
}

func TestRuntimeFactorHasMeanOne(t *testing.T) {
	t.Parallel()
	for _, sigma := range []float64{0.1, 0.3, 0.6} {
		r := rand.New(rand.NewPCG(3, uint64(sigma*10)))
		const n = 200_000
		var sum float64
		lo, hi := math.Inf(1), 0.0
		for range n {
			f := runtimeFactor(sigma, r)
			sum += f
			lo, hi = min(lo, f), max(hi, f)
		}
		mean := sum / n
		t.Logf("sigma %.1f: mean %.4f, range [%.3f, %.3f]", sigma, mean, lo, hi)
		if math.Abs(mean-1) > 0.01 || lo < 0.1 || hi > 10 {
			t.Errorf("sigma %.1f: mean %.4f range [%.3f, %.3f]; want mean 1 ± 0.01 within [0.1, 10]", sigma, mean, lo, hi)
		}
	}
}

func TestWakeQueuePopsInTimeThenHostOrder(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	var q wakeQueue
	var all []wakeup
	for i := range 500 {
		w := wakeup{at: float64(r.IntN(50)), host: int32(i)}
		q.push(w)
		all = append(all, w)
	}
	slices.SortFunc(all, func(a, b wakeup) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return int(a.host - b.host)
	})
	for i, want := range all {
		if got := q.pop(); got != want {
			t.Fatalf("pop %d = %+v, want %+v", i, got, want)
		}
	}
	if len(q) != 0 {
		t.Fatalf("queue holds %d after popping everything", len(q))
	}
}

// BenchmarkReferenceScenario runs `make simulate`'s scenario: 1,000 hosts,
// three projects, two simulated days, EDF.
func BenchmarkReferenceScenario(b *testing.B) {
	sc, err := LoadScenario("../../scenarios/reference.yaml")
	if err != nil {
		b.Fatal(err)
	}
	var wakeups int64
	start := time.Now()
	for b.Loop() {
		s, err := newSim(sc, runOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.run(context.Background()); err != nil {
			b.Fatal(err)
		}
		wakeups += s.stats.wakeups
	}
	b.ReportMetric(float64(wakeups)/float64(b.N), "wakeups/op")
	b.ReportMetric(float64(wakeups)/time.Since(start).Seconds(), "wakeups/s")
}
