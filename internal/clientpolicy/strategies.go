package clientpolicy

import (
	"math"
	"slices"
)

// The seed-004 strategies ("worker choice strategies") mapped onto a volunteer host: the workers are
// the attached projects, a task is chosen each time a CPU is free, and the resource shares are the
// weights. They are not preemptive: a running task keeps its CPU until it finishes, so they only decide
// what starts on a free CPU.
//
// Shares are fractions over the projects that have unfinished tasks (seed 000: a project with no
// runnable task is left out of the share split), so a project that has nothing to run neither holds
// CPUs back nor makes the others owe it for the time.
//
// Every strategy charges a project, when it starts one of its tasks, the project's runtime statistic
// (average or median of its completed runtimes): that is what the seed's predictions are made of. When
// the task finishes (or is removed) the difference between the CPU it really took and the charge is
// settled against the project. Without that settlement the shares would be honoured in task counts
// weighted by the statistic rather than in CPU seconds, and a median far from the mean (a skewed mix of
// task lengths) would shift the shares for good; with it, the statistic only orders the near future.

// minChargeFraction of the scheduling period is the least CPU a task start is charged, so a project
// whose tasks are estimated at nothing cannot take every CPU for free. It is relative because the live
// client runs the same policy on tasks of milliseconds (tests) and the simulator on tasks of hours: an
// absolute floor of a second would swamp millisecond tasks and turn every split into 1:1.
const minChargeFraction = 1e-3

// relEpsilon absorbs floating-point noise when comparing budgets and weights, relative to the weight.
const relEpsilon = 1e-9

// seed004State is the host's memory for the seed-004 strategies. The zero value is ready to use.
type seed004State struct {
	projects map[*Project]*seed004Project
	charged  map[*Task]*chargedTask
	pass     uint64 // counts scheduleSeed004 calls, to notice tasks removed since the last one

	// The round-robin position, shared by the weighted and the interleaved variant: whose turn it is
	// (an index into Host.Projects), in which round, and whether that turn's budget was already
	// credited (a turn spans calls: the project keeps the free CPUs until its budget is spent).
	turn     int
	round    int
	credited bool
}

// seed004Project is one project's part of seed004State.
type seed004Project struct {
	// predictedEnd is the fair-share strategy's task_end_prediction, in wall seconds: when the project
	// would have computed everything it was given if it got exactly its share of the host.
	predictedEnd float64
	// budget is what is left of the project's round-robin allowance, in CPU seconds. A task start
	// spends the project's runtime statistic even past zero; the overshoot is carried into its next
	// turns, which is what keeps long tasks from taking more than their share.
	budget float64
	// backlogged says the project still had a task waiting for a CPU after the last pass: it has been
	// queueing, not idle, so fair share keeps its prediction instead of moving it up to the present.
	backlogged bool
}

// chargedTask remembers what a task start was charged, to settle it when the task ends.
type chargedTask struct {
	project *Project
	charge  float64 // CPU seconds charged when it started
	cpuAt   float64 // the task's CPU seconds when it started (non-zero if it had run before)
	seen    uint64  // the last pass that found it among Host.Tasks
}

// seed004Pass is what one scheduleSeed004 call knows about the projects; none of it changes while the
// call hands out CPUs.
type seed004Pass struct {
	h   *Host
	now float64
	// startable is each project's tasks that may take a free CPU, in the order they get one.
	startable map[*Project][]*Task
	// fraction is each project's share among the projects with unfinished tasks; 0 for the others.
	fraction map[*Project]float64
	// runtime is each project's runtime statistic, in CPU seconds: what a start is charged.
	runtime map[*Project]float64
	// period is the scheduling period, which scales the round-robin weights.
	period float64
}

