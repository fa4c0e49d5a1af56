package simclient

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/taskserver/taskserver/internal/clientpolicy"
	"github.com/taskserver/taskserver/internal/protocol"
)

// minWait is the shortest sleep of a host's loop, so a policy answer that
// is due "now" but not yet actionable cannot make the loop spin.
const minWait = time.Millisecond

// attachment is a host's membership of one project: its identity there and
// the client's bookkeeping for it. Only the host goroutine touches it.
type attachment struct {
	index     int // into runner.projects and the recorder's projects
	url       string
	auth      string
	shareFrac float64 // share over the sum of the host's shares
	// p is the project in the CPU's client state, rp the project in every
	// resource's (rp[0] == p, rp[1+i] for host.gpus[i]): each resource
	// has its own work-fetch back-off and <no_rsc_apps> flag; MinRPC and
	// the RPC failures are p's, copied to the others (syncResources).
	p  *clientpolicy.Project
	rp []*clientpolicy.Project
	// usage is how a task of each app version the project sent runs.
	usage map[versionKey]versionUsage
	// urls are the project's scheduler URLs, tried in turn from a random
	// one (urlStart); master its master page, if any, read when
	// masterPending or at masterDue; masterFailures counts consecutive
	// failed reads.
	urls           []string
	urlStart       int
	master         string
	masterPending  bool
	masterDue      float64
	masterFailures int
	byName         map[string]*task // result names are unique per project only
	hostID         int64
	seqno          int64
	crossProjectID string
	appVersions    []protocol.ClientAppVer
	// sticky are the sticky input files the host holds for the project.
	sticky stickyFiles
	// msgs are the trickle-up messages not yet acknowledged, oldest
	// first; msgsSent how many of them the request under way carries.
	msgs     []protocol.MsgFromHost
	msgsSent int
	// nextRPCAt is when the server asked to hear from the host again
	// (next_rpc_delay); +Inf when it did not.
	nextRPCAt float64
	// reportFailures counts consecutive RPCs whose reports were not all
	// acknowledged; they back the next report off.
	reportFailures int
	// dcf is the duration correction factor per resource: how long this
	// project's tasks really take on this host relative to rsc_fpops_est
	// over the version's speed.
	dcf        []float64
	dcfLearned []bool // a task of the project has completed here on the resource
	// downloading counts tasks whose inputs are being fetched. While any
	// are, the host does not ask this project for work (it does not yet
	// know what it holds), so p.WorkFetchAt is held at +Inf and the real
	// value kept in heldFetchAt.
	downloading int
	holding     bool
	heldFetchAt []float64 // per resource
}

// host is one simulated volunteer machine. Its goroutine (run) owns the
// client state — the clientpolicy.Host, the attachments and the tasks —
// and does the scheduler RPCs; downloads and uploads run in goroutines of
// their own that hand their results back through events.
type host struct {
	r     *runner
	index int
	kind  Kind
	flops float64
	// ncpus is the host's CPU count, gpus its GPUs; gcp[i] is the client
	// state of gpus[i], scheduled and fetched for on its own.
	ncpus int
	gpus  []gpu
	gcp   []*clientpolicy.Host
	// activity measures the fraction of time the host is on.
	activity clientpolicy.Activity
	info     protocol.HostInfo
	salt     [8]byte // makes a cheater's wrong output its own; unique per host
	log      *slog.Logger
	// events carries work from the transfer goroutines to the host
	// goroutine, which runs it with the current time.
	events chan func(now float64)

	rngMu sync.Mutex
	rng   *rand.Rand

	// Owned by the host goroutine.
	cp       *clientpolicy.Host
	atts     []*attachment
	tasks    []*task // every task held, in arrival order
	nextID   int64
	clock    float64 // run seconds up to which CPU progress is accounted
	on       bool
	toggleAt float64 // next on/off switch; +Inf when always on
	dirty    bool    // tasks changed since the last Schedule
	taskCtx  context.Context
	taskWG   *sync.WaitGroup
}

