package simulate

import (
	"math"
	"math/rand/v2"

	"github.com/taskserver/taskserver/internal/clientpolicy"
)

// host is one simulated volunteer: the client policy's state plus what the
// policy leaves to its caller (the true runtime of each task, the on/off
// periods, the clock up to which CPU has been accounted).
type host struct {
	index  int32
	policy *clientpolicy.Host
	// gpu is the client state of the host's GPUs (nil without), its
	// Projects parallel to policy.Projects; gpuFlops the speed of one.
	gpu      *clientpolicy.Host
	gpuFlops float64
	// projects[k] is the scenario index of policy.Projects[k].
	projects []int
	flops    float64 // per CPU
	onFrac   float64
	meanOn   float64
	// activity is the fraction of time on the host measures, the active
	// fraction its work fetch uses (seed 000: "continually updated");
	// onFrac is only what drives its on/off periods.
	activity clientpolicy.Activity
	// started is false until the host's client first starts (Population.StartWithin).
	started bool
	on      bool
	// toggleAt is the next start or on/off change; +Inf when none.
	toggleAt float64
	// last is the time up to which the host's CPU has been accounted.
	last float64
	// cpu is the CPU seconds computed for each of the host's projects.
	cpu []float64
	// trueCPU is the CPU time each task really takes; the policy only knows the estimate.
	trueCPU map[*clientpolicy.Task]float64
	nextID  int64
	rng     *rand.Rand
	// contacted is scratch space for one wake-up: projects already contacted.
	contacted []bool
}

// policyConfig is the client policy settings the scenario asks for.
func policyConfig(sc Scenario) clientpolicy.Config {
	reportAfter := sc.ReportAfter.Seconds()
	if reportAfter == 0 {
		reportAfter = clientpolicy.ReportImmediately
	}
	// The scenario was validated, so the names parse.
	strategy, _ := clientpolicy.ParseStrategy(sc.Strategy)
	stat, _ := clientpolicy.ParseRuntimeStat(sc.RuntimeStat)
	return clientpolicy.Config{
		Strategy:            strategy,
		RuntimeStat:         stat,
		ConnectPeriod:       sc.ConnectPeriod.Seconds(),
		SchedPeriod:         sc.SchedPeriod.Seconds(),
		RPCBackoffMin:       sc.RPCBackoff.Min.Seconds(),
		RPCBackoffMax:       sc.RPCBackoff.Max.Seconds(),
		WorkFetchBackoffMin: sc.WorkFetchBackoff.Min.Seconds(),
		WorkFetchBackoffMax: sc.WorkFetchBackoff.Max.Seconds(),
		ReportAfter:         reportAfter,
		ReportMargin:        sc.ReportMargin.Seconds(),
	}
}

// newHost draws host i of the population. Each host has its own random
// stream, derived from the seed and its index, so that what one host draws
// never depends on what the others did.
func newHost(sc Scenario, i int, cfg clientpolicy.Config) *host {
	r := rand.New(rand.NewPCG(sc.Seed, uint64(i)))
	pop := sc.Population
	h := &host{
		index:   int32(i),
		flops:   logUniform(pop.Flops, r),
		onFrac:  uniform(pop.OnFrac, r),
		meanOn:  pop.MeanOn.Seconds(),
		trueCPU: map[*clientpolicy.Task]float64{},
		rng:     r,
	}
	ncpus := chooseCPUs(pop.NCPUs, r)
	var projects []*clientpolicy.Project
	for j, p := range sc.Projects {
		if r.Float64() < p.Attach {
			h.projects = append(h.projects, j)
			projects = append(projects, &clientpolicy.Project{Name: p.Name, Share: p.Share})
		}
	}
	if len(projects) == 0 {
		j := r.IntN(len(sc.Projects))
		h.projects = append(h.projects, j)
		projects = append(projects, &clientpolicy.Project{Name: sc.Projects[j].Name, Share: sc.Projects[j].Share})
	}
	h.activity = clientpolicy.Activity{Window: pop.ActivityWindow.Seconds()}
	h.policy = clientpolicy.NewHost(ncpus, h.activity.Frac(0), cfg, projects)
	h.contacted = make([]bool, len(projects))
	h.cpu = make([]float64, len(projects))
	h.toggleAt = r.Float64() * pop.StartWithin.Seconds()
	// Drawn last, and only for populations with GPUs, so a scenario
	// without any draws what it always did.
	if pop.GPUFrac > 0 && r.Float64() < pop.GPUFrac {
		h.gpuFlops = logUniform(pop.GPUFlops, r)
		var gps []*clientpolicy.Project
		for _, p := range projects {
			gps = append(gps, &clientpolicy.Project{Name: p.Name, Share: p.Share})
		}
		h.gpu = clientpolicy.NewHost(pop.GPUs, h.policy.ActiveFrac, cfg, gps)
	}
	return h
}

