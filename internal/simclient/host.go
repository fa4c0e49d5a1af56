package simclient

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/state"
)

// taskState is where a task is on its host.
type taskState int

const (
	taskQueued  taskState = iota // received, waiting for a CPU
	taskRunning                  // downloading, computing or uploading
	taskReady                    // finished; reported on every RPC until acked
)

// task is one result the host holds, from receipt until the server acks it.
type task struct {
	res        protocol.Result
	inputs     []protocol.FileInfo
	outputs    []protocol.FileInfo
	appVersion int // index into host.appVersions, or -1
	state      taskState
	reported   bool
	late       bool // first reported after its report deadline
	cancel     context.CancelFunc
	report     protocol.ReportResult
}

// host is one simulated volunteer machine. Its goroutine (run) owns the
// scheduler conversation; each running task has a goroutine of its own.
// Everything below mu is shared between them.
type host struct {
	r      *runner
	index  int
	kind   Kind
	auth   string
	flops  float64
	info   protocol.HostInfo
	salt   [8]byte // makes a cheater's wrong output its own; unique per host
	log    *slog.Logger
	wake   chan struct{}
	byName map[string]*task

	mu             sync.Mutex
	rng            *rand.Rand
	hostID         int64
	seqno          int64
	crossProjectID string
	tasks          []*task // in arrival order
	appVersions    []protocol.ClientAppVer
	estTask        time.Duration // the server's runtime estimate of one task here
	minRPC         time.Time     // request_delay, RPC back-off, task-error deferral
	workFetchAt    time.Time     // work-fetch back-off after a request that got nothing
	reportAt       time.Time     // back-off after reports that were not acked
	nextRPCAt      time.Time     // next_rpc_delay; zero when none
	rpcFailures    int
	fetchFailures  int
	reportFailures int
}

func newHost(r *runner, index int, kind Kind, auth string, rng *rand.Rand) *host {
	o := r.opts
	h := &host{
		r:      r,
		index:  index,
		kind:   kind,
		auth:   auth,
		flops:  o.Flops * (0.5 + rng.Float64()),
		log:    o.Log.With("host", index, "kind", kind.String()),
		wake:   make(chan struct{}, 1),
		byName: map[string]*task{},
		rng:    rng,
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
	h.estTask = h.computeTime()
	return h
}

// DomainName is the domain_name simulated host index of the given kind
// reports: "simhost<index>.<kind>".
func DomainName(index int, kind Kind) string {
	return fmt.Sprintf("simhost%d.%s", index, kind)
}

// computeTime is the simulated wall time of one task on this host.
func (h *host) computeTime() time.Duration {
	return time.Duration(float64(h.r.opts.ComputeTime) * h.r.opts.Flops / h.flops)
}

// rand returns a uniform number in [0, 1) from the host's generator.
func (h *host) rand() float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rng.Float64()
}

