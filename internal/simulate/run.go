package simulate

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/taskserver/taskserver/internal/clientpolicy"
	"github.com/taskserver/taskserver/internal/simreport"
)

// stallStep is how far a host's next wake-up is pushed when the policy asks
// for one at or before the present (a conservative NextRPCTime, or an RPC the
// policy wants again at the same instant), so that simulated time always
// moves on.
const stallStep = 1.0

// finishSlack absorbs floating-point error when a task's accumulated CPU
// reaches its true runtime at the wake-up computed for that moment.
const finishSlack = 1e-6

// runOptions are knobs for the property tests; Run uses the zero value.
type runOptions struct {
	// fixedJitter passes 0.5 as every back-off's random number: with
	// rpc_backoff min = max it makes every failed host retry on the same
	// fixed period, the client an RPC storm comes from.
	fixedJitter bool
	// checkFeasible asks the policy after every fetch whether the host's
	// queue can still meet all its deadlines.
	checkFeasible bool
	// afterWake, when set, sees each host after each of its wake-ups.
	afterWake func(h *host, now float64)
}

// runStats are the engine's own counters, for tests and benchmarks.
type runStats struct {
	wakeups int64
	// stalls counts wake-ups the policy asked for at or before the present.
	stalls int64
	// overbooked counts wake-ups at which a host ran more tasks than it has CPUs.
	overbooked int64
	// fetches and infeasibleFetches count replies with tasks, and those after
	// which the host's queue was infeasible (only with checkFeasible).
	fetches, infeasibleFetches int64
}

// sim is one run in progress.
type sim struct {
	sc      Scenario
	opts    runOptions
	end     float64
	sample  float64
	rec     *simreport.Recorder
	servers []*server
	hosts   []*host
	queue   wakeQueue
	stats   runStats
	cpus    int
	hw      hwCounters
	// gpuHosts and gpus count the hosts with GPUs and their GPUs.
	gpuHosts, gpus int64
	mtHosts        int64 // hosts with 4 CPUs or more
}

// hwCounters are the per-resource figures of the report's Hardware.
type hwCounters struct {
	GPUTasks, MTTasks               int64
	cpuBusy, cpuAvail               float64
	gpuBusy, gpuAvail               float64
	gpuHostCPUBusy, gpuHostCPUAvail float64
}

// Run simulates the scenario (filling in its defaults first) and returns the
// report of the run. It is deterministic for a scenario, WallSeconds apart.
// It stops early with ctx's error when ctx ends.
func Run(ctx context.Context, sc Scenario) (simreport.Report, error) {
	start := time.Now()
	s, err := newSim(sc, runOptions{})
	if err != nil {
		return simreport.Report{}, err
	}
	if err := s.run(ctx); err != nil {
		return simreport.Report{}, err
	}
	return s.report(time.Since(start)), nil
}

func newSim(sc Scenario, opts runOptions) (*sim, error) {
	sc = sc.Normalized()
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	s := &sim{
		sc:     sc,
		opts:   opts,
		end:    sc.Duration.Seconds(),
		sample: sc.SampleEvery.Seconds(),
	}
	names := make([]string, len(sc.Projects))
	for j, p := range sc.Projects {
		names[j] = p.Name
		srv, err := newServer(p, s.end)
		if err != nil {
			return nil, err
		}
		s.servers = append(s.servers, srv)
	}
	s.rec = simreport.NewRecorder(names, s.sample)
	cfg := policyConfig(sc)
	share := func(j int) float64 { return sc.Projects[j].Share }
	s.hosts = make([]*host, sc.Hosts)
	s.queue = make(wakeQueue, 0, sc.Hosts)
	for i := range s.hosts {
		h := newHost(sc, i, cfg)
		s.hosts[i] = h
		s.cpus += h.policy.NCPUs
		if h.gpu != nil {
			s.gpuHosts++
			s.gpus += int64(h.gpu.NCPUs)
		}
		if h.policy.NCPUs >= 4 {
			s.mtHosts++
		}
		for k, w := range h.targets(share) {
			s.rec.AddTarget(h.projects[k], w)
		}
		s.queue.push(wakeup{at: h.toggleAt, host: h.index})
	}
	return s, nil
}