func newHost(r *runner, index int, kind Kind, rng *rand.Rand) *host {
	o := r.opts
	h := &host{
		r:      r,
		index:  index,
		kind:   kind,
		flops:  o.Flops * (0.5 + rng.Float64()),
		log:    o.Log.With("host", index, "kind", kind.String()),
		events: make(chan func(float64), 16),
		rng:    rng,
		on:     true,
	}
	h.ncpus, h.gpus = drawHardware(o, rng)
	// The index in the first bytes makes every host's salt, and so every
	// cheater's forged input and output, different from every other's.
	binary.LittleEndian.PutUint32(h.salt[:4], uint32(index)+1)
	for i := 4; i < len(h.salt); i++ {
		h.salt[i] = byte(rng.IntN(255) + 1)
	}
	h.info = protocol.HostInfo{
		// The kind in the domain name lets tests tell, from the host
		// table, which hosts cheat or fail.
		DomainName:  DomainName(index, kind),
		IPAddr:      fmt.Sprintf("10.%d.%d.%d", index>>16&255, index>>8&255, index&255),
		HostCPID:    fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64()),
		PNCPUs:      h.ncpus,
		PVendor:     "Simulated",
		PModel:      "taskserver simclient CPU",
		PFeatures:   pFeatures(h.ncpus >= 4),
		PFpops:      h.flops,
		PIops:       h.flops,
		PMembw:      1e9,
		MNbytes:     float64(int64(2+rng.IntN(15)) << 30),
		MCache:      1 << 20,
		MSwap:       2 << 30,
		DTotal:      5e11,
		DFree:       1e10 + rng.Float64()*4.9e11,
		OSName:      "Linux",
		OSVersion:   "simclient",
		PCalculated: float64(r.start.Unix()),
	}
	for _, g := range h.gpus {
		h.info.NUsableCoprocs += g.count
	}

	var shareSum float64
	for _, p := range r.projects {
		shareSum += p.Share
	}
	nrsc := 1 + len(h.gpus)
	projects := make([][]*clientpolicy.Project, nrsc)
	for i, p := range r.projects {
		a := &attachment{
			index:       i,
			url:         p.SchedulerURL,
			auth:        p.Authenticators[index%len(p.Authenticators)],
			shareFrac:   p.Share / shareSum,
			byName:      map[string]*task{},
			nextRPCAt:   math.Inf(1),
			usage:       map[versionKey]versionUsage{},
			master:      p.MasterURL,
			dcf:         make([]float64, nrsc),
			dcfLearned:  make([]bool, nrsc),
			heldFetchAt: make([]float64, nrsc),
		}
		if p.SchedulerURL != "" {
			a.urls = append(a.urls, p.SchedulerURL)
		}
		a.urls = append(a.urls, p.SchedulerURLs...)
		if len(a.urls) > 0 {
			a.urlStart = rng.IntN(len(a.urls))
		}
		a.masterPending = a.master != "" && len(a.urls) == 0
		a.masterDue = math.Inf(1)
		if a.master != "" {
			a.masterDue = o.MasterReread.Seconds()
		}
		for k := range nrsc {
			a.dcf[k] = 1
			a.rp = append(a.rp, &clientpolicy.Project{Name: p.Name, Share: p.Share})
			projects[k] = append(projects[k], a.rp[k])
		}
		a.p = a.rp[0]
		h.atts = append(h.atts, a)
	}
	cfg := o.policyConfig(h.computeTime().Seconds())
	h.cp = clientpolicy.NewHost(h.ncpus, o.OnFrac, cfg, projects[0])
	for i, g := range h.gpus {
		h.gcp = append(h.gcp, clientpolicy.NewHost(g.count, o.OnFrac, cfg, projects[1+i]))
	}
	h.activity = clientpolicy.Activity{Window: o.ActivityWindow.Seconds()}

	h.toggleAt = math.Inf(1)
	if o.OnFrac < 1 {
		// Start at a random point of the on/off cycle.
		h.on = rng.Float64() < o.OnFrac
		h.toggleAt = h.periodLength()
	}
	h.activity.Observe(0, h.on)
	if o.OnFrac < 1 {
		// An established volunteer: it starts with what it measured over
		// two windows of its own on/off process before the run (drawn
		// from a stream of its own, so the run's draws are unchanged).
		hr := rand.New(rand.NewPCG(o.Seed^0x686973746f7279, uint64(index)))
		mean := o.OnPeriod.Seconds()
		h.activity = clientpolicy.Activity{Window: o.ActivityWindow.Seconds()}
		h.activity.History(0, 2*h.activity.Window, hr.Float64() < o.OnFrac, func(on bool) float64 {
			if on {
				return hr.ExpFloat64() * mean
			}
			return hr.ExpFloat64() * mean * (1 - o.OnFrac) / o.OnFrac
		}, h.on)
	}
	return h
}