// scheduleSeed004 fills the free CPUs with tasks chosen by the configured seed-004 strategy and returns
// every task running after the call, in Host.Tasks order. It never preempts. A project gets a CPU only
// if it has a task to start (waiting, or preempted earlier): its preempted task first, else its waiting
// task with the earliest deadline. No CPU is left idle while any task can start.
func (h *Host) scheduleSeed004(now float64) []*Task {
	s := &h.s004
	ps, running := h.newSeed004Pass(now)
	s.settle(ps)
	if h.cfg().Strategy == StrategyFairShare {
		s.joinFairShare(ps)
	}
	for free := float64(h.ncpus()) - running; free > 1e-9; {
		p := s.choose(ps)
		if p == nil {
			break
		}
		t := ps.startable[p][0]
		free -= t.width()
		ps.startable[p] = ps.startable[p][1:]
		t.State = TaskRunning
		if _, ok := s.charged[t]; !ok {
			if s.charged == nil {
				s.charged = make(map[*Task]*chargedTask)
			}
			s.charged[t] = &chargedTask{project: p, charge: ps.runtime[p], cpuAt: t.CPU, seen: s.pass}
		}
	}
	for _, p := range h.Projects {
		s.state(p).backlogged = len(ps.startable[p]) > 0
	}
	return h.running()
}

// newSeed004Pass gathers the projects' startable tasks, share fractions and runtime statistics, and
// counts the running tasks.
func (h *Host) newSeed004Pass(now float64) (*seed004Pass, float64) {
	c := h.cfg()
	ps := &seed004Pass{
		h:         h,
		now:       now,
		startable: make(map[*Project][]*Task),
		fraction:  make(map[*Project]float64),
		runtime:   make(map[*Project]float64),
		period:    c.SchedPeriod,
	}
	running := 0.0
	estSum := make(map[*Project]float64)
	estN := make(map[*Project]int)
	unfinished := make(map[*Project]bool)
	for _, t := range h.Tasks {
		estSum[t.Project] += t.EstCPU
		estN[t.Project]++
		if t.State != TaskDone {
			unfinished[t.Project] = true
		}
		switch t.State {
		case TaskRunning:
			running += t.width()
		case TaskWaiting, TaskPreempted:
			ps.startable[t.Project] = append(ps.startable[t.Project], t)
		}
	}
	for _, ts := range ps.startable {
		slices.SortStableFunc(ts, startOrder)
	}
	total := 0.0
	for _, p := range h.Projects {
		if unfinished[p] && p.Share > 0 {
			total += p.Share
		}
	}
	for _, p := range h.Projects {
		if unfinished[p] && p.Share > 0 {
			ps.fraction[p] = p.Share / total
		}
		fallback := 0.0
		if estN[p] > 0 {
			fallback = estSum[p] / float64(estN[p])
		}
		ps.runtime[p] = max(p.stats.value(c.RuntimeStat, fallback), minChargeFraction*c.SchedPeriod)
	}
	return ps, running
}

// startOrder puts a project's startable tasks in the order they get a CPU: a preempted task (already
// has a slot directory) before a new one, then the earliest deadline, then arrival.
func startOrder(a, b *Task) int {
	if ra, rb := stateRank(a.State), stateRank(b.State); ra != rb {
		return ra - rb
	}
	return byDeadline(a, b)
}

// rate is the CPU seconds per wall second p gets at its share of the host (avg_proc_rate).
func (ps *seed004Pass) rate(p *Project) float64 {
	return ps.fraction[p] * float64(ps.h.ncpus()) * ps.h.activeFrac()
}

// weight is p's round-robin weight: the CPU seconds of tasks it may start per round, its share of the
// host's CPUs over one scheduling period.
func (ps *seed004Pass) weight(p *Project) float64 {
	return ps.fraction[p] * float64(ps.h.ncpus()) * ps.period
}

// state is p's part of the strategy state, created on first use.
func (s *seed004State) state(p *Project) *seed004Project {
	if s.projects == nil {
		s.projects = make(map[*Project]*seed004Project)
	}
	st := s.projects[p]
	if st == nil {
		st = &seed004Project{}
		s.projects[p] = st
	}
	return st
}

