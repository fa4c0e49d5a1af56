package clientpolicy

import "slices"

// Schedule is the CPU scheduler. It first accounts the CPU computed since
// the previous call (each task's CPU minus its CPU at that call) into the
// debts: version-4 Debt, short-term and long-term debt. Then it decides
// which tasks run from now on: at most NCPUs tasks end in state
// TaskRunning; tasks that were running and are not chosen become
// TaskPreempted. It returns the tasks that run now.
//
// Call it when a CPU becomes free (after TaskFinished), when tasks arrive,
// and when now >= NextSchedule(). StrategyDebt and StrategyEDF reconsider
// every CPU only when a scheduling period has ended; between periods they
// keep running tasks and only fill free CPUs, unless under StrategyEDF a
// deadline is at risk, so a task that just started is not thrown off its
// CPU by the next arrival. The seed-004 strategies never preempt. When a
// project gets a CPU its running task is preferred, then its preempted
// task, then a new one, earliest deadline first within each.
func (h *Host) Schedule(now float64) []*Task {
	c := h.cfg()
	total := h.account()
	h.updateDebtV4(total)
	h.updateSTD(c.MaxSTD)
	h.updateLTD()

	full := !h.started || now >= h.periodStart+c.SchedPeriod
	if full {
		// The expected pay-off of giving a project one CPU is what one
		// CPU computed in the period that just ended (seed 000); before
		// any period, and after an idle one, what it could compute.
		h.payoff = h.periodWork / float64(h.ncpus())
		if h.payoff <= 0 {
			h.payoff = c.SchedPeriod * h.activeFrac()
		}
		h.periodStart, h.started, h.periodWork = now, true, 0
	}

	var chosen []*Task
	switch c.Strategy {
	case StrategyDebt:
		chosen = h.chooseByDebt(full)
	case StrategyEDF:
		chosen = h.chooseEDF(now, full)
	default:
		return h.scheduleSeed004(now)
	}
	h.apply(chosen)
	return h.running()
}

// NextSchedule is when the current scheduling period ends: the time of the
// last full rescheduling plus SchedPeriod (0 before the first Schedule).
func (h *Host) NextSchedule() float64 {
	if !h.started {
		return 0
	}
	return h.periodStart + h.cfg().SchedPeriod
}

// account moves the CPU computed since the last call into each project's
// workDone, notes which projects have unfinished tasks (hasWork), and
// returns the total over the host's projects.
func (h *Host) account() float64 {
	for _, p := range h.Projects {
		p.workDone, p.unaccounted, p.hasWork = p.unaccounted, 0, false
	}
	for _, t := range h.Tasks {
		if t.Project == nil {
			continue
		}
		if d := t.CPU - t.cpuAtLastSched; d > 0 {
			t.Project.workDone += d * t.width()
		}
		t.cpuAtLastSched = t.CPU
		if t.State != TaskDone {
			t.Project.hasWork = true
		}
	}
	total := 0.0
	for _, p := range h.Projects {
		total += p.workDone
	}
	h.periodWork += total
	return total
}

// apply makes chosen the running set: chosen tasks run, tasks that ran and
// are not chosen are preempted, the rest keep their state.
func (h *Host) apply(chosen []*Task) {
	for _, t := range h.Tasks {
		switch {
		case slices.Contains(chosen, t):
			t.State = TaskRunning
		case t.State == TaskRunning:
			t.State = TaskPreempted
		}
	}
}

// chooseByDebt is seed 000's CPU scheduler: CPUs go one at a time to the
// project with the greatest anticipated debt. Between periods the running
// tasks keep their CPUs and only free CPUs are given out.
func (h *Host) chooseByDebt(full bool) []*Task {
	for _, p := range h.Projects {
		p.anticipated = p.Debt
	}
	pk := h.newPicker()
	if !full {
		pk.fill(func(t *Task) bool { return t.State == TaskRunning })
	}
	pk.fill(nil)
	return pk.chosen
}

// picker builds a running set one CPU at a time, charging each pick's
// expected pay-off to its project's anticipated debt.
type picker struct {
	h      *Host
	chosen []*Task
	ready  []*Task // unfinished tasks, earliest deadline first
	// used is the CPUs the chosen tasks occupy; unfit are tasks too wide
	// for the CPUs left, passed over by fill.
	used  float64
	unfit map[*Task]bool
}

func (h *Host) newPicker() *picker {
	pk := &picker{h: h, chosen: make([]*Task, 0, h.ncpus())}
	for _, t := range h.deadlineOrder() {
		t.picked = false
		if t.State != TaskDone {
			pk.ready = append(pk.ready, t)
		}
	}
	return pk
}

func (pk *picker) full() bool { return pk.used >= float64(pk.h.ncpus())-1e-9 }

// fits reports whether t can join the chosen tasks: its CPUs are free, or
// nothing is chosen yet (a task wider than the host runs alone, as the
// real client runs a multi-threaded job on a host with fewer CPUs).
func (pk *picker) fits(t *Task) bool {
	return pk.used == 0 || pk.used+t.width() <= float64(pk.h.ncpus())+1e-9
}

// take gives t its CPUs unless it has them or they are not free.
func (pk *picker) take(t *Task) {
	if pk.full() || t.picked || !pk.fits(t) {
		return
	}
	t.picked = true
	pk.used += t.width()
	pk.chosen = append(pk.chosen, t)
	if t.Project != nil {
		t.Project.anticipated -= pk.h.payoff
	}
}

// fill gives the remaining CPUs, one at a time, to the project with the
// greatest anticipated debt that has an unchosen task passing keep (nil:
// any), taking that project's running task, else its preempted one, else
// a new one, earliest deadline first.
func (pk *picker) fill(keep func(*Task) bool) {
	for !pk.full() {
		var best *Task
		for _, t := range pk.ready {
			if t.picked || pk.unfit[t] || (keep != nil && !keep(t)) {
				continue
			}
			if best == nil || pk.better(t, best) {
				best = t
			}
		}
		if best == nil {
			return
		}
		if !pk.fits(best) {
			if pk.unfit == nil {
				pk.unfit = map[*Task]bool{}
			}
			pk.unfit[best] = true
			continue
		}
		pk.take(best)
	}
}

// better reports whether a should get the next CPU before b: a greater
// anticipated debt of its project, then (same project) running before
// preempted before waiting, then the earlier deadline (ready is in
// deadline order, so ties keep the first seen).
func (pk *picker) better(a, b *Task) bool {
	if a.Project != b.Project {
		da, db := anticipatedOf(a.Project), anticipatedOf(b.Project)
		if da != db {
			return da > db
		}
		return pk.h.projectIndex(a.Project) < pk.h.projectIndex(b.Project)
	}
	if ra, rb := stateRank(a.State), stateRank(b.State); ra != rb {
		return ra < rb
	}
	return false
}

func anticipatedOf(p *Project) float64 {
	if p == nil {
		return 0
	}
	return p.anticipated
}

// stateRank orders the tasks of one project for a CPU: running, then
// preempted, then waiting.
func stateRank(s TaskState) int {
	switch s {
	case TaskRunning:
		return 0
	case TaskPreempted:
		return 1
	}
	return 2
}

// projectIndex is p's position in Projects, or len(Projects) for a
// project the host does not list, so ties break by the caller's order.
func (h *Host) projectIndex(p *Project) int {
	if i := slices.Index(h.Projects, p); i >= 0 {
		return i
	}
	return len(h.Projects)
}
