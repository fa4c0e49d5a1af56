package clientpolicy

import (
	"slices"
	"testing"
)

func ids(ts []*Task) []int64 {
	var out []int64
	for _, t := range ts {
		out = append(out, t.ID)
	}
	slices.Sort(out)
	return out
}

// newQueue makes a host with the given tasks: project index, EstCPU,
// deadline.
func newQueue(ncpus int, cfg Config, shares []float64, tasks [][3]float64) (*Host, []*Project) {
	h, ps := hostWith(ncpus, cfg, shares)
	for i, tk := range tasks {
		h.AddTask(&Task{ID: int64(i + 1), Project: ps[int(tk[0])], EstCPU: tk[1], Deadline: tk[2]})
	}
	return h, ps
}

func TestScheduleChoosesByDebt(t *testing.T) {
	for _, st := range []Strategy{StrategyDebt, StrategyEDF} {
		t.Run(string(st), func(t *testing.T) {
			// Two CPUs, B is owed most: B gets the first CPU, and with
			// payoff 3600 its anticipated debt falls below A's, so A gets
			// the second.
			h, ps := newQueue(2, Config{Strategy: st}, []float64{1, 1}, [][3]float64{
				{0, 3600, 1e6}, {0, 3600, 1e6}, {1, 3600, 1e6}, {1, 3600, 1e6},
			})
			ps[0].Debt, ps[1].Debt = 0, 1000
			ps[0].STD, ps[1].STD = 0, 1000
			h.payoff, h.periodWork = 3600, 0
			h.started, h.periodStart = true, -3600 // a period just ended
			h.periodWork = 2 * 3600
			got := ids(h.Schedule(0))
			if want := []int64{1, 3}; !slices.Equal(got, want) {
				t.Errorf("running %v, want %v (one task of each, earliest deadline)", got, want)
			}
		})
	}
}

func TestScheduleGivesEveryCPUToTheOnlyProjectWithWork(t *testing.T) {
	for _, st := range Strategies() {
		t.Run(string(st), func(t *testing.T) {
			h, _ := newQueue(4, Config{Strategy: st}, []float64{50, 30, 20}, [][3]float64{
				{1, 3600, 1e6}, {1, 3600, 1e6}, {1, 3600, 1e6}, {1, 3600, 1e6}, {1, 3600, 1e6},
			})
			if got := len(h.Schedule(0)); got != 4 {
				t.Errorf("%d tasks run on 4 CPUs with 5 runnable", got)
			}
		})
	}
}

func TestSchedulePrefersRunningThenPreemptedThenNew(t *testing.T) {
	h, ps := newQueue(1, Config{Strategy: StrategyDebt}, []float64{1}, [][3]float64{
		{0, 3600, 300}, {0, 3600, 200}, {0, 3600, 100},
	})
	_ = ps
	h.Tasks[0].State = TaskPreempted
	h.Tasks[1].State = TaskRunning
	if got := ids(h.Schedule(0)); !slices.Equal(got, []int64{2}) {
		t.Fatalf("running %v, want the running task 2 over the preempted 1 and the new 3", got)
	}
	h.Tasks[1].State = TaskPreempted
	if got := ids(h.Schedule(h.NextSchedule())); !slices.Equal(got, []int64{2}) {
		t.Fatalf("running %v, want preempted task 2 (earliest deadline among preempted) over new task 3", got)
	}
	h.Tasks[0].State, h.Tasks[1].State = TaskWaiting, TaskWaiting
	if got := ids(h.Schedule(h.NextSchedule())); !slices.Equal(got, []int64{3}) {
		t.Fatalf("running %v, want the earliest deadline, task 3", got)
	}
}

// TestScheduleDoesNotThrash: between periods an arrival only takes a free
// CPU; a task that just started keeps its CPU until the period ends, when
// the debts may move it.
func TestScheduleDoesNotThrash(t *testing.T) {
	for _, st := range []Strategy{StrategyDebt, StrategyEDF} {
		t.Run(string(st), func(t *testing.T) {
			h, ps := newQueue(1, Config{Strategy: st, SchedPeriod: 3600}, []float64{1, 1}, [][3]float64{
				{0, 1e5, 1e7},
			})
			h.Schedule(0)
			h.Tasks[0].CPU = 600
			h.AddTask(&Task{ID: 2, Project: ps[1], EstCPU: 1e5, Deadline: 1e7})
			if got := ids(h.Schedule(600)); !slices.Equal(got, []int64{1}) {
				t.Fatalf("at 600 s running %v, want task 1 kept", got)
			}
			h.Tasks[0].CPU = 3600
			if got := ids(h.Schedule(3600)); !slices.Equal(got, []int64{2}) {
				t.Fatalf("at the period end running %v, want task 2 (B is owed)", got)
			}
			if h.Tasks[0].State != TaskPreempted {
				t.Errorf("task 1 is %v, want preempted", h.Tasks[0].State)
			}
		})
	}
}

// TestEDFPreemptsForDeadlineAtRisk: a task that round robin would finish
// late takes a CPU at once, even mid-period.
func TestEDFPreemptsForDeadlineAtRisk(t *testing.T) {
	h, ps := newQueue(1, Config{Strategy: StrategyEDF}, []float64{1, 1}, [][3]float64{
		{0, 1e5, 1e7},
	})
	h.Schedule(0)
	h.Tasks[0].CPU = 60
	// B's task needs 1000 s within 1500 s: at half a CPU it would miss.
	h.AddTask(&Task{ID: 2, Project: ps[1], EstCPU: 1000, Deadline: 60 + 1500})
	if got := ids(h.Schedule(60)); !slices.Equal(got, []int64{2}) {
		t.Fatalf("running %v, want the task at risk, 2", got)
	}
	if m := h.rrDeadlinesMissed(60, h.deadlineCushion()); m[ps[1]] != 1 {
		t.Errorf("deadlines_missed(B) = %d, want 1", m[ps[1]])
	}
	// The debt strategy ignores deadlines.
	h2, ps2 := newQueue(1, Config{Strategy: StrategyDebt}, []float64{1, 1}, [][3]float64{{0, 1e5, 1e7}})
	h2.Schedule(0)
	h2.Tasks[0].CPU = 60
	h2.AddTask(&Task{ID: 2, Project: ps2[1], EstCPU: 1000, Deadline: 60 + 1500})
	if got := ids(h2.Schedule(60)); !slices.Equal(got, []int64{1}) {
		t.Errorf("debt: running %v, want task 1 kept", got)
	}
}

func TestScheduleAccountsRemovedTasks(t *testing.T) {
	h, ps := newQueue(1, Config{Strategy: StrategyDebt}, []float64{1, 1}, [][3]float64{{0, 100, 1e6}, {1, 1e5, 1e6}})
	h.Schedule(0)
	tk := h.Tasks[0]
	tk.CPU = 100
	h.TaskFinished(tk, 100)
	h.RemoveTask(tk)
	h.Schedule(100)
	// A has no runnable task left: debt 0. B had nothing: owed its share of
	// 100 among runnable projects (itself only) = 100.
	if ps[0].Debt != 0 || !near(ps[1].Debt, 100) {
		t.Errorf("debts %v %v, want 0 100", ps[0].Debt, ps[1].Debt)
	}
}