// policy is the client state of resource k: the CPUs (0) or gpus[k-1].
func (h *host) policy(k int) *clientpolicy.Host {
	if k == 0 {
		return h.cp
	}
	return h.gcp[k-1]
}

// resources is how many resources the host has: its CPUs and each GPU kind.
func (h *host) resources() int { return 1 + len(h.gpus) }

// resourceName is resource k as <no_rsc_apps> and <coproc><type> name it.
func (h *host) resourceName(k int) string {
	if k == 0 {
		return protocol.ResourceCPU
	}
	return h.gpus[k-1].model.Type
}

// syncResources copies each project's RPC timing from its CPU state to
// its other resources' states: an RPC goes to the project, whatever
// resource it is for, so they share one minimum RPC time. The measured
// active fraction goes to every resource too.
func (h *host) syncResources(now float64) {
	af := h.activity.Frac(now)
	h.cp.ActiveFrac = af
	for _, g := range h.gcp {
		g.ActiveFrac = af
	}
	for _, a := range h.atts {
		for _, rp := range a.rp[1:] {
			rp.MinRPC, rp.RPCFailures, rp.TaskErrors = a.p.MinRPC, a.p.RPCFailures, a.p.TaskErrors
		}
	}
}

// nextSchedule is when some resource's scheduling period ends.
func (h *host) nextSchedule() float64 {
	at := h.cp.NextSchedule()
	for _, g := range h.gcp {
		at = min(at, g.NextSchedule())
	}
	return at
}

// DomainName is the domain_name simulated host index of the given kind
// reports: "simhost<index>.<kind>".
func DomainName(index int, kind Kind) string {
	return fmt.Sprintf("simhost%d.%s", index, kind)
}

// computeTime is the simulated CPU time of one task on this host.
func (h *host) computeTime() time.Duration {
	return time.Duration(float64(h.r.opts.ComputeTime) * h.r.opts.Flops / h.flops)
}

// rand returns a uniform number in [0, 1) from the host's generator.
func (h *host) rand() float64 {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.Float64()
}

// periodLength draws the length of the on or off period starting now, in
// seconds: exponential, with mean OnPeriod when on.
func (h *host) periodLength() float64 {
	o := h.r.opts
	mean := o.OnPeriod.Seconds()
	if !h.on {
		mean *= (1 - o.OnFrac) / o.OnFrac
	}
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.ExpFloat64() * mean
}

// post hands f to the host goroutine, unless ctx ends first.
func (h *host) post(ctx context.Context, f func(now float64)) {
	select {
	case h.events <- f:
	case <-ctx.Done():
	}
}