// settle books the difference between what each finished or removed task really took and what its
// start was charged: into the fair-share prediction (as wall time at the project's share of the host)
// and into the round-robin budget. A refund never lifts a budget above one turn's weight: a task that
// ended early gives its project back a turn, not a hoard.
func (s *seed004State) settle(ps *seed004Pass) {
	s.pass++
	if len(s.charged) == 0 {
		return
	}
	for _, t := range ps.h.Tasks {
		if c, ok := s.charged[t]; ok {
			c.seen = s.pass
		}
	}
	for t, c := range s.charged {
		if c.seen == s.pass && t.State != TaskDone {
			continue
		}
		diff := (t.CPU - c.cpuAt) - c.charge
		st := s.state(c.project)
		if rate := ps.rate(c.project); rate > 0 {
			st.predictedEnd += diff / rate
		}
		st.budget = min(st.budget-diff, ps.weight(c.project))
		delete(s.charged, t)
	}
}

// choose picks the project whose task starts on the next free CPU, nil when no project has a task to
// start, and charges it.
func (s *seed004State) choose(ps *seed004Pass) *Project {
	// Projects without a positive share only get CPUs nobody else can use.
	var fallback *Project
	weighted := false
	for _, p := range ps.h.Projects {
		if len(ps.startable[p]) == 0 {
			continue
		}
		if ps.fraction[p] > 0 {
			weighted = true
			break
		}
		if fallback == nil {
			fallback = p
		}
	}
	if !weighted {
		return fallback
	}
	switch ps.h.cfg().Strategy {
	case StrategyWRR:
		return s.chooseRoundRobin(ps, false)
	case StrategyIWRR:
		return s.chooseRoundRobin(ps, true)
	default:
		return s.chooseFairShare(ps)
	}
}

// joinFairShare moves up to the present the prediction of every project that has a task to start now
// but had none after the last pass: seed 004's max(current_time, task_end_prediction), which keeps a
// project from being owed anything for a time it had no work. "The present" is the prediction of the
// least advanced project that kept queueing, or the wall clock when none did: on a shared host a
// backlogged project's prediction runs ahead of or behind the wall clock (tasks are not preempted, the
// active fraction is an estimate), and a newcomer joins the queue where the queue is.
func (s *seed004State) joinFairShare(ps *seed004Pass) {
	present := math.Inf(1)
	for _, p := range ps.h.Projects {
		if st := s.state(p); st.backlogged && len(ps.startable[p]) > 0 && ps.fraction[p] > 0 {
			present = min(present, st.predictedEnd)
		}
	}
	if math.IsInf(present, 1) {
		present = ps.now
	}
	for _, p := range ps.h.Projects {
		if st := s.state(p); !st.backlogged && len(ps.startable[p]) > 0 {
			st.predictedEnd = max(st.predictedEnd, present)
		}
	}
}

// chooseFairShare is seed 004's fair share: the project with the lowest predictedEnd + runtime /
// avg_proc_rate, which then becomes its predictedEnd. Dividing by the project's processing rate makes
// it a weighted fair queue: a project with twice the share advances its prediction half as fast per
// CPU second and so gets twice the CPU. Ties go to the earlier attached project.
func (s *seed004State) chooseFairShare(ps *seed004Pass) *Project {
	var best *Project
	bestEnd := math.Inf(1)
	for _, p := range ps.h.Projects {
		rate := ps.rate(p)
		if len(ps.startable[p]) == 0 || rate <= 0 {
			continue
		}
		end := s.state(p).predictedEnd + ps.runtime[p]/rate
		if end < bestEnd {
			best, bestEnd = p, end
		}
	}
	if best != nil {
		s.state(best).predictedEnd = bestEnd
	}
	return best
}

