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

	"github.com/taskserver/taskserver/internal/clientpolicy"
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

// testHost is a host of ncpus CPUs of flops each, computing activeFrac of
// the time, attached to one project.
func testHost(ncpus int, flops, activeFrac float64) *host {
	h := &host{flops: flops, trueCPU: map[*clientpolicy.Task]float64{}, rng: rand.New(rand.NewPCG(1, 2)),
		projects: []int{0}}
	h.policy = clientpolicy.NewHost(ncpus, activeFrac, clientpolicy.Config{},
		[]*clientpolicy.Project{{Name: "p", Share: 1}})
	return h
}

// testServer is a project of one-hour jobs (3.6e12 FLOPs at 1e9/s,
// deadline delay) with the scheduler's limits.
func testServer(t *testing.T, delay Duration, maxTasks, perCPU int) *server {
	t.Helper()
	srv, err := newServer(Project{Name: "p", Job: Job{FpopsEst: 3.6e12, DelayBound: delay},
		Server: Server{MaxTasks: maxTasks, MaxInProgressPerCPU: perCPU}}, 3600)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// The server model sends what the real scheduler's decision sends, and
// refuses what it refuses, with its reason.
func TestServerDecidesAsTheScheduler(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		seconds    float64
		flops      float64
		activeFrac float64
		delay      Duration
		maxTasks   int
		perCPU     int
		held       int
		wantN      int
		wantShort  string
	}{
		{"covers the request", 10 * 3600, 1e9, 1, 48 * hour, 50, 100, 0, 10, ""},
		{"rounds up", 10*3600 + 1, 1e9, 1, 48 * hour, 50, 100, 0, 11, ""},
		{"at least one", 1, 1e9, 1, 48 * hour, 50, 100, 0, 1, ""},
		{"at most max_tasks", 100 * 3600, 1e9, 1, 480 * hour, 5, 100, 0, 5, "rpc_limit"},
		// 4 per CPU by default: the host may hold four.
		{"in-progress limit", 10 * 3600, 1e9, 1, 48 * hour, 50, 0, 0, 4, "in_progress_limit"},
		{"at the in-progress limit", 10 * 3600, 1e9, 1, 48 * hour, 50, 0, 4, 0, "in_progress_limit"},
		// Ten hours of queue on a host computing a tenth of the time: a
		// one-hour job (ten hours here) fits a 24-hour deadline once.
		{"deadline", 100 * 3600, 1e9, 0.1, 24 * hour, 50, 100, 0, 2, "deadline"},
		{"too slow for any", 3600, 1e8, 1, 2 * hour, 50, 100, 0, 0, "deadline"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := testServer(t, c.delay, c.maxTasks, c.perCPU)
			h := testHost(1, c.flops, c.activeFrac)
			for i := range c.held {
				h.policy.AddTask(&clientpolicy.Task{ID: int64(i + 1), Project: h.policy.Projects[0], EstCPU: 60, Deadline: 1e9})
			}
			sends, jobs, short := srv.decide(h, 0, false, c.seconds, 100)
			if len(sends) != c.wantN || len(jobs) != c.wantN || short != c.wantShort {
				t.Fatalf("decide(%g s) = %d sends, short %q; want %d, %q", c.seconds, len(sends), short, c.wantN, c.wantShort)
			}
			if c.wantShort != "" && srv.cat.shortfalls[c.wantShort] != 1 {
				t.Errorf("shortfalls = %v, want one %s", srv.cat.shortfalls, c.wantShort)
			}
			nt := tasks(jobs, c.flops, 1, 100, h.rng)
			for _, x := range nt {
				if want := 3.6e12 / c.flops; x.estCPU != want || x.trueCPU != want || x.deadline != 100+c.delay.Seconds() {
					t.Fatalf("task %+v, want estimate = true runtime = %g, deadline %g", x, want, 100+c.delay.Seconds())
				}
			}
		})
	}
}

// A job sent is replaced in the unsent list, so the project never runs
// out, and the same job is never sent twice.
func TestServerRefillsItsUnsentJobs(t *testing.T) {
	t.Parallel()
	srv := testServer(t, 48*hour, 5, 100)
	seen := map[int64]bool{}
	for range 3 {
		before := slices.Clone(srv.cat.unsent)
		sends, _, _ := srv.decide(testHost(1, 1e9, 1), 0, false, 5*3600, 100)
		if len(sends) != 5 {
			t.Fatalf("sent %d, want 5", len(sends))
		}
		for _, sd := range sends {
			wu := before[sd.Entry].WorkunitID
			if seen[wu] {
				t.Fatalf("job %d sent twice", wu)
			}
			seen[wu] = true
		}
		if len(srv.cat.unsent) != 5 {
			t.Fatalf("%d unsent, want 5", len(srv.cat.unsent))
		}
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