// run processes wake-ups in time order until the end of the scenario, then
// brings every host to the end and counts the deadlines already lost.
func (s *sim) run(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("simulate %s: %w", s.sc.Name, err)
	}
	for len(s.queue) > 0 && s.queue[0].at < s.end {
		w := s.queue.pop()
		s.wake(s.hosts[w.host], w.at)
		s.stats.wakeups++
		if s.stats.wakeups%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("simulate %s: %w", s.sc.Name, err)
			}
		}
	}
	for _, h := range s.hosts {
		s.advance(h, s.end)
		for _, pol := range h.policies() {
			for _, t := range pol.Tasks {
				// Unreported past its deadline: unfinished, or finished
				// but certain to be reported late.
				if t.Deadline < s.end {
					s.rec.Missed(h.projects[h.local(t.Project)])
				}
			}
		}
	}
	return ctx.Err()
}

func (s *sim) report(wall time.Duration) simreport.Report {
	var hw *simreport.Hardware
	if s.gpuHosts > 0 || s.hw.MTTasks > 0 {
		frac := func(busy, avail float64) float64 {
			if avail > 0 {
				return busy / avail
			}
			return 0
		}
		hw = &simreport.Hardware{GPUHosts: s.gpuHosts, GPUs: s.gpus, MTHosts: s.mtHosts, GPUTasks: s.hw.GPUTasks, MTTasks: s.hw.MTTasks,
			CPUBusyFrac: frac(s.hw.cpuBusy, s.hw.cpuAvail), GPUBusyFrac: frac(s.hw.gpuBusy, s.hw.gpuAvail),
			GPUHostCPUBusyFrac: frac(s.hw.gpuHostCPUBusy, s.hw.gpuHostCPUAvail)}
	}
	return s.rec.Report(simreport.Report{
		Hardware:        hw,
		Clock:           "simulated",
		Scenario:        s.sc.Name,
		Strategy:        s.sc.Strategy,
		RuntimeStat:     s.sc.RuntimeStat,
		Hosts:           len(s.hosts),
		CPUs:            s.cpus,
		DurationSeconds: s.end,
		WallSeconds:     wall.Seconds(),
	})
}

// wake brings a host to now and lets its policy act: finished tasks, the CPU
// scheduler, scheduler RPCs; then queues the host's next wake-up.
func (s *sim) wake(h *host, now float64) {
	s.advance(h, now)
	reschedule := false
	if now >= h.toggleAt {
		h.toggle(now)
		reschedule = h.on
	}
	if !h.on {
		s.queue.push(wakeup{at: h.toggleAt, host: h.index})
		return
	}
	h.sync(now)
	for _, pol := range h.policies() {
		for _, t := range pol.Tasks {
			if t.State == clientpolicy.TaskRunning && t.CPU >= h.trueCPU[t]-finishSlack {
				t.CPU = h.trueCPU[t]
				pol.TaskFinished(t, now)
				s.rec.Completed(h.projects[h.local(t.Project)])
				switch {
				case pol == h.gpu:
					s.hw.GPUTasks++
				case t.NCPUs > 1:
					s.hw.MTTasks++
				}
				reschedule = true
			}
		}
	}
	if reschedule || now >= h.nextSchedule() {
		h.schedule(now)
	}
	if s.contact(h, now) > 0 {
		// One pass of the CPU scheduler for all the tasks that arrived.
		h.schedule(now)
		if s.opts.checkFeasible {
			s.stats.fetches++
			if !h.policy.Feasible(now) {
				s.stats.infeasibleFetches++
			}
		}
	}
	if s.opts.afterWake != nil {
		s.opts.afterWake(h, now)
	}
	s.queue.push(wakeup{at: s.nextWake(h, now), host: h.index})
}

