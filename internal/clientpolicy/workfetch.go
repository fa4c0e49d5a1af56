package clientpolicy

import "math"

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

// queueView is what the work-fetch functions read, gathered in one pass
// over the queue: each project's unfinished tasks, earliest deadline
// first (in Project.queue, valid until the next view), and the resource
// share of the potentially runnable projects.
type queueView struct {
	h          *Host
	prShares   float64
	unfinished int // tasks not done
}

func (h *Host) view() queueView {
	v := queueView{h: h}
	order := h.deadlineOrder()
	for _, p := range h.Projects {
		p.queue = p.queue[:0]
	}
	for _, t := range order {
		if t.Project != nil {
			t.Project.queue = t.Project.queue[:0] // a project the host does not list
		}
	}
	for _, t := range order {
		if t.State != TaskDone && t.Project != nil {
			t.Project.queue = append(t.Project.queue, t)
			v.unfinished++
		}
	}
	for _, p := range h.Projects {
		if v.potentiallyRunnable(p) {
			v.prShares += shareOf(p)
		}
	}
	return v
}

// potentiallyRunnable reports whether p has unfinished tasks or may get
// some: a project whose last work request got nothing and that has
// nothing left to run is not.
func (v queueView) potentiallyRunnable(p *Project) bool {
	return !p.LastNoWork || len(p.queue) > 0
}

// prrs is p's fraction of the resource share of the potentially runnable
// projects (seed 001's prrs), counting p itself.
func (v queueView) prrs(p *Project) float64 {
	sum := v.prShares
	if !v.potentiallyRunnable(p) {
		sum += shareOf(p)
	}
	return shareOf(p) / sum
}

// minResults is how many unfinished tasks p needs so its share of the
// CPUs is never idle: ceil(NCPUs x prrs(P)).
func (v queueView) minResults(p *Project) int {
	return max(1, int(math.Ceil(float64(v.h.ncpus())*v.prrs(p)-1e-9)))
}

// avgProcRate is the CPU seconds p gets per wall second: its share
// fraction x NCPUs x active fraction.
func (v queueView) avgProcRate(p *Project) float64 {
	return v.prrs(p) * float64(v.h.ncpus()) * v.h.activeFrac()
}

// queuedCPU is the estimated CPU seconds of p's unfinished tasks, leaving
// out the k with the latest deadlines, and how many of the counted tasks
// are running (for how fast the sum shrinks).
func (v queueView) queuedCPU(p *Project, k int) (sum, running float64) {
	ts := p.queue
	for _, t := range ts[:max(0, len(ts)-max(k, 0))] {
		sum += t.Remaining() * t.width()
		if t.State == TaskRunning {
			running += t.width()
		}
	}
	return sum, running
}

// ettprc is seed 000's ETTPRC(P, k): the wall seconds until p has only k
// unfinished tasks left, at its average processing rate.
func (v queueView) ettprc(p *Project, k int) float64 {
	sum, _ := v.queuedCPU(p, k)
	return sum / v.avgProcRate(p)
}

// The same for a single question, for tests.
func (h *Host) minResults(p *Project) int        { return h.view().minResults(p) }
func (h *Host) ettprc(p *Project, k int) float64 { return h.view().ettprc(p, k) }

// fetchPlan is the work-fetch policy's verdict at one moment.
type fetchPlan struct {
	urgency Urgency
	request map[*Project]float64 // work_request_size(P), CPU seconds
	ttwd    map[*Project]float64 // time_until_work_done(P), wall seconds
}

// fetchEligible reports whether p may be asked for work at now: it has
// apps for the resource, and is not in RPC back-off (unless the host
// contacts it anyway) nor in no-work back-off.
func fetchEligible(p *Project, now float64, contacting *Project) bool {
	return !p.NoApps && (p.MinRPC <= now || p == contacting) && p.WorkFetchAt <= now
}

// overworked reports whether p has had more than a scheduling period of
// the whole host beyond its share (long-term debt below -SchedPeriod x
// NCPUs), as a project does whose tight deadlines make EDF run it first.
// While the host has a task for every CPU, such a project is not asked
// for work, so that over the long term the work fetch restores the shares
// EDF departs from (seed 001).
func (h *Host) overworked(p *Project) bool {
	return p.LTD < -h.cfg().SchedPeriod*float64(h.ncpus())
}

// fetchable reports whether p may be asked for work as far as its
// long-term debt goes: it is not overworked, or a CPU has nothing to run.
func (v queueView) fetchable(p *Project) bool {
	return !v.h.overworked(p) || v.unfinished < v.h.ncpus()
}

// workFetch is seed 000's work-fetch computation over the projects that
// may be asked now (contacting counts as one whatever its MinRPC): S =
// ETTPRC(P, min_results(P)-1); S at most T means the project will starve
// within T (NeedWork; S = 0, starved now), and each project is asked for
// (2T - S) x avg_proc_rate(P), or nothing when no project needs work.
// Overworked projects are left out while every CPU has a task.
func (h *Host) workFetch(now float64, contacting *Project, v queueView) fetchPlan {
	T := h.cfg().ConnectPeriod
	plan := fetchPlan{request: map[*Project]float64{}, ttwd: map[*Project]float64{}}
	for _, p := range h.Projects {
		if !fetchEligible(p, now, contacting) || !v.fetchable(p) {
			continue
		}
		// S <= T is tested as sum <= T x rate, the same expression
		// starveTime uses, so both agree to the last bit.
		sum, _ := v.queuedCPU(p, v.minResults(p)-1)
		rate := v.avgProcRate(p)
		s := sum / rate
		plan.ttwd[p] = s
		if sum <= T*rate {
			u := NeedWork
			if sum == 0 {
				u = NeedWorkImmediately
			}
			plan.urgency = max(plan.urgency, u)
		}
		plan.request[p] = max(0, (2*T-s)*rate)
	}
	if plan.urgency == DontNeedWork {
		clear(plan.request)
	}
	return plan
}

// WorkRequestSeconds is the work to ask p for if the host contacts it now
// anyway, for example to report results: its work_request_size, 0 if no
// project needs work, p is in no-work back-off, or p is overworked and
// every CPU has a task.
func (h *Host) WorkRequestSeconds(p *Project, now float64) float64 {
	return h.workFetch(now, p, h.view()).request[p]
}

// starveTime is the earliest time p's work buffer can fall to T or below
// if nothing arrives or finishes: the counted tasks shrink at most as fast
// as those of them that are running compute (one CPU second per second).
// An overworked project never runs low enough while every CPU has a
// task, and that takes a task finishing to change.
func (v queueView) starveTime(p *Project, now float64) float64 {
	T := v.h.cfg().ConnectPeriod
	sum, running := v.queuedCPU(p, v.minResults(p)-1)
	excess := sum - T*v.avgProcRate(p)
	switch {
	case !v.fetchable(p):
		return math.Inf(1) // until a task finishes
	case excess <= 0:
		return now
	case running == 0:
		return math.Inf(1)
	}
	if t := now + excess/running; t > now {
		return t
	}
	// Too close to now to tell apart: the next representable instant, so
	// an event loop moves on.
	return math.Nextafter(now, math.Inf(1))
}

// reportDue is, for each project with finished tasks, the earliest time
// one of them forces a report-result session.
func (h *Host) reportDue(c Config) map[*Project]float64 {
	due := map[*Project]float64{}
	for _, t := range h.Tasks {
		if t.State != TaskDone {
			continue
		}
		at := overdueAt(t, c)
		if d, ok := due[t.Project]; !ok || at < d {
			due[t.Project] = at
		}
	}
	return due
}
