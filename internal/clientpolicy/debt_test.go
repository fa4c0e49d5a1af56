package clientpolicy

import (
	"math"
	"testing"
)

// hostWith builds a host whose projects have the given shares, with one
// long waiting task for each project listed in withWork.
func hostWith(ncpus int, cfg Config, shares []float64, withWork ...int) (*Host, []*Project) {
	names := []string{"A", "B", "C", "D"}
	var projects []*Project
	for i, s := range shares {
		projects = append(projects, &Project{Name: names[i], Share: s})
	}
	h := NewHost(ncpus, 1, cfg, projects)
	for i, pi := range withWork {
		h.AddTask(&Task{ID: int64(i + 1), Project: projects[pi], EstCPU: 1e6, Deadline: 1e7})
	}
	return h, projects
}

// work credits a project's task with CPU seconds, as the caller does while
// it runs.
func work(h *Host, p *Project, cpu float64) {
	for _, t := range h.Tasks {
		if t.Project == p && t.State != TaskDone {
			t.CPU += cpu
			return
		}
	}
	panic("no task for " + p.Name)
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*max(1, math.Abs(b)) }

func TestDebtV4(t *testing.T) {
	for _, tc := range []struct {
		name     string
		shares   []float64
		withWork []int
		before   []float64 // debts before
		done     []float64 // CPU seconds per project since the last Schedule
		want     []float64 // debts after
	}{
		{
			// Seed 000's example: shares 75/25, A got 25 minutes and B 15;
			// A is owed 75% of 40 minutes (30) minus its 25: +5 minutes.
			name: "seed 000 worked example", shares: []float64{75, 25}, withWork: []int{0, 1},
			before: []float64{0, 0}, done: []float64{25 * 60, 15 * 60}, want: []float64{5 * 60, -5 * 60},
		},
		{
			name: "idle project's share is left out and its debt reset", shares: []float64{50, 30, 20},
			withWork: []int{0, 1}, before: []float64{0, 0, 777}, done: []float64{1000, 600, 0},
			// A and B split 1600 as 50:30 (1000, 600): no debt change.
			want: []float64{0, 0, 0},
		},
		{
			name: "equal shares, one project got everything", shares: []float64{1, 1},
			withWork: []int{0, 1}, before: []float64{100, -100}, done: []float64{3600, 0}, want: []float64{-1700, 1700},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, ps := hostWith(2, Config{Strategy: StrategyDebt}, tc.shares, tc.withWork...)
			h.Schedule(0)
			for i, p := range ps {
				p.Debt = tc.before[i]
			}
			for i, p := range ps {
				if d := tc.done[i]; d > 0 {
					work(h, p, d)
				}
			}
			h.Schedule(10)
			for i, p := range ps {
				want := tc.want[i]
				if !near(p.Debt, want) {
					t.Errorf("%s: debt %.3f, want %.3f", p.Name, p.Debt, want)
				}
			}
		})
	}
}

func TestDebtOfProjectWithoutWorkIsZero(t *testing.T) {
	h, ps := hostWith(1, Config{Strategy: StrategyDebt}, []float64{50, 50}, 0)
	ps[1].Debt = 5000
	h.Schedule(0)
	work(h, ps[0], 100)
	h.Schedule(100)
	if ps[1].Debt != 0 {
		t.Errorf("project without runnable tasks has debt %v, want 0", ps[1].Debt)
	}
	// All the work was A's and only A counts: A is owed all of it.
	if !near(ps[0].Debt, 0) {
		t.Errorf("A's debt %v, want 0 (owed 100%% of its own 100 s)", ps[0].Debt)
	}
}

func TestShortTermDebt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		maxSTD float64
		done   []float64
		want   []float64
	}{
		// Shares 50/30/20 of 1000 s: owed 500/300/200.
		{"least is zero", 0, []float64{1000, 0, 0}, []float64{0, 800, 700}},
		{"capped at MaxSTD", 600, []float64{1000, 0, 0}, []float64{0, 600, 600}},
		{"on share", 0, []float64{500, 300, 200}, []float64{0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, ps := hostWith(3, Config{Strategy: StrategyEDF, MaxSTD: tc.maxSTD}, []float64{50, 30, 20}, 0, 1, 2)
			h.Schedule(0)
			for i, p := range ps {
				if tc.done[i] > 0 {
					work(h, p, tc.done[i])
				}
			}
			h.Schedule(1)
			for i, p := range ps {
				if !near(p.STD, tc.want[i]) {
					t.Errorf("%s: STD %.3f, want %.3f", p.Name, p.STD, tc.want[i])
				}
			}
		})
	}
}

func TestLongTermDebt(t *testing.T) {
	t.Run("mean zero over accumulating projects", func(t *testing.T) {
		h, ps := hostWith(3, Config{}, []float64{50, 30, 20}, 0, 1, 2)
		h.Schedule(0)
		work(h, ps[0], 1000)
		h.Schedule(1)
		sum := 0.0
		for _, p := range ps {
			sum += p.LTD
		}
		if !near(sum, 0) || !near(ps[0].LTD, -500) || !near(ps[1].LTD, 300) || !near(ps[2].LTD, 200) {
			t.Errorf("LTD %v %v %v, want -500 300 200", ps[0].LTD, ps[1].LTD, ps[2].LTD)
		}
	})
	for _, tc := range []struct {
		name     string
		withWork []int
	}{
		{"no-work project without tasks", []int{0, 1}},
		{"no-work project still computing", []int{0, 1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, ps := hostWith(3, Config{}, []float64{50, 30, 20}, tc.withWork...)
			ps[2].LastNoWork = true
			ps[2].LTD = 100
			h.Schedule(0)
			for step := range 10 {
				work(h, ps[0], 1000) // A gets everything: the others are owed
				h.Schedule(float64(step + 1))
				if ps[2].LTD > 100 {
					t.Fatalf("step %d: LastNoWork project's LTD grew to %v", step, ps[2].LTD)
				}
			}
			if ps[1].LTD <= 0 {
				t.Errorf("B's LTD %v: a project with work that got no CPU should be owed", ps[1].LTD)
			}
		})
	}
}
