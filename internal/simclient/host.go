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
	index          int // into runner.projects and the recorder's projects
	url            string
	auth           string
	shareFrac      float64 // share over the sum of the host's shares
	p              *clientpolicy.Project
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
	// dcf is the duration correction factor: how long this project's tasks
	// really take on this host relative to rsc_fpops_est / p_fpops.
	dcf        float64
	dcfLearned bool // a task of the project has completed here
	// downloading counts tasks whose inputs are being fetched. While any
	// are, the host does not ask this project for work (it does not yet
	// know what it holds), so p.WorkFetchAt is held at +Inf and the real
	// value kept in heldFetchAt.
	downloading int
	holding     bool
	heldFetchAt float64
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
	info  protocol.HostInfo
	salt  [8]byte // makes a cheater's wrong output its own; unique per host
	log   *slog.Logger
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
		PNCPUs:      o.NCPUs,
		PVendor:     "Simulated",
		PModel:      "taskserver simclient CPU",
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

	var shareSum float64
	for _, p := range r.projects {
		shareSum += p.Share
	}
	projects := make([]*clientpolicy.Project, len(r.projects))
	for i, p := range r.projects {
		projects[i] = &clientpolicy.Project{Name: p.Name, Share: p.Share}
		h.atts = append(h.atts, &attachment{
			index:     i,
			url:       p.SchedulerURL,
			auth:      p.Authenticators[index%len(p.Authenticators)],
			shareFrac: p.Share / shareSum,
			p:         projects[i],
			byName:    map[string]*task{},
			nextRPCAt: math.Inf(1),
			dcf:       1,
		})
	}
	h.cp = clientpolicy.NewHost(o.NCPUs, o.OnFrac, o.policyConfig(h.computeTime().Seconds()), projects)

	h.toggleAt = math.Inf(1)
	if o.OnFrac < 1 {
		// Start at a random point of the on/off cycle.
		h.on = rng.Float64() < o.OnFrac
		h.toggleAt = h.periodLength()
	}
	return h
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
		h.r.rec.AddTarget(a.index, a.shareFrac*float64(h.r.opts.NCPUs)*h.r.opts.OnFrac)
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil {
		now := h.r.now()
		h.advance(now)
		if h.dirty || now >= h.cp.NextSchedule() {
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
		h.toggleAt += h.periodLength()
		h.dirty = true
	}
}

// progress gives every running task the CPU time from..to; a task that
// reaches its runtime finishes computing at that instant.
func (h *host) progress(from, to float64) {
	h.r.rec.AddAvailable(float64(h.r.opts.NCPUs) * (to - from))
	for _, t := range h.tasks {
		if t.phase != phaseComputing || t.cp.State != clientpolicy.TaskRunning {
			continue
		}
		if need := t.runtime - t.cp.CPU; need <= to-from {
			t.cp.CPU = t.runtime
			h.recordCPU(t, from, from+need)
			h.computed(t, from+need)
		} else {
			t.cp.CPU += to - from
			h.recordCPU(t, from, to)
		}
	}
}

// recordCPU tells the recorder a task computed from..to, split at the
// report's interval ends so the series shows when the CPU went where.
func (h *host) recordCPU(t *task, from, to float64) {
	iv := h.r.interval
	for from < to {
		end := min(to, (math.Floor(from/iv)+1)*iv)
		if end <= from { // rounding at a boundary
			end = to
		}
		h.r.rec.CPU(t.att.index, (from+end)/2, end-from)
		from = end
	}
}

// schedule runs the CPU scheduler and counts the running tasks it
// preempted.
func (h *host) schedule(now float64) {
	for _, t := range h.tasks {
		t.wasRunning = t.cp.State == clientpolicy.TaskRunning
	}
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
func (h *host) nextRPC(now float64) (*attachment, clientpolicy.WorkRequest, bool) {
	if !h.mayRPC() {
		return nil, clientpolicy.WorkRequest{}, false
	}
	for _, a := range h.atts {
		if a.nextRPCAt <= now && a.p.MinRPC <= now {
			return a, clientpolicy.WorkRequest{Project: a.p, Seconds: h.cp.WorkRequestSeconds(a.p, now), Report: a.hasReady()}, true
		}
	}
	req, ok := h.cp.NextRPC(now)
	if !ok {
		return nil, req, false
	}
	for _, a := range h.atts {
		if a.p == req.Project {
			if a.downloading > 0 {
				req.Seconds = 0
			}
			return a, req, true
		}
	}
	return nil, req, false // a project the host is not attached to: a policy bug
}

// wakeAt is when the host loop next has something to do, if nothing
// reports back before: a running task finishes, the scheduling period ends,
// the host switches on or off, an RPC falls due.
func (h *host) wakeAt(now float64) float64 {
	at := min(h.cp.NextSchedule(), h.toggleAt)
	if h.on {
		for _, t := range h.tasks {
			if t.phase == phaseComputing && t.cp.State == clientpolicy.TaskRunning {
				at = min(at, now+t.runtime-t.cp.CPU)
			}
		}
	}
	if h.mayRPC() {
		at = min(at, h.cp.NextRPCTime(now))
		for _, a := range h.atts {
			at = min(at, max(a.nextRPCAt, a.p.MinRPC))
		}
	}
	return at
}

// holdFetch keeps the policy from asking a's project for work while its
// downloads are under way; releaseFetch undoes it.
func (a *attachment) holdFetch() {
	if a.downloading > 0 && !a.holding {
		a.holding, a.heldFetchAt = true, a.p.WorkFetchAt
		a.p.WorkFetchAt = math.Inf(1)
	}
}

func (a *attachment) releaseFetch() {
	if a.holding {
		a.holding, a.p.WorkFetchAt = false, a.heldFetchAt
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
