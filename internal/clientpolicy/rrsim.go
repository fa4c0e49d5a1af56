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

// edfFeasible simulates EDF from now over q (earliest deadline first; it
// is consumed) and reports whether every task finishes by its deadline.
func edfFeasible(now float64, q []simTask, ncpus int, af float64) bool {
	for len(q) > 0 {
		n := min(ncpus, len(q))
		step := math.Inf(1)
		for i := range n {
			step = min(step, q[i].rem/af)
		}
		now += step
		kept := q[:0]
		for i, s := range q {
			if i < n {
				s.rem -= step * af
				if s.rem <= 1e-9*max(1, s.task.EstCPU) {
					if !onTime(now, s.deadline) {
						return false
					}
					continue
				}
			}
			kept = append(kept, s)
		}
		q = kept
	}
	return true
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
	byProject := map[*Project][]*simTask{}
	var projects []*Project
	q := h.simQueue()
	for i := range q {
		p := q[i].task.Project
		if _, ok := byProject[p]; !ok {
			projects = append(projects, p)
		}
		byProject[p] = append(byProject[p], &q[i])
	}
	missed := make(map[*Project]int, len(projects))
	cpus := make(map[*Project]float64, len(projects))
	for len(projects) > 0 {
		h.splitCPUs(projects, byProject, cpus)
		// Task i of a project (deadline order) gets min(1, cpus-i) CPUs.
		step := math.Inf(1)
		for _, p := range projects {
			for i, s := range byProject[p] {
				if r := min(1, cpus[p]-float64(i)); r > 0 {
					step = min(step, s.rem/(r*af))
				}
			}
		}
		if math.IsInf(step, 1) {
			break // cannot happen: some project has a CPU
		}
		now += step
		kept := projects[:0]
		for _, p := range projects {
			left := byProject[p][:0]
			for i, s := range byProject[p] {
				if r := min(1, cpus[p]-float64(i)); r > 0 {
					s.rem -= step * r * af
				}
				if s.rem <= 1e-9*max(1, s.task.EstCPU) {
					if !onTime(now, s.deadline) {
						missed[p]++
					}
					continue
				}
				left = append(left, s)
			}
			byProject[p] = left
			if len(left) > 0 {
				kept = append(kept, p)
			}
		}
		projects = kept
	}
	return missed
}

// splitCPUs gives each project its share of the CPUs, capped at its number
// of tasks, handing what a capped project cannot use to the others.
func (h *Host) splitCPUs(projects []*Project, tasks map[*Project][]*simTask, cpus map[*Project]float64) {
	left := float64(h.ncpus())
	open := slices.Clone(projects)
	for len(open) > 0 {
		sum := 0.0
		for _, p := range open {
			sum += shareOf(p)
		}
		used := 0.0
		rest := open[:0]
		for _, p := range open {
			if n := float64(len(tasks[p])); left*shareOf(p)/sum >= n {
				cpus[p] = n
				used += n
				continue
			}
			rest = append(rest, p)
		}
		if used == 0 {
			for _, p := range rest {
				cpus[p] = left * shareOf(p) / sum
			}
			return
		}
		left -= used
		open = rest
	}
}