// policies are the host's client states: its CPUs', then its GPUs' if it
// has any.
func (h *host) policies() []*clientpolicy.Host {
	if h.gpu == nil {
		return []*clientpolicy.Host{h.policy}
	}
	return []*clientpolicy.Host{h.policy, h.gpu}
}

// sync gives every resource's project the CPU project's RPC timing (one
// minimum RPC time per project, whatever the resource) and the measured
// active fraction.
func (h *host) sync(now float64) {
	af := h.activity.Frac(now)
	h.policy.ActiveFrac = af
	if h.gpu == nil {
		return
	}
	h.gpu.ActiveFrac = af
	for k, p := range h.policy.Projects {
		g := h.gpu.Projects[k]
		g.MinRPC, g.RPCFailures = p.MinRPC, p.RPCFailures
	}
}

// nextSchedule is when a resource's scheduling period ends.
func (h *host) nextSchedule() float64 {
	at := h.policy.NextSchedule()
	if h.gpu != nil {
		at = min(at, h.gpu.NextSchedule())
	}
	return at
}

// schedule runs the GPUs' scheduler, then the CPUs'.
func (h *host) schedule(now float64) {
	if h.gpu != nil {
		h.gpu.Schedule(now)
	}
	h.policy.Schedule(now)
}

// targets is each attached project's weight in the resource share the run
// aims at: its share fraction on this host x the host's CPUs x its on fraction.
func (h *host) targets(shares func(j int) float64) []float64 {
	var sum float64
	for _, j := range h.projects {
		sum += shares(j)
	}
	out := make([]float64, len(h.projects))
	for k, j := range h.projects {
		out[k] = shares(j) / sum * float64(h.policy.NCPUs) * h.onFrac
	}
	return out
}

// local is the position of p in the host's projects (CPU or GPU).
func (h *host) local(p *clientpolicy.Project) int {
	for k, q := range h.policy.Projects {
		if q == p {
			return k
		}
	}
	if h.gpu != nil {
		for k, q := range h.gpu.Projects {
			if q == p {
				return k
			}
		}
	}
	panic("simulate: the policy chose a project the host is not attached to")
}

// toggle starts the host, or switches it on or off, and draws the length of
// the period that begins. Off-periods have the mean that gives the host its
// on fraction in the long run.
func (h *host) toggle(now float64) {
	if !h.started {
		h.started = true
		h.on = h.onFrac >= 1 || h.rng.Float64() < h.onFrac
		// The host was a volunteer before the run: it starts with the
		// fraction it measured over a history of two windows, drawn
		// from its own on/off process (a stream of its own, so the run
		// itself draws as before).
		hr := rand.New(rand.NewPCG(uint64(h.index), 0x686973746f7279))
		h.activity.History(now, 2*h.activity.Window, hr.Float64() < h.onFrac, func(on bool) float64 {
			if h.onFrac >= 1 {
				return math.Inf(1)
			}
			if on {
				return hr.ExpFloat64() * h.meanOn
			}
			return hr.ExpFloat64() * h.meanOn * (1 - h.onFrac) / h.onFrac
		}, h.on)
	} else {
		h.on = !h.on
	}
	h.activity.Observe(now, h.on)
	switch {
	case h.onFrac >= 1:
		h.toggleAt = math.Inf(1)
	case h.on:
		h.toggleAt = now + h.rng.ExpFloat64()*h.meanOn
	default:
		h.toggleAt = now + h.rng.ExpFloat64()*h.meanOn*(1-h.onFrac)/h.onFrac
	}
}

func chooseCPUs(choices []CPUChoice, r *rand.Rand) int {
	var total float64
	for _, c := range choices {
		total += c.Weight
	}
	x := r.Float64() * total
	for _, c := range choices {
		if x < c.Weight {
			return c.CPUs
		}
		x -= c.Weight
	}
	return choices[len(choices)-1].CPUs
}

func uniform(rg Range, r *rand.Rand) float64 {
	return rg.Min + r.Float64()*(rg.Max-rg.Min)
}

// logUniform draws speeds evenly over orders of magnitude, as volunteer
// machines spread over a decade of speeds rather than around a mean.
func logUniform(rg Range, r *rand.Rand) float64 {
	lo, hi := math.Log(rg.Min), math.Log(rg.Max)
	return math.Exp(lo + r.Float64()*(hi-lo))
}