// nextWake is the earliest of the host's next task completion, scheduling
// period end, possible RPC and on/off change.
func (s *sim) nextWake(h *host, now float64) float64 {
	next := h.toggleAt
	h.sync(now)
	for _, pol := range h.policies() {
		running, busy := 0, 0.0
		for _, t := range pol.Tasks {
			if t.State == clientpolicy.TaskRunning {
				running++
				busy += max(t.NCPUs, 1)
				next = min(next, now+h.trueCPU[t]-t.CPU)
			}
		}
		// A task wider than the host may run alone.
		if running > 1 && busy > float64(pol.NCPUs)+1e-9 {
			s.stats.overbooked++
		}
		next = min(next, pol.NextSchedule(), pol.NextRPCTime(now))
	}
	if !(next > now) { // also catches NaN
		s.stats.stalls++
		next = now + stallStep
	}
	return next
}

// advance accounts the host's computing from the last time it was brought
// up to date until to: each running task gains one CPU second per second
// while the host is on.
func (s *sim) advance(h *host, to float64) {
	from := h.last
	if !(to > from) {
		return
	}
	h.last = to
	if !h.on {
		return
	}
	dt := to - from
	ncpus := float64(h.policy.NCPUs)
	s.rec.AddAvailable(ncpus * dt)
	var cpuBusy, gpuBusy float64
	for _, pol := range h.policies() {
		for _, t := range pol.Tasks {
			if t.State != clientpolicy.TaskRunning {
				continue
			}
			gain := min(dt, h.trueCPU[t]-t.CPU)
			if gain <= 0 {
				continue
			}
			t.CPU += gain
			width := max(t.NCPUs, 1)
			if pol == h.gpu {
				gpuBusy += gain * width
				continue // the report's shares are of the CPUs
			}
			cpuBusy += gain * width
			k := h.local(t.Project)
			h.cpu[k] += gain * width
			s.recordCPU(h.projects[k], from, from+gain, width)
		}
	}
	s.hw.cpuBusy += min(cpuBusy, ncpus*dt)
	s.hw.cpuAvail += ncpus * dt
	if h.gpu != nil {
		ngpus := float64(h.gpu.NCPUs)
		s.hw.gpuBusy += min(gpuBusy, ngpus*dt)
		s.hw.gpuAvail += ngpus * dt
		s.hw.gpuHostCPUBusy += min(cpuBusy, ncpus*dt)
		s.hw.gpuHostCPUAvail += ncpus * dt
	}
}

// recordCPU records CPU computed for project j from..to on width CPUs,
// split at the series' interval ends so each interval gets what was
// computed in it.
func (s *sim) recordCPU(j int, from, to, width float64) {
	for from < to {
		seg := min(to, (math.Floor(from/s.sample)+1)*s.sample)
		s.rec.CPU(j, seg, (seg-from)*width)
		from = seg
	}
}

// contact makes the RPCs the host's policy wants now, each project at most
// once per wake-up, and returns how many tasks arrived.
func (s *sim) contact(h *host, now float64) int {
	clear(h.contacted)
	received := 0
	for {
		h.sync(now)
		req, ok := h.policy.NextRPC(now)
		if !ok && h.gpu != nil {
			req, ok = h.gpu.NextRPC(now)
		}
		if !ok {
			return received
		}
		k := h.local(req.Project)
		if h.contacted[k] {
			return received
		}
		h.contacted[k] = true
		received += s.rpc(h, k, req, now)
	}
}

