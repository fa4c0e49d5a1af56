package clientpolicy

import (
	"math"
	"slices"
)

// chooseEDF is seed 001's CPU scheduler. A round-robin simulation of the
// current queue finds deadlines_missed(P) for each project; the projects
// with misses, earliest deadline first, get CPUs for that many of their
// tasks in deadline order; the remaining CPUs go by anticipated short-term
// debt. Between periods the running tasks keep their CPUs unless a task at
// risk needs one.
//
// On top of the seed, a guard keeps a queue that EDF can finish in time
// finishable: if the queue is feasible now but would not be after running
// the chosen set until the next scheduling decision, the earliest-deadline
// tasks are forced onto CPUs one at a time until it would be (with all
// CPUs forced the choice is EDF itself, which keeps a feasible queue
// feasible). The round-robin test alone misses deadlines that are only at
// risk because the scheduler will not look again for a period.
func (h *Host) chooseEDF(now float64, full bool) []*Task {
	atRisk := h.atRisk(now)
	choose := func(forced int) []*Task {
		for _, p := range h.Projects {
			p.anticipated = p.STD
		}
		pk := h.newPicker()
		for _, t := range pk.ready[:min(forced, len(pk.ready))] {
			pk.take(t)
		}
		for _, t := range atRisk {
			pk.take(t)
		}
		if !full {
			pk.fill(func(t *Task) bool { return t.State == TaskRunning })
		}
		pk.fill(nil)
		return pk.chosen
	}

	chosen := choose(0)
	if h.edfGuardOff || !h.Feasible(now) {
		return chosen
	}
	periodEnd := h.periodStart + h.cfg().SchedPeriod
	for forced := 1; forced <= h.ncpus() && !h.feasibleAfter(now, chosen, periodEnd); forced++ {
		chosen = choose(forced)
	}
	return chosen
}

// deadlineCushion is how long before its deadline the round-robin test
// wants a task finished. The real client uses its whole minimum buffer
// (ConnectPeriod here) as this cushion: time it may be unable to compute
// or report. The simulation's loss is time the host is off, which the
// average rate ActiveFrac hides: a host that has been on 70% of the time
// can be off for a whole night just before a deadline. So the cushion is
// the buffer scaled by sqrt(1 - ActiveFrac): none for a host that is
// always on (whose deadlines the full cushion would put all at risk when
// they are shorter than the buffer, handing such a project the CPUs), and
// most of the buffer for one often off.
func (h *Host) deadlineCushion() float64 {
	return h.cfg().ConnectPeriod * math.Sqrt(1-h.activeFrac())
}

// atRisk lists, in the order seed 001 schedules them, the tasks of every
// project the round-robin simulation says will miss deadlines (less the
// cushion): projects by
// earliest deadline, and for each project deadlines_missed(P) of its tasks
// in deadline order (running first among equal deadlines).
func (h *Host) atRisk(now float64) []*Task {
	missed := h.rrDeadlinesMissed(now, h.deadlineCushion())
	var projects []*Project
	for _, p := range h.Projects {
		if missed[p] > 0 {
			projects = append(projects, p)
		}
	}
	if len(projects) == 0 {
		return nil
	}
	queues := make(map[*Project][]*Task, len(projects))
	for _, p := range projects {
		q := h.runnable(p)
		slices.SortStableFunc(q, func(a, b *Task) int {
			if c := byDeadline(a, b); c != 0 {
				return c
			}
			return stateRank(a.State) - stateRank(b.State)
		})
		queues[p] = q
	}
	slices.SortStableFunc(projects, func(a, b *Project) int {
		if c := byDeadline(queues[a][0], queues[b][0]); c != 0 {
			return c
		}
		return h.projectIndex(a) - h.projectIndex(b)
	})
	var ts []*Task
	for _, p := range projects {
		q := queues[p]
		ts = append(ts, q[:min(missed[p], len(q))]...)
	}
	return ts
}

// feasibleAfter reports whether the queue stays feasible under EDF if the
// chosen tasks (those the last picker marked picked) run until the next
// scheduling decision: the first of them to finish, or periodEnd,
// whichever comes first. Tasks that finish in that time must finish by
// their deadlines.
func (h *Host) feasibleAfter(now float64, chosen []*Task, periodEnd float64) bool {
	af := h.activeFrac()
	horizon := periodEnd - now
	for _, t := range chosen {
		horizon = min(horizon, t.Remaining()/af)
	}
	horizon = max(horizon, 0)
	q := h.simQueue()
	end := now + horizon
	kept := q[:0]
	for _, s := range q {
		if s.task.picked {
			if s.rem <= horizon*af {
				if !onTime(now+s.rem/af, s.deadline) {
					return false
				}
				continue
			}
			s.rem -= horizon * af
		}
		kept = append(kept, s)
	}
	return edfFeasible(end, kept, h.ncpus(), af)
}

// onTime reports whether a task finishing at finish meets deadline, with
// a tolerance for the rounding of the simulations.
func onTime(finish, deadline float64) bool {
	return finish <= deadline+1e-6*max(1, math.Abs(deadline))
}