// chooseRoundRobin is seed 004's weighted round robin (interleaved false) and interleaved weighted
// round robin (interleaved true), both as budgets of CPU seconds.
//
// Weighted: the projects take turns in Host.Projects order; a turn credits the project its whole
// weight and it keeps getting free CPUs while budget is left, each start spending its runtime statistic.
// Interleaved: the rounds are the distinct weights in increasing order w1 < w2 < ...; in round i every
// project whose weight is at least wi gets a turn credited wi - w(i-1). Over the rounds a project is
// credited exactly its weight, as in the plain variant, but the big projects' work is spread across the
// cycle instead of taken in one block. With weights 1, 2, 3 and tasks of one unit this starts
// A B C, B C, C.
//
// A project with nothing to start is skipped, is not credited, and loses any budget left (it builds
// nothing up). When nobody can start anything within a whole cycle (every budget overspent by long
// tasks), the cycles that would pass without a start are credited at once.
func (s *seed004State) chooseRoundRobin(ps *seed004Pass, interleaved bool) *Project {
	projects := ps.h.Projects
	n := len(projects)
	rounds := []float64{math.Inf(1)} // the plain variant: one round, every project credited its weight
	if interleaved {
		rounds = ps.distinctWeights()
	}
	quantum := func(p *Project, round int) float64 {
		w := ps.weight(p)
		if !interleaved {
			return w
		}
		if w < rounds[round]*(1-relEpsilon) {
			return 0
		}
		if round == 0 {
			return rounds[0]
		}
		return rounds[round] - rounds[round-1]
	}
	if s.round >= len(rounds) || s.turn >= n {
		s.turn, s.round, s.credited = 0, 0, false
	}

	cycle := n * len(rounds)
	for visits := 1; visits <= 8*cycle+n; visits++ {
		p := projects[s.turn]
		st := s.state(p)
		has := len(ps.startable[p]) > 0
		if q := quantum(p, s.round); has && q > 0 {
			if !s.credited {
				st.budget += q
				s.credited = true
			}
			if st.budget > relEpsilon*ps.weight(p) {
				st.budget -= ps.runtime[p]
				return p
			}
		} else if !has && st.budget > 0 {
			st.budget = 0
		}
		s.turn++
		s.credited = false
		if s.turn == n {
			s.turn = 0
			s.round = (s.round + 1) % len(rounds)
		}
		if visits%cycle == 0 {
			s.skipIdleCycles(ps)
		}
	}
	// Unreachable while budgets and weights are finite (skipIdleCycles leaves at most two cycles to
	// go); never leave a CPU idle regardless.
	for _, p := range projects {
		if len(ps.startable[p]) > 0 && ps.fraction[p] > 0 {
			s.state(p).budget -= ps.runtime[p]
			return p
		}
	}
	return nil
}

// skipIdleCycles credits at once the whole cycles in which no project with a task to start would get
// its budget above zero, leaving each at least one cycle short so the normal turns decide who is next.
func (s *seed004State) skipIdleCycles(ps *seed004Pass) {
	skip := math.Inf(1)
	for _, p := range ps.h.Projects {
		w := ps.weight(p)
		if len(ps.startable[p]) == 0 || w <= 0 {
			continue
		}
		skip = min(skip, math.Floor((relEpsilon*w-s.state(p).budget)/w)-1)
	}
	if skip < 1 || math.IsInf(skip, 1) {
		return
	}
	for _, p := range ps.h.Projects {
		if w := ps.weight(p); len(ps.startable[p]) > 0 && w > 0 {
			s.state(p).budget += skip * w
		}
	}
}

// distinctWeights is the interleaved variant's rounds: the projects' positive round weights, sorted,
// with values equal up to floating-point noise merged.
func (ps *seed004Pass) distinctWeights() []float64 {
	var ws []float64
	for _, p := range ps.h.Projects {
		if w := ps.weight(p); w > 0 {
			ws = append(ws, w)
		}
	}
	slices.Sort(ws)
	out := ws[:0]
	for _, w := range ws {
		if len(out) > 0 && w <= out[len(out)-1]*(1+relEpsilon) {
			continue
		}
		out = append(out, w)
	}
	if len(out) == 0 {
		return []float64{math.Inf(1)}
	}
	return out
}
