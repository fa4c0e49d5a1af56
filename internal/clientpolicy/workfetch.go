package clientpolicy

import (
	"math"
	"slices"
)

// Urgency is how much the host needs work (seed 000).
type Urgency int

// The urgency levels, least urgent first.
const (
	// DontNeedWork: every project has work for more than T.
	DontNeedWork Urgency = iota
	// NeedWork: some project will starve within T.
	NeedWork
	// NeedWorkImmediately: some project, and so a CPU, is starved now.
	NeedWorkImmediately
)

func (u Urgency) String() string {
	switch u {
	case DontNeedWork:
		return "dont_need_work"
	case NeedWork:
		return "need_work"
	case NeedWorkImmediately:
		return "need_work_immediately"
	}
	return "unknown"
}

// WorkRequest is a decision to contact a project.
type WorkRequest struct {
	Project *Project
	// Seconds is the CPU seconds of work to ask for, (2T - S) x
	// avg_proc_rate(P); 0 asks for none (a report-only session).
	Seconds float64
	Urgency Urgency
	// Report says the project has finished tasks to report; they go in
	// the request whatever its purpose.
	Report bool
}

// prrs is p's fraction of the resource share of the
// potentially runnable projects (seed 001's prrs), counting p itself.
func (h *Host) prrs(p *Project) float64 {
	sum := 0.0
	for _, q := range h.Projects {
		if q != p && h.potentiallyRunnable(q) {
			sum += shareOf(q)
		}
	}
	return shareOf(p) / (sum + shareOf(p))
}

// minResults is how many unfinished tasks p needs so its share of the
// CPUs is never idle: ceil(NCPUs x prrs(P)).
func (h *Host) minResults(p *Project) int {
	return max(1, int(math.Ceil(float64(h.ncpus())*h.prrs(p)-1e-9)))
}

// avgProcRate is the CPU seconds p gets per wall second: its share
// fraction x NCPUs x active fraction.
func (h *Host) avgProcRate(p *Project) float64 {
	return h.prrs(p) * float64(h.ncpus()) * h.activeFrac()
}

// queuedCPU is the estimated CPU seconds of p's unfinished tasks, leaving
// out the k with the latest deadlines, and how many of the counted tasks
// are running (for how fast the sum shrinks).
func (h *Host) queuedCPU(p *Project, k int) (sum float64, running int) {
	ts := h.runnable(p)
	for _, t := range ts[:max(0, len(ts)-max(k, 0))] {
		sum += t.Remaining()
		if t.State == TaskRunning {
			running++
		}
	}
	return sum, running
}

// ettprc is seed 000's ETTPRC(P, k): the wall seconds until p has only k
// unfinished tasks left, at its average processing rate.
func (h *Host) ettprc(p *Project, k int) float64 {
	sum, _ := h.queuedCPU(p, k)
	return sum / h.avgProcRate(p)
}

// fetchPlan is the work-fetch policy's verdict at one moment.
type fetchPlan struct {
	urgency Urgency
	request map[*Project]float64 // work_request_size(P), CPU seconds
	ttwd    map[*Project]float64 // time_until_work_done(P), wall seconds
}

// fetchEligible reports whether p may be asked for work at now: not in
// RPC back-off (unless the host contacts it anyway) nor in no-work
// back-off.
func fetchEligible(p *Project, now float64, contacting *Project) bool {
	return (p.MinRPC <= now || p == contacting) && p.WorkFetchAt <= now
}

// workFetch is seed 000's work-fetch computation over the projects that
// may be asked now (contacting counts as one whatever its MinRPC): S =
// ETTPRC(P, min_results(P)-1); S at most T means the project will starve
// within T (NeedWork; S = 0, starved now), and each project is asked for
// (2T - S) x avg_proc_rate(P), or nothing when no project needs work.
func (h *Host) workFetch(now float64, contacting *Project) fetchPlan {
	T := h.cfg().ConnectPeriod
	plan := fetchPlan{request: map[*Project]float64{}, ttwd: map[*Project]float64{}}
	for _, p := range h.Projects {
		if !fetchEligible(p, now, contacting) {
			continue
		}
		// S <= T is tested as sum <= T x rate, the same expression
		// starveTime uses, so both agree to the last bit.
		sum, _ := h.queuedCPU(p, h.minResults(p)-1)
		rate := h.avgProcRate(p)
		s := sum / rate
		plan.ttwd[p] = s
		if sum <= T*rate {
			u := NeedWork
			if sum == 0 {
				u = NeedWorkImmediately
			}
			plan.urgency = max(plan.urgency, u)
		}
		plan.request[p] = max(0, (2*T-s)*h.avgProcRate(p))
	}
	if plan.urgency == DontNeedWork {
		clear(plan.request)
	}
	return plan
}

// WorkRequestSeconds is the work to ask p for if the host contacts it now
// anyway, for example to report results: its work_request_size, 0 if no
// project needs work or p is in no-work back-off.
func (h *Host) WorkRequestSeconds(p *Project, now float64) float64 {
	return h.workFetch(now, p).request[p]
}

// starveTime is the earliest time p's work buffer can fall to T or below
// if nothing arrives or finishes: the counted tasks shrink at most as fast
// as those of them that are running compute (one CPU second per second).
func (h *Host) starveTime(p *Project, now float64) float64 {
	T := h.cfg().ConnectPeriod
	sum, running := h.queuedCPU(p, h.minResults(p)-1)
	excess := sum - T*h.avgProcRate(p)
	switch {
	case excess <= 0:
		return now
	case running == 0:
		return math.Inf(1)
	}
	if t := now + excess/float64(running); t > now {
		return t
	}
	// Too close to now to tell apart: the next representable instant, so
	// an event loop moves on.
	return math.Nextafter(now, math.Inf(1))
}

// doneTasks returns p's finished tasks, earliest deadline first.
func (h *Host) doneTasks(p *Project) []*Task {
	var ts []*Task
	for _, t := range h.Tasks {
		if t.Project == p && t.State == TaskDone {
			ts = append(ts, t)
		}
	}
	slices.SortStableFunc(ts, byDeadline)
	return ts
}