// run is the host's life as an event loop: bring the tasks' CPU up to date,
// apply what the transfers finished, reschedule the CPUs when the policy
// says so, contact a project when the policy says so, then sleep until the
// next thing can happen — a task finishing, the scheduling period ending, an
// RPC falling due, the host switching on or off — or a transfer reports
// back. It returns when ctx ends (after its transfers have stopped) or when
// the host vanishes.
func (h *host) run(ctx context.Context) {
	tctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	h.taskCtx, h.taskWG = tctx, &wg
	defer wg.Wait()
	defer cancel()
	for _, a := range h.atts {
		h.r.rec.AddTarget(a.index, a.shareFrac*float64(h.ncpus)*h.r.opts.OnFrac)
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil {
		now := h.r.now()
		h.advance(now)
		if h.dirty || now >= h.nextSchedule() {
			h.schedule(now)
		}
		if a, req, ok := h.nextRPC(now); ok {
			if !h.r.reserveRPC() {
				return
			}
			if h.rpc(h.r.rpcCtx, a, req) {
				return
			}
			continue
		}
		wait := max(time.Duration((h.wakeAt(now)-now)*float64(time.Second)), minWait)
		timer.Reset(wait)
		select {
		case <-ctx.Done():
		case f := <-h.events:
			now := h.r.now()
			h.advance(now)
			f(now)
		case <-timer.C:
		}
	}
	h.advance(h.r.now())
}

// advance accounts the time up to now: CPU progress of the running tasks
// and available CPU while the host is on, and the on/off switches.
func (h *host) advance(now float64) {
	for {
		end := min(now, h.toggleAt)
		if end > h.clock {
			if h.on {
				h.progress(h.clock, end)
			}
			h.clock = end
		}
		if h.toggleAt > now {
			return
		}
		h.on = !h.on
		h.activity.Observe(h.toggleAt, h.on)
		h.toggleAt += h.periodLength()
		h.dirty = true
	}
}

// progress gives every running task the CPU time from..to; a task that
// reaches its runtime finishes computing at that instant.
func (h *host) progress(from, to float64) {
	dt := to - from
	h.r.rec.AddAvailable(float64(h.ncpus) * dt)
	var cpuBusy, gpuBusy float64
	for _, t := range h.tasks {
		if t.phase != phaseComputing || t.cp.State != clientpolicy.TaskRunning {
			continue
		}
		ran := dt
		if need := t.runtime - t.cp.CPU; need <= dt {
			ran = need
			t.cp.CPU = t.runtime
			h.recordCPU(t, from, from+need)
			h.computed(t, from+need)
		} else {
			t.cp.CPU += dt
			h.recordCPU(t, from, to)
		}
		cpuBusy += ran * t.cpus
		if t.rsc > 0 {
			gpuBusy += ran * t.width
		}
	}
	c := &h.r.c
	ncpus := float64(h.ncpus)
	c.cpuBusy.add(min(cpuBusy, ncpus*dt))
	c.cpuAvail.add(ncpus * dt)
	if len(h.gpus) > 0 {
		ngpus := float64(h.info.NUsableCoprocs)
		c.gpuHostCPUBusy.add(min(cpuBusy, ncpus*dt))
		c.gpuHostCPUAvail.add(ncpus * dt)
		c.gpuBusy.add(min(gpuBusy, ngpus*dt))
		c.gpuAvail.add(ngpus * dt)
	}
}

// recordCPU tells the recorder a task computed from..to, split at the
// report's interval ends so the series shows when the CPU went where.
//
// Only CPU tasks count, each for the CPUs it occupies: the report's
// shares are of the CPUs.
func (h *host) recordCPU(t *task, from, to float64) {
	if t.rsc != 0 {
		return
	}
	iv := h.r.interval
	for from < to {
		end := min(to, (math.Floor(from/iv)+1)*iv)
		if end <= from { // rounding at a boundary
			end = to
		}
		h.r.rec.CPU(t.att.index, (from+end)/2, (end-from)*t.width)
		from = end
	}
}

// schedule runs each resource's scheduler and counts the running tasks
// they preempted. The GPUs go first: the CPUs their tasks use are taken
// from those the CPU tasks may have, as the real client reserves them
// (whole CPUs only: GPU tasks that use a fraction of one each do not
// stop a CPU task until they add up to a CPU).
func (h *host) schedule(now float64) {
	h.syncResources(now)
	for _, t := range h.tasks {
		t.wasRunning = t.cp.State == clientpolicy.TaskRunning
	}
	for _, g := range h.gcp {
		g.Schedule(now)
	}
	reserved := 0.0
	for _, t := range h.tasks {
		if t.rsc > 0 && t.cp.State == clientpolicy.TaskRunning {
			reserved += t.cpus
		}
	}
	h.cp.NCPUs = max(1, h.ncpus-int(math.Floor(reserved+1e-9)))
	h.cp.Schedule(now)
	for _, t := range h.tasks {
		if t.wasRunning && t.cp.State == clientpolicy.TaskPreempted {
			h.r.c.preempted.Add(1)
		}
	}
	h.dirty = false
}

// mayRPC reports whether the host contacts projects now: it is on, and it
// is not a late host holding unfinished work (offline until it is done).
func (h *host) mayRPC() bool {
	if !h.on {
		return false
	}
	if h.kind == KindLate {
		for _, t := range h.tasks {
			if t.phase != phaseReady {
				return false
			}
		}
	}
	return true
}

// nextRPC is the RPC to make now, if any: to a project whose next_rpc_delay
// has come, else the policy's choice (seed 000/001 work fetch, seed 002
// report-result sessions).
//
// Every resource's policy is asked, the CPUs first: a GPU short of work
// makes an RPC as a CPU does (client/work_fetch.cpp looks at each
// resource's shortfall). The request then asks each resource for what it
// needs (buildRequest).
func (h *host) nextRPC(now float64) (*attachment, clientpolicy.WorkRequest, bool) {
	if !h.mayRPC() {
		return nil, clientpolicy.WorkRequest{}, false
	}
	h.syncResources(now)
	for _, a := range h.atts {
		if a.nextRPCAt <= now && a.p.MinRPC <= now {
			return a, clientpolicy.WorkRequest{Project: a.p, Seconds: h.cp.WorkRequestSeconds(a.p, now), Report: a.hasReady()}, true
		}
	}
	for k := range h.resources() {
		req, ok := h.policy(k).NextRPC(now)
		if !ok {
			continue
		}
		for _, a := range h.atts {
			if a.rp[k] == req.Project {
				if a.downloading > 0 {
					req.Seconds = 0
				}
				return a, req, true
			}
		}
		return nil, req, false // a project the host is not attached to: a policy bug
	}
	return nil, clientpolicy.WorkRequest{}, false
}

// wakeAt is when the host loop next has something to do, if nothing
// reports back before: a running task finishes, the scheduling period ends,
// the host switches on or off, an RPC falls due.
func (h *host) wakeAt(now float64) float64 {
	at := min(h.nextSchedule(), h.toggleAt)
	if h.on {
		for _, t := range h.tasks {
			if t.phase == phaseComputing && t.cp.State == clientpolicy.TaskRunning {
				at = min(at, now+t.runtime-t.cp.CPU)
			}
		}
	}
	if h.mayRPC() {
		h.syncResources(now)
		for k := range h.resources() {
			at = min(at, h.policy(k).NextRPCTime(now))
		}
		for _, a := range h.atts {
			at = min(at, max(a.nextRPCAt, a.p.MinRPC))
		}
	}
	return at
}

// holdFetch keeps the policy from asking a's project for work, for any
// resource, while its downloads are under way; releaseFetch undoes it.
func (a *attachment) holdFetch() {
	if a.downloading > 0 && !a.holding {
		a.holding = true
		for k, rp := range a.rp {
			a.heldFetchAt[k] = rp.WorkFetchAt
			rp.WorkFetchAt = math.Inf(1)
		}
	}
}

func (a *attachment) releaseFetch() {
	if a.holding {
		a.holding = false
		for k, rp := range a.rp {
			rp.WorkFetchAt = a.heldFetchAt[k]
		}
	}
}

// hasReady reports whether a has a finished task to report.
func (a *attachment) hasReady() bool {
	for _, t := range a.byName {
		if t.phase == phaseReady {
			return true
		}
	}
	return false
}

func seconds(s float64) time.Duration {
	if !(s > 0) {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}