func (h *host) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// run is the host's life: contact the scheduler when it needs to, start
// tasks on free CPUs, wait. It returns when ctx ends (after its tasks have
// stopped) or when the host vanishes.
func (h *host) run(ctx context.Context) {
	tctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for ctx.Err() == nil {
		h.startTasks(tctx, &wg)
		now := time.Now()
		at, ok := h.nextRPC()
		if ok && !at.After(now) {
			if !h.r.reserveRPC() {
				return
			}
			if h.rpc(h.r.rpcCtx) {
				return
			}
			continue
		}
		var timer *time.Timer
		var timeout <-chan time.Time
		if ok {
			timer = time.NewTimer(at.Sub(now))
			timeout = timer.C
		}
		select {
		case <-ctx.Done():
		case <-h.wake:
		case <-timeout:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// startTasks gives queued tasks the free CPUs.
func (h *host) startTasks(ctx context.Context, wg *sync.WaitGroup) {
	h.mu.Lock()
	defer h.mu.Unlock()
	running := 0
	for _, t := range h.tasks {
		if t.state == taskRunning {
			running++
		}
	}
	for _, t := range h.tasks {
		if running >= h.r.opts.NCPUs {
			return
		}
		if t.state != taskQueued {
			continue
		}
		t.state = taskRunning
		running++
		tctx, cancel := context.WithCancel(ctx)
		t.cancel = cancel
		wg.Go(func() {
			defer cancel()
			rep, taskErr := h.work(tctx, t)
			if tctx.Err() != nil {
				return // stopping or aborted: nothing to report
			}
			h.finish(t, rep, taskErr)
		})
	}
}

// finish makes a task ready to report. After an unrecoverable task error
// the real client defers its next RPC by one to two minutes.
func (h *host) finish(t *task, rep protocol.ReportResult, taskErr bool) {
	h.mu.Lock()
	if h.byName[t.res.Name] == t {
		t.report = rep
		t.state = taskReady
		if taskErr {
			d := h.r.opts.scaled(time.Duration(float64(taskErrorDelayMin) * (1 + h.rng.Float64())))
			h.minRPC = later(h.minRPC, time.Now().Add(d))
		}
	}
	h.mu.Unlock()
	h.signal()
}

// nextRPC is when the host next wants to talk to the scheduler: to fetch
// work when a CPU is idle, to report finished tasks, or because the server
// asked (next_rpc_delay); never before minRPC. ok is false when it wants
// nothing until a task finishes.
func (h *host) nextRPC() (at time.Time, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	pending, ready := h.counts()
	if h.kind == KindLate && pending > 0 {
		// Offline while holding work: back only when every task is
		// finished, past its deadline.
		return at, false
	}
	consider := func(t time.Time) {
		t = later(t, h.minRPC)
		if !ok || t.Before(at) {
			at, ok = t, true
		}
	}
	if pending < h.r.opts.NCPUs {
		consider(h.workFetchAt)
	}
	if ready > 0 {
		consider(h.reportAt)
	}
	if !h.nextRPCAt.IsZero() {
		consider(h.nextRPCAt)
	}
	return at, ok
}

// counts returns the tasks not finished and the tasks ready to report.
// The caller holds mu.
func (h *host) counts() (pending, ready int) {
	for _, t := range h.tasks {
		if t.state == taskReady {
			ready++
		} else {
			pending++
		}
	}
	return pending, ready
}

// rpc does one scheduler RPC and applies its reply. It reports whether the
// host has vanished.
func (h *host) rpc(ctx context.Context) (vanished bool) {
	req, reporting, reqSecs := h.buildRequest(time.Now())
	h.r.c.rpcs.Add(1)
	reply, err := h.r.web.schedulerRPC(ctx, h.r.opts.SchedulerURL, req)
	if ctx.Err() != nil {
		return false // stopping; the failure is ours, not the server's
	}
	now := time.Now()
	if err == nil {
		err = replyError(reply, req.HostID)
	}
	if err != nil {
		h.rpcFailed(now, reply, err)
		return false
	}
	return h.applyReply(now, reply, reporting, reqSecs)
}

// buildRequest writes the next scheduler request: identity, host
// description, a work request sized to refill the buffer when a CPU is
// idle, every finished task, and the tasks in progress.
func (h *host) buildRequest(now time.Time) (*protocol.SchedulerRequest, []*task, float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o := h.r.opts
	req := &protocol.SchedulerRequest{
		Authenticator:            h.auth,
		HostID:                   h.hostID,
		RPCSeqno:                 h.seqno,
		CoreClientMajorVersion:   clientMajor,
		CoreClientMinorVersion:   clientMinor,
		CoreClientRelease:        clientRelease,
		ResourceShareFraction:    1,
		DurationCorrectionFactor: 1,
		PlatformName:             platformName,
		CrossProjectID:           h.crossProjectID,
		HostInfo:                 h.info,
		TimeStats: protocol.TimeStats{OnFrac: 1, ConnectedFrac: 1, CPUAndNetworkAvailableFrac: 1, ActiveFrac: 1,
			GPUActiveFrac: 1, ClientStartTime: float64(h.r.start.Unix()), Now: float64(now.Unix())},
		DiskUsage:   protocol.DiskUsage{DBoincUsedTotal: 1e6, DBoincUsedProject: 1e6, DProjectShare: h.info.DFree / 2},
		AppVersions: append([]protocol.ClientAppVer(nil), h.appVersions...),
	}
	pending, _ := h.counts()
	var reqSecs float64
	if pending < o.NCPUs && !now.Before(h.workFetchAt) {
		reqSecs = max(1, float64(o.NCPUs*o.BufferPerCPU-pending)*h.estTask.Seconds())
		req.WorkReqSeconds = reqSecs
		req.CPUReqSecs = reqSecs
		req.CPUReqInstances = float64(o.NCPUs - pending)
	}
	var reporting []*task
	for _, t := range h.tasks {
		if t.state == taskReady {
			req.Results = append(req.Results, t.report)
			reporting = append(reporting, t)
			continue
		}
		req.OtherResults = append(req.OtherResults, protocol.OtherResult{
			Name: t.res.Name, AppVersion: t.appVersion, PlanClass: t.res.PlanClass})
	}
	if !h.nextRPCAt.IsZero() && !now.Before(h.nextRPCAt) {
		h.nextRPCAt = time.Time{}
	}
	return req, reporting, reqSecs
}

// replyError is a reply the client must treat as a failed RPC.
func replyError(reply *protocol.SchedulerReply, sentHostID int64) error {
	if reply.ProjectIsDown != nil {
		return errors.New("scheduler reply: project is down")
	}
	if sentHostID == 0 && reply.HostID == 0 {
		var msgs []string
		for _, m := range reply.Messages {
			msgs = append(msgs, strings.TrimSpace(m.Text))
		}
		return fmt.Errorf("scheduler reply: no host id (messages: %q)", strings.Join(msgs, "; "))
	}
	return nil
}

// rpcFailed backs off exponentially with jitter, or longer if a reply
// asked for a longer request_delay.
func (h *host) rpcFailed(now time.Time, reply *protocol.SchedulerReply, err error) {
	h.r.c.rpcErrors.Add(1)
	h.mu.Lock()
	h.rpcFailures++
	n := h.rpcFailures
	o := h.r.opts
	d := backoff(n, o.scaled(rpcBackoffMin), o.scaled(rpcBackoffMax), h.rng.Float64())
	if reply != nil {
		d = max(d, seconds(reply.RequestDelay))
	}
	h.minRPC = now.Add(d)
	h.mu.Unlock()
	h.log.Debug("scheduler rpc failed", "error", err, "consecutive_failures", n, "retry_in", d)
	h.r.warnRateLimited("scheduler rpc failed", "host", h.index, "error", err, "retry_in", d)
}

// applyReply records a successful RPC: the host id, acks, aborts and new
// tasks, and the delays that decide the next RPC.
func (h *host) applyReply(now time.Time, reply *protocol.SchedulerReply, reporting []*task, reqSecs float64) (vanished bool) {
	c := &h.r.c
	o := h.r.opts
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rpcFailures = 0
	if reply.HostID != 0 && reply.HostID != h.hostID {
		h.hostID = reply.HostID
		h.seqno = 0
	} else {
		h.seqno++
	}
	if reply.CrossProjectID != "" {
		h.crossProjectID = reply.CrossProjectID
	}
	h.minRPC = now.Add(seconds(reply.RequestDelay))
	if reply.NextRPCDelay > 0 {
		h.nextRPCAt = now.Add(seconds(reply.NextRPCDelay))
	}

	for _, t := range reporting {
		if t.reported {
			c.rereports.Add(1)
		} else {
			t.reported = true
			c.reported.Add(1)
			c.byKind[h.kind].reported.Add(1)
			if dl := t.res.ReportDeadline; dl > 0 && float64(now.UnixNano())/1e9 > dl {
				t.late = true
				c.late.Add(1)
			}
		}
	}
	for _, a := range reply.ResultAcks {
		if t := h.byName[a.Name]; t != nil && t.state == taskReady && t.reported {
			h.drop(t)
			c.acked.Add(1)
			c.byKind[h.kind].acked.Add(1)
			h.r.logAck(t.res.Name, h.kind, reportedSuccess(t.report), t.late)
		}
	}
	unacked := 0
	for _, t := range reporting {
		if h.byName[t.res.Name] == t {
			unacked++
		}
	}
	if unacked > 0 {
		h.reportFailures++
		h.reportAt = now.Add(backoff(h.reportFailures, o.scaled(rpcBackoffMin), o.scaled(rpcBackoffMax), h.rng.Float64()))
	} else {
		h.reportFailures = 0
		h.reportAt = time.Time{}
	}
	for _, a := range reply.ResultAborts {
		if t := h.byName[a.Name]; t != nil {
			h.drop(t)
			c.abort.Add(1)
		}
	}
	for _, a := range reply.ResultAbortsINS {
		if t := h.byName[a.Name]; t != nil && t.state == taskQueued {
			h.drop(t)
			c.abort.Add(1)
		}
	}

	got := h.addTasks(reply)
	if reqSecs > 0 {
		if got == 0 {
			h.fetchFailures++
			h.workFetchAt = now.Add(backoff(h.fetchFailures, o.scaled(workFetchBackoffMin), o.scaled(workFetchBackoffMax), h.rng.Float64()))
		} else {
			h.fetchFailures = 0
			h.workFetchAt = time.Time{}
		}
	}
	h.log.Debug("scheduler rpc", "host_id", h.hostID, "reported", len(reporting), "acked", len(reporting)-unacked,
		"received", got, "request_delay", reply.RequestDelay)
	if h.kind == KindVanishing && got > 0 {
		c.vanished.Add(int64(len(h.tasks)))
		h.log.Debug("host vanished", "tasks", len(h.tasks))
		return true
	}
	return false
}

// addTasks takes the reply's new results, linking each to its workunit and
// file_infos; a result that cannot be linked is skipped, as the real
// client discards it. The caller holds mu.
func (h *host) addTasks(reply *protocol.SchedulerReply) int {
	files := make(map[string]protocol.FileInfo, len(reply.FileInfos))
	for _, f := range reply.FileInfos {
		files[f.Name] = f
	}
	wus := make(map[string]protocol.Workunit, len(reply.Workunits))
	for _, w := range reply.Workunits {
		wus[w.Name] = w
	}
	for _, av := range reply.AppVersions {
		h.addAppVersion(protocol.ClientAppVer{AppName: av.AppName, VersionNum: av.VersionNum,
			Platform: av.Platform, PlanClass: av.PlanClass, AvgNCPUs: av.AvgNCPUs, Flops: av.Flops})
	}
	got := 0
	for _, res := range reply.Results {
		if h.byName[res.Name] != nil {
			continue
		}
		wu, ok := wus[res.WUName]
		if !ok {
			h.r.warnRateLimited("result without its workunit; discarded", "host", h.index, "result", res.Name, "workunit", res.WUName)
			continue
		}
		t := &task{res: res, appVersion: -1}
		for i, av := range h.appVersions {
			if av.AppName == wu.AppName && av.VersionNum == res.VersionNum && av.PlanClass == res.PlanClass {
				t.appVersion = i
			}
		}
		missing := ""
		for _, fr := range wu.FileRefs {
			f, ok := files[fr.FileName]
			if !ok {
				missing = fr.FileName
				break
			}
			t.inputs = append(t.inputs, f)
		}
		for _, fr := range res.FileRefs {
			f, ok := files[fr.FileName]
			if !ok {
				missing = fr.FileName
				break
			}
			t.outputs = append(t.outputs, f)
		}
		if missing != "" {
			h.r.warnRateLimited("result refers to a file_info not in the reply; discarded", "host", h.index, "result", res.Name, "file", missing)
			continue
		}
		if wu.RscFpopsEst > 0 {
			h.estTask = time.Duration(wu.RscFpopsEst / h.flops * float64(time.Second))
		}
		h.tasks = append(h.tasks, t)
		h.byName[res.Name] = t
		h.r.c.received.Add(1)
		h.r.c.byKind[h.kind].received.Add(1)
		got++
	}
	return got
}

func (h *host) addAppVersion(av protocol.ClientAppVer) {
	for _, have := range h.appVersions {
		if have.AppName == av.AppName && have.VersionNum == av.VersionNum && have.PlanClass == av.PlanClass {
			return
		}
	}
	h.appVersions = append(h.appVersions, av)
}

// drop forgets a task, stopping it if it runs. The caller holds mu.
func (h *host) drop(t *task) {
	if t.cancel != nil {
		t.cancel()
	}
	delete(h.byName, t.res.Name)
	for i, x := range h.tasks {
		if x == t {
			h.tasks = append(h.tasks[:i], h.tasks[i+1:]...)
			break
		}
	}
}

// reportedSuccess is the server's rule for a success (the outputs uploaded
// and exit status 0), so the ack log says what the server should record.
func reportedSuccess(rep protocol.ReportResult) bool {
	if state.ClientState(rep.State) != state.ClientFilesUploaded || rep.ExitStatus != 0 {
		return false
	}
	for _, f := range rep.FileInfos {
		if f.ErrorMsg != "" {
			return false
		}
	}
	return true
}

// errorReport is a task that ended in error.
func (h *host) errorReport(t *task, cs state.ClientState, exit int, elapsed time.Duration, msg string) protocol.ReportResult {
	h.r.c.failed.Add(1)
	h.r.c.byKind[h.kind].failed.Add(1)
	rep := h.baseReport(t, cs, exit, elapsed)
	rep.StderrOut = stderrOut(msg)
	return rep
}

func (h *host) baseReport(t *task, cs state.ClientState, exit int, elapsed time.Duration) protocol.ReportResult {
	platform := t.res.Platform
	if platform == "" {
		platform = platformName
	}
	return protocol.ReportResult{
		Name:             t.res.Name,
		FinalCPUTime:     elapsed.Seconds(),
		FinalElapsedTime: elapsed.Seconds(),
		ExitStatus:       exit,
		State:            int(cs),
		Platform:         platform,
		VersionNum:       t.res.VersionNum,
		PlanClass:        t.res.PlanClass,
		AppVersionNum:    t.res.VersionNum,
	}
}

// stderrOut is the task's stderr_out as the server reads it from the real
// client, CDATA unwrapped: the client version, the client's error message
// if any, and the app's stderr.
func stderrOut(msg string) string {
	var b strings.Builder
	b.WriteString("<core_client_version>7.20.5</core_client_version>\n")
	if msg != "" {
		b.WriteString("<message>\n" + msg + "\n</message>\n")
	}
	b.WriteString("<stderr_txt>\ntaskserver simclient\n</stderr_txt>\n")
	return b.String()
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func seconds(s float64) time.Duration {
	if !(s > 0) {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}