// rpc is one scheduler RPC from host h to its k-th project, answered at once
// by the project's server model. It returns how many tasks arrived; the
// caller runs the CPU scheduler for them.
func (s *sim) rpc(h *host, k int, req clientpolicy.WorkRequest, now float64) int {
	j := h.projects[k]
	srv := s.servers[j]
	p := h.policy.Projects[k]
	failed := srv.down(now)
	srv.countRPC(now)
	s.rec.RPC(j, now, failed)
	if failed {
		h.policy.RPCFailed(p, now, s.jitter(h))
		return 0
	}

	// Every finished task of the project goes in the request.
	for _, pol := range h.policies() {
		var done []*clientpolicy.Task
		for _, t := range pol.Tasks {
			if t.Project == pol.Projects[k] && t.State == clientpolicy.TaskDone {
				done = append(done, t)
			}
		}
		for _, t := range done {
			s.rec.Reported(j, srv.countReport(t, now))
			pol.RemoveTask(t)
			delete(h.trueCPU, t)
		}
	}

	// Each resource asks for what it needs (the policy that chose the RPC
	// decided its own figure).
	cpuSecs := req.Seconds
	if req.Project != p {
		cpuSecs = h.policy.WorkRequestSeconds(p, now)
	}
	overloaded := srv.overloaded(now)
	received := 0
	if !overloaded {
		received = s.fetch(h, h.policy, p, k, cpuSecs, now, false, h.flops)
	}
	h.policy.RPCSucceeded(p, now, clientpolicy.Reply{
		RequestDelay: srv.project.Server.RequestDelay.Seconds(),
		AskedSeconds: cpuSecs,
		NewTasks:     received,
		Overloaded:   overloaded,
	}, s.jitter(h))
	if h.gpu == nil {
		return received
	}
	gp := h.gpu.Projects[k]
	gpuSecs := req.Seconds
	if req.Project != gp {
		gpuSecs = h.gpu.WorkRequestSeconds(gp, now)
	}
	got := 0
	switch {
	case srv.project.GPUJob == nil:
		gp.NoApps = true // the reply's <no_rsc_apps>
		gpuSecs = 0
	case !overloaded:
		got = s.fetch(h, h.gpu, gp, k, gpuSecs, now, true, h.gpuFlops)
	}
	h.gpu.RPCSucceeded(gp, now, clientpolicy.Reply{
		RequestDelay: srv.project.Server.RequestDelay.Seconds(),
		AskedSeconds: gpuSecs,
		NewTasks:     got,
		Overloaded:   overloaded,
	}, s.jitter(h))
	return received + got
}

// fetch asks the server model of h's k-th project for seconds of work for
// one of h's resources (pol, its GPUs if gpu, where the project is p), at
// speed flops per instance, and adds what it sends. It returns how many
// tasks arrived.
func (s *sim) fetch(h *host, pol *clientpolicy.Host, p *clientpolicy.Project, k int, seconds, now float64,
	gpu bool, flops float64) int {
	if !(seconds > 0) {
		return 0
	}
	j := h.projects[k]
	srv := s.servers[j]
	if srv.noWork(now) {
		s.rec.NoWork(j)
		return 0
	}
	received := 0
	var est float64
	_, jobs, short := srv.decide(h, k, gpu, seconds, now)
	if short != "" {
		s.rec.Shortfall(j, short)
	}
	if len(jobs) == 0 {
		s.rec.NoWork(j)
		return 0
	}
	for _, nt := range tasks(jobs, flops, float64(h.policy.NCPUs), now, h.rng) {
		h.nextID++
		t := &clientpolicy.Task{ID: h.nextID, Project: p, EstCPU: nt.estCPU, Deadline: nt.deadline, Received: now}
		if nt.ncpus > 1 {
			t.NCPUs = nt.ncpus
		}
		pol.AddTask(t)
		h.trueCPU[t] = nt.trueCPU
		est += nt.estCPU * nt.ncpus
		received++
	}
	s.rec.Fetched(j, received, est)
	return received
}

// jitter is the random number of a back-off.
func (s *sim) jitter(h *host) float64 {
	if s.opts.fixedJitter {
		return 0.5
	}
	return h.rng.Float64()
}
