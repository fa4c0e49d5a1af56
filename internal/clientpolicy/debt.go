package clientpolicy

import "math"

// updateDebtV4 is seed 000's debt: a project with no runnable task has its
// debt reset to 0 and its share left out; every other project is owed its
// share (among projects with runnable tasks) of the total work done since
// the last call, minus the work it got.
func (h *Host) updateDebtV4(total float64) {
	shares := 0.0
	for _, p := range h.Projects {
		if p.hasWork {
			shares += shareOf(p)
		}
	}
	for _, p := range h.Projects {
		if !p.hasWork {
			p.Debt = 0
			continue
		}
		p.Debt += shareOf(p)/shares*total - p.workDone
	}
}

// updateSTD is seed 001's short-term debt, which the EDF scheduler uses
// for the CPUs no deadline needs. It is adjusted over the runnable
// projects by their share of the work those projects did, then normalised
// so the least is 0, and capped at maxSTD; a project without runnable
// tasks has none.
func (h *Host) updateSTD(maxSTD float64) {
	shares, total := 0.0, 0.0
	for _, p := range h.Projects {
		if p.hasWork {
			shares += shareOf(p)
			total += p.workDone
		}
	}
	least := math.Inf(1)
	for _, p := range h.Projects {
		if !p.hasWork {
			p.STD = 0
			continue
		}
		p.STD += shareOf(p)/shares*total - p.workDone
		least = min(least, p.STD)
	}
	for _, p := range h.Projects {
		if p.hasWork {
			p.STD = min(p.STD-least, maxSTD)
		}
	}
}

// inLTDSet reports whether p is potentially runnable (see
// queueView.potentiallyRunnable), from the hasWork account noted.
func inLTDSet(p *Project) bool { return !p.LastNoWork || p.hasWork }

// updateLTD is seed 001's long-term debt, which chooses the project to ask
// for work. It is adjusted over the potentially runnable projects by their
// share of the work those projects did. A project whose last work request
// got nothing accumulates none ("no work" replies do not build debt): its
// long-term debt may fall, never rise. The projects that do accumulate are
// normalised to mean 0; the others keep theirs.
func (h *Host) updateLTD() {
	shares, total := 0.0, 0.0
	for _, p := range h.Projects {
		if inLTDSet(p) {
			shares += shareOf(p)
			total += p.workDone
		}
	}
	sum, n := 0.0, 0
	for _, p := range h.Projects {
		if !inLTDSet(p) {
			continue
		}
		delta := shareOf(p)/shares*total - p.workDone
		if p.LastNoWork {
			p.LTD += min(delta, 0)
			continue
		}
		p.LTD += delta
		sum += p.LTD
		n++
	}
	if n == 0 {
		return
	}
	mean := sum / float64(n)
	for _, p := range h.Projects {
		if inLTDSet(p) && !p.LastNoWork {
			p.LTD -= mean
		}
	}
}
