package clientpolicy

import (
	"math"
	"slices"
)

// simTask is one unfinished task in a simulation of the queue.
type simTask struct {
	task     *Task
	rem      float64 // CPU seconds left
	deadline float64
}

// simQueue is the host's unfinished tasks for a simulation, earliest
// deadline first.
func (h *Host) simQueue() []simTask {
	q := make([]simTask, 0, len(h.Tasks))
	for _, t := range h.deadlineOrder() {
		if t.State != TaskDone {
			q = append(q, simTask{task: t, rem: t.Remaining(), deadline: t.Deadline})
		}
	}
	return q
}

// Feasible reports whether every unfinished task can meet its deadline
// under earliest-deadline-first scheduling on NCPUs CPUs, each computing
// ActiveFrac CPU seconds per second, from now on: a simulation of EDF over
// the current queue with the tasks' estimated remaining CPU.
func (h *Host) Feasible(now float64) bool {
	return edfFeasible(now, h.simQueue(), h.ncpus(), h.activeFrac())
}

// edfFeasible simulates EDF from now over q (earliest deadline first) and
// reports whether every task finishes by its deadline. The NCPUs earliest
// deadlines run; a finished task's CPU goes to the next deadline.
func edfFeasible(now float64, q []simTask, ncpus int, af float64) bool {
	active := make([]simTask, 0, ncpus)
	next := 0
	for {
		for len(active) < ncpus && next < len(q) {
			active = append(active, q[next])
			next++
		}
		if len(active) == 0 {
			return true
		}
		step := math.Inf(1)
		for _, s := range active {
			step = min(step, s.rem/af)
		}
		now += step
		left := active[:0]
		for _, s := range active {
			s.rem -= step * af
			if finishedIn(s) {
				if !onTime(now, s.deadline) {
					return false
				}
				continue
			}
			left = append(left, s)
		}
		active = left
	}
}

// finishedIn reports whether a simulated task has no work left, allowing
// for rounding.
func finishedIn(s simTask) bool {
	return s.rem <= 1e-9*max(1, s.task.EstCPU)
}

// rrProject is one project in the round-robin simulation.
type rrProject struct {
	p      *Project
	share  float64
	tasks  []simTask // unfinished, earliest deadline first
	cpus   float64   // CPUs it gets now
	capped bool      // scratch of splitCPUs
	missed int
}

// running is how many of the project's tasks compute now: task i gets
// min(1, cpus-i) CPUs.
func (g *rrProject) running() int {
	return min(len(g.tasks), int(math.Ceil(g.cpus-1e-12)))
}

// rrDeadlinesMissed is seed 001's round-robin simulation of the current
// queue: the CPUs are split among the projects with unfinished tasks in
// proportion to their shares (a project never gets more CPUs than it has
// tasks; what it cannot use goes to the others), each project runs its
// tasks in deadline order, and CPUs compute ActiveFrac CPU seconds per
// second. It returns deadlines_missed(P): how many of P's tasks would
// finish later than their deadlines less cushion (the real client's
// "computation deadline", which keeps time in hand for the host being
// off).
func (h *Host) rrDeadlinesMissed(now, cushion float64) map[*Project]int {
	af := h.activeFrac()
	groups := h.rrGroups()
	all := slices.Clone(groups)
	for len(groups) > 0 {
		splitCPUs(groups, float64(h.ncpus()))
		step := math.Inf(1)
		for _, g := range groups {
			for i := range g.running() {
				step = min(step, g.tasks[i].rem/(min(1, g.cpus-float64(i))*af))
			}
		}
		now += step
		left := groups[:0]
		for _, g := range groups {
			// Advance the running head of the queue and pack what is
			// left of it against the waiting tail, keeping the order.
			n := g.running()
			w := n
			for i := n - 1; i >= 0; i-- {
				s := g.tasks[i]
				s.rem -= step * min(1, g.cpus-float64(i)) * af
				if finishedIn(s) {
					if !onTime(now, s.deadline-cushion) {
						g.missed++
					}
					continue
				}
				w--
				g.tasks[w] = s
			}
			g.tasks = g.tasks[w:]
			if len(g.tasks) > 0 {
				left = append(left, g)
			}
		}
		groups = left
	}
	missed := make(map[*Project]int, len(all))
	for _, g := range all {
		if g.missed > 0 {
			missed[g.p] = g.missed
		}
	}
	return missed
}

// rrGroups splits the unfinished tasks by project, each earliest deadline
// first, in one backing array.
func (h *Host) rrGroups() []*rrProject {
	var groups []*rrProject
	find := func(p *Project) *rrProject {
		for _, g := range groups {
			if g.p == p {
				return g
			}
		}
		g := &rrProject{p: p, share: shareOf(p)}
		groups = append(groups, g)
		return g
	}
	order := h.deadlineOrder()
	n := 0
	for _, t := range order {
		if t.State != TaskDone {
			find(t.Project).missed++ // a count, for now
			n++
		}
	}
	backing := make([]simTask, n)
	for _, g := range groups {
		g.tasks, backing = backing[:0:g.missed], backing[g.missed:]
		g.missed = 0
	}
	for _, t := range order {
		if t.State != TaskDone {
			g := find(t.Project)
			g.tasks = append(g.tasks, simTask{task: t, rem: t.Remaining(), deadline: t.Deadline})
		}
	}
	return groups
}

// splitCPUs gives each project its share of ncpus, capped at its number of
// tasks, handing what a capped project cannot use to the others.
func splitCPUs(groups []*rrProject, ncpus float64) {
	for _, g := range groups {
		g.capped = false
	}
	for {
		sum := 0.0
		for _, g := range groups {
			if !g.capped {
				sum += g.share
			}
		}
		used := 0.0
		for _, g := range groups {
			if n := float64(len(g.tasks)); !g.capped && ncpus*g.share/sum >= n {
				g.cpus, g.capped = n, true
				used += n
			}
		}
		if used == 0 {
			for _, g := range groups {
				if !g.capped {
					g.cpus = ncpus * g.share / sum
				}
			}
			return
		}
		ncpus -= used
	}
}
