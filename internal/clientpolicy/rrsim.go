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
	for _, t := range h.Tasks {
		if t.State != TaskDone {
			q = append(q, simTask{task: t, rem: t.Remaining(), deadline: t.Deadline})
		}
	}
	slices.SortStableFunc(q, func(a, b simTask) int { return byDeadline(a.task, b.task) })
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
// finish after their deadlines.
func (h *Host) rrDeadlinesMissed(now float64) map[*Project]int {
	af := h.activeFrac()
	var groups []*rrProject
	index := map[*Project]int{}
	for _, s := range h.simQueue() {
		i, ok := index[s.task.Project]
		if !ok {
			i = len(groups)
			index[s.task.Project] = i
			groups = append(groups, &rrProject{p: s.task.Project, share: shareOf(s.task.Project)})
		}
		groups[i].tasks = append(groups[i].tasks, s)
	}
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
			n := g.running()
			w := 0
			for i := range n {
				s := g.tasks[i]
				s.rem -= step * min(1, g.cpus-float64(i)) * af
				if finishedIn(s) {
					if !onTime(now, s.deadline) {
						g.missed++
					}
					continue
				}
				g.tasks[w] = s
				w++
			}
			if w < n {
				g.tasks = append(g.tasks[:w], g.tasks[n:]...)
			}
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

// splitCPUs gives each project its share of ncpus, capped at its number of
// tasks, handing what a capped project cannot use to the others.
func splitCPUs(groups []*rrProject, ncpus float64) {
	open := slices.Clone(groups)
	for len(open) > 0 {
		sum := 0.0
		for _, g := range open {
			sum += g.share
		}
		used := 0.0
		rest := open[:0]
		for _, g := range open {
			if n := float64(len(g.tasks)); ncpus*g.share/sum >= n {
				g.cpus = n
				used += n
				continue
			}
			rest = append(rest, g)
		}
		if used == 0 {
			for _, g := range rest {
				g.cpus = ncpus * g.share / sum
			}
			return
		}
		ncpus -= used
		open = rest
	}
}
