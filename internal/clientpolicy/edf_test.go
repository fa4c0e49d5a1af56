package clientpolicy

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestFeasible(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ncpus int
		af    float64
		tasks [][3]float64 // project, EstCPU, deadline
		want  bool
	}{
		{"empty", 1, 1, nil, true},
		{"one fits exactly", 1, 1, [][3]float64{{0, 100, 100}}, true},
		{"one too long", 1, 1, [][3]float64{{0, 101, 100}}, false},
		{"active fraction slows it", 1, 0.5, [][3]float64{{0, 60, 100}}, false},
		{"edf order", 1, 1, [][3]float64{{0, 50, 200}, {1, 100, 100}}, true},
		{"two cpus", 2, 1, [][3]float64{{0, 100, 100}, {1, 100, 100}}, true},
		{"two cpus, third too late", 2, 1, [][3]float64{{0, 100, 100}, {1, 100, 100}, {0, 1, 100}}, false},
		{"past deadline", 1, 1, [][3]float64{{0, 1, -5}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := newQueue(tc.ncpus, Config{}, []float64{1, 1}, tc.tasks)
			h.ActiveFrac = tc.af
			if got := h.Feasible(0); got != tc.want {
				t.Errorf("Feasible = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRoundRobinMissesWhatEDFMeets is the case for seed 001: round robin
// runs both tasks at half speed and the short one misses; EDF meets both.
func TestRoundRobinMissesWhatEDFMeets(t *testing.T) {
	h, ps := newQueue(1, Config{Strategy: StrategyEDF}, []float64{1, 1}, [][3]float64{
		{0, 5000, 6000}, {1, 5000, 100000},
	})
	if !h.Feasible(0) {
		t.Fatal("queue should be feasible")
	}
	if m := h.rrDeadlinesMissed(0, h.deadlineCushion()); m[ps[0]] != 1 {
		t.Fatalf("round robin: deadlines_missed(A) = %d, want 1 (A would finish at 10000 > 6000)", m[ps[0]])
	}
	d := newTestDriver(h, rand.New(rand.NewPCG(1, 1)), nil)
	noFetch(h)
	d.run(200000)
	if d.missed != 0 || d.finished != 2 {
		t.Errorf("EDF: %d finished, %d missed; want 2, 0", d.finished, d.missed)
	}
}

// noFetch keeps a host from making RPCs, so a driver runs a fixed queue.
func noFetch(h *Host) {
	for _, p := range h.Projects {
		p.MinRPC = math.Inf(1)
	}
}

// randomFeasibleQueue makes a queue with deadlines tight enough that
// round robin often misses some, keeping only queues EDF can finish.
func randomFeasibleQueue(rng *rand.Rand, strategy Strategy) *Host {
	for {
		ncpus := []int{1, 2, 4, 8}[rng.IntN(4)]
		af := []float64{1, 0.7, 0.4}[rng.IntN(3)]
		projects := []*Project{
			{Name: "A", Share: float64(1 + rng.IntN(100))},
			{Name: "B", Share: float64(1 + rng.IntN(100))},
			{Name: "C", Share: float64(1 + rng.IntN(100))},
		}
		h := NewHost(ncpus, af, Config{Strategy: strategy, SchedPeriod: []float64{600, 3600}[rng.IntN(2)]}, projects)
		n := ncpus + rng.IntN(4*ncpus+8)
		total := 0.0
		var tasks []*Task
		for i := range n {
			tk := &Task{ID: int64(i + 1), Project: projects[rng.IntN(3)], EstCPU: 600 + rng.Float64()*7200}
			total += tk.EstCPU
			tasks = append(tasks, tk)
		}
		horizon := total / (float64(ncpus) * af)
		for _, tk := range tasks {
			tk.Deadline = tk.EstCPU/af + rng.Float64()*1.3*horizon
			h.AddTask(tk)
		}
		if h.Feasible(0) {
			return h
		}
	}
}

// TestEDFMeetsFeasibleDeadlines: on random queues EDF can finish in time,
// StrategyEDF misses no deadline, while plain round robin (the seed-001
// simulation) and the debt strategy miss some.
func TestEDFMeetsFeasibleDeadlines(t *testing.T) {
	const queues = 150
	for seed := uint64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		rrMissQueues, rrMisses, debtMissQueues, unguardedMissQueues, tasks := 0, 0, 0, 0, 0
		debtMisses, unguardedMisses := 0, 0
		for q := range queues {
			h := randomFeasibleQueue(rng, StrategyEDF)
			tasks += len(h.Tasks)
			missed := 0
			for _, n := range h.rrDeadlinesMissed(0, h.deadlineCushion()) {
				missed += n
			}
			if missed > 0 {
				rrMissQueues++
				rrMisses += missed
			}
			debt := cloneHost(h, StrategyDebt)
			unguarded := cloneHost(h, StrategyEDF)
			unguarded.edfGuardOff = true

			noFetch(h)
			d := newTestDriver(h, rng, nil)
			d.run(1e7)
			if d.missed != 0 || d.finished != len(h.Tasks) {
				t.Fatalf("seed %d queue %d (%d cpus, af %.1f, %d tasks): EDF missed %d, finished %d",
					seed, q, h.NCPUs, h.ActiveFrac, len(h.Tasks), d.missed, d.finished)
			}
			noFetch(debt)
			dd := newTestDriver(debt, rng, nil)
			dd.run(1e7)
			debtMisses += dd.missed
			if dd.missed > 0 {
				debtMissQueues++
			}
			noFetch(unguarded)
			du := newTestDriver(unguarded, rng, nil)
			du.run(1e7)
			unguardedMisses += du.missed
			if du.missed > 0 {
				unguardedMissQueues++
			}
		}
		t.Logf("seed %d: %d feasible queues (%d tasks): EDF missed 0; round robin would miss %d deadlines in %d queues; debt strategy missed %d in %d queues; seed-001 EDF without the feasibility guard missed %d in %d queues",
			seed, queues, tasks, rrMisses, rrMissQueues, debtMisses, debtMissQueues, unguardedMisses, unguardedMissQueues)
		if rrMissQueues == 0 {
			t.Errorf("seed %d: no queue had a deadline at risk under round robin; the test proves nothing", seed)
		}
	}
}

// cloneHost copies h's queue into a fresh host with another strategy.
func cloneHost(h *Host, st Strategy) *Host {
	var projects []*Project
	m := map[*Project]*Project{}
	for _, p := range h.Projects {
		c := &Project{Name: p.Name, Share: p.Share}
		m[p] = c
		projects = append(projects, c)
	}
	cfg := h.Config
	cfg.Strategy = st
	c := NewHost(h.NCPUs, h.ActiveFrac, cfg, projects)
	for _, t := range h.Tasks {
		c.AddTask(&Task{ID: t.ID, Project: m[t.Project], EstCPU: t.EstCPU, CPU: t.CPU, Deadline: t.Deadline})
	}
	return c
}

// TestCushionForAHostOftenOff: on a host that is on three quarters of the
// time, a task that round robin finishes on time at the average rate, but
// with less than the cushion in hand, is at risk, and so runs under EDF;
// on a host always on the same queue is not at risk. One CPU, shares 1:1,
// T 12 h: A's task of 3000 s at 0.5 CPU x 0.75 ends at 8000 s, 17000 s
// before its deadline; the cushion is 43200 x sqrt(0.25) = 21600 s.
func TestCushionForAHostOftenOff(t *testing.T) {
	for _, tc := range []struct {
		af     float64
		atRisk bool
	}{{0.75, true}, {1, false}} {
		h, ps := newQueue(1, Config{Strategy: StrategyEDF, ConnectPeriod: 43200}, []float64{1, 1}, [][3]float64{
			{0, 3000, 25000}, {1, 1e5, 1e7},
		})
		h.ActiveFrac = tc.af
		if got := h.deadlineCushion(); !near(got, 43200*math.Sqrt(1-tc.af)) {
			t.Errorf("af %v: cushion %v, want %v", tc.af, got, 43200*math.Sqrt(1-tc.af))
		}
		risk := h.atRisk(0)
		if got := len(risk) == 1 && risk[0].Project == ps[0]; got != tc.atRisk {
			t.Errorf("af %v: at risk %v, want A's task at risk: %v", tc.af, ids(risk), tc.atRisk)
		}
	}
}
