package simclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/taskserver/taskserver/internal/clientpolicy"
	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/protocol"
)

// rpc does one scheduler RPC to a's project, as the policy asked in wr, and
// applies its reply. It reports whether the host has vanished.
//
// The project's scheduler URLs are tried in turn, from the host's random
// first one, until one answers (a reply, even one saying the project is
// down, ends the round); only when none does is the RPC a failure. The
// master page is read first when the host has no scheduler URL, when
// failures asked for it, or when its periodic re-read is due.
func (h *host) rpc(ctx context.Context, a *attachment, wr clientpolicy.WorkRequest) (vanished bool) {
	started := h.r.now()
	if a.master != "" && (a.masterPending || len(a.urls) == 0 || started >= a.masterDue) {
		if !h.readMaster(ctx, a, started) {
			return false
		}
	}
	req, reporting, asked, coprocs := h.buildRequest(a, wr, started)
	var reply *protocol.SchedulerReply
	var err error
	for i := range len(a.urls) {
		url := a.urls[(a.urlStart+i)%len(a.urls)]
		h.r.c.rpcs.Add(1)
		reply, err = h.r.web.schedulerRPC(ctx, url, req, coprocs)
		if ctx.Err() != nil {
			return false // stopping; the failure is ours, not the server's
		}
		if err == nil || i == len(a.urls)-1 {
			break
		}
		h.r.c.failovers.Add(1)
		h.log.Debug("scheduler rpc failed; trying the next scheduler", "url", url, "error", err)
	}
	now := h.r.now()
	h.advance(now) // the CPUs kept working during the exchange
	if err == nil {
		err = replyError(reply, req.HostID)
	}
	h.r.rec.RPC(a.index, started, err != nil)
	a.releaseFetch()
	defer a.holdFetch()
	if err != nil {
		h.rpcFailed(a, now, reply, err)
		return false
	}
	return h.applyReply(a, now, reply, reporting, asked)
}

// buildRequest writes the scheduler request to a's project: identity, host
// description, the work the policy asked for, every finished task, and the
// tasks in progress.
//
// Each resource is asked for what its own work fetch needs (BOINC's
// per-resource req_secs, req_instances and estimated_delay), nothing for
// a resource the project has no apps for or is backed off on;
// work_req_seconds is the CPU's, as in the real client. asked is the
// seconds of work asked of each resource, in the policy's units; coprocs
// the <coprocs> element of a host with GPUs.
func (h *host) buildRequest(a *attachment, _ clientpolicy.WorkRequest, now float64) (req *protocol.SchedulerRequest, reporting []*task, asked []float64, coprocs []byte) {
	startUnix := float64(h.r.start.UnixNano()) / 1e9
	af := h.activity.Frac(now)
	req = &protocol.SchedulerRequest{
		Authenticator:          a.auth,
		HostID:                 a.hostID,
		RPCSeqno:               a.seqno,
		CoreClientMajorVersion: clientMajor,
		CoreClientMinorVersion: clientMinor,
		CoreClientRelease:      clientRelease,
		ResourceShareFraction:  a.shareFrac,
		// The work request below is in the server's units (rsc_fpops_est
		// over p_fpops), which is what a correction factor of 1 says.
		DurationCorrectionFactor: 1,
		PlatformName:             platformName,
		CrossProjectID:           a.crossProjectID,
		HostInfo:                 h.info,
		// The fractions the host measured, not the configured one: the
		// server plans with what the host really does.
		TimeStats: protocol.TimeStats{OnFrac: af, ConnectedFrac: 1, CPUAndNetworkAvailableFrac: 1,
			ActiveFrac: 1, GPUActiveFrac: 1, ClientStartTime: float64(h.r.start.Unix()), Now: startUnix + now},
		DiskUsage:   protocol.DiskUsage{DBoincUsedTotal: 1e6, DBoincUsedProject: 1e6, DProjectShare: h.info.DFree / 2},
		AppVersions: append([]protocol.ClientAppVer(nil), a.appVersions...),
		HostFiles:   a.sticky.held(),
	}
	req.MsgsFromHost = append(req.MsgsFromHost, a.msgs...)
	a.msgsSent = len(a.msgs)
	asked = make([]float64, h.resources())
	if a.downloading == 0 {
		for k := range asked {
			asked[k] = h.policy(k).WorkRequestSeconds(a.rp[k], now)
		}
	}
	if asked[0] > 0 {
		secs := max(asked[0]/a.dcf[0], 1e-3)
		req.WorkReqSeconds = secs
		req.CPUReqSecs = secs
		req.CPUReqInstances = float64(h.idleCPUs())
		req.EstimatedDelay = h.estimatedDelay(0, now)
	}
	if len(h.gpus) > 0 {
		reqs := make([]gpuRequest, len(h.gpus))
		for i := range h.gpus {
			if asked[1+i] > 0 {
				reqs[i] = gpuRequest{reqSecs: max(asked[1+i]/a.dcf[1+i], 1e-3), reqInstances: h.idleInstances(1 + i),
					estimatedDelay: h.estimatedDelay(1+i, now)}
			}
		}
		var b bytes.Buffer
		writeCoprocs(&b, h.gpus, reqs)
		coprocs = b.Bytes()
	}
	for _, t := range h.tasks {
		if t.att != a {
			continue
		}
		if t.phase == phaseReady {
			req.Results = append(req.Results, t.report)
			reporting = append(reporting, t)
			continue
		}
		req.OtherResults = append(req.OtherResults, protocol.OtherResult{
			Name: t.res.Name, AppVersion: t.appVersion, PlanClass: t.res.PlanClass})
	}
	if a.nextRPCAt <= now {
		a.nextRPCAt = math.Inf(1)
	}
	return req, reporting, asked, coprocs
}

// idleCPUs is how many CPUs have no task to compute.
func (h *host) idleCPUs() int { return int(h.idleInstances(0)) }

// idleInstances is how many instances of resource k no task holds (one
// being downloaded counts as held), whole instances only. GPU tasks hold
// the whole CPUs their CPU shares add up to, as in host.schedule.
func (h *host) idleInstances(k int) float64 {
	n := float64(h.ncpus)
	if k > 0 {
		n = float64(h.gpus[k-1].count)
	}
	gpuCPUs := 0.0
	for _, t := range h.tasks {
		if t.phase != phaseDownloading && t.phase != phaseComputing {
			continue
		}
		switch {
		case t.rsc == k:
			n -= t.width
		case k == 0:
			gpuCPUs += t.cpus
		}
	}
	n -= math.Floor(gpuCPUs + 1e-9)
	return max(math.Floor(n+1e-9), 0)
}

// estimatedDelay is how long until an instance of resource k is free for
// new work, as the client estimates it: 0 when one is idle, else the
// shortest time left among the tasks running on it.
func (h *host) estimatedDelay(k int, now float64) float64 {
	if h.idleInstances(k) > 0 {
		return 0
	}
	d := math.Inf(1)
	for _, t := range h.tasks {
		if t.rsc == k && t.phase == phaseComputing {
			d = min(d, t.cp.Remaining()/h.activity.Frac(now))
		}
	}
	if math.IsInf(d, 1) {
		return 0
	}
	return d
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

// rpcFailed backs the project off exponentially with jitter (seed 002), or
// longer if a reply asked for a longer request_delay.
func (h *host) rpcFailed(a *attachment, now float64, reply *protocol.SchedulerReply, err error) {
	h.r.c.rpcErrors.Add(1)
	if a.master != "" && a.p.RPCFailures >= masterFetchPeriod {
		// The real client reads the master page again after this many
		// failures in a row, in case the schedulers moved, and starts
		// its back-off over.
		a.masterPending, a.p.RPCFailures = true, 0
	}
	h.cp.RPCFailed(a.p, now, h.rand())
	if reply != nil {
		a.p.MinRPC = max(a.p.MinRPC, now+reply.RequestDelay)
	}
	retry := seconds(a.p.MinRPC - now)
	h.log.Debug("scheduler rpc failed", "project", h.r.projects[a.index].Name, "error", err,
		"consecutive_failures", a.p.RPCFailures, "retry_in", retry)
	h.r.warnRateLimited("scheduler rpc failed", "host", h.index, "project", h.r.projects[a.index].Name,
		"error", err, "retry_in", retry)
}

// applyReply records a successful RPC: the host id, acks, aborts and new
// tasks, and the delays that decide the next RPC.
func (h *host) applyReply(a *attachment, now float64, reply *protocol.SchedulerReply, reporting []*task, asked []float64) (vanished bool) {
	c := &h.r.c
	o := h.r.opts
	if reply.HostID != 0 && reply.HostID != a.hostID {
		a.hostID = reply.HostID
		a.seqno = 0
	} else {
		a.seqno++
	}
	if reply.CrossProjectID != "" {
		a.crossProjectID = reply.CrossProjectID
	}

	wall := float64(h.r.start.UnixNano())/1e9 + now
	for _, t := range reporting {
		if t.reported {
			c.rereports.Add(1)
			continue
		}
		t.reported = true
		c.reported.Add(1)
		c.byKind[h.kind].reported.Add(1)
		if dl := t.res.ReportDeadline; dl > 0 && wall > dl {
			t.late = true
			c.late.Add(1)
		}
		h.r.rec.Reported(a.index, t.late)
	}
	for _, ack := range reply.ResultAcks {
		if t := a.byName[ack.Name]; t != nil && t.phase == phaseReady && t.reported {
			h.drop(t)
			c.acked.Add(1)
			c.byKind[h.kind].acked.Add(1)
			h.r.logAck(t.res.Name, h.kind, reportedSuccess(t.report), t.late)
		}
	}
	unacked := 0
	for _, t := range reporting {
		if h.holds(t) {
			unacked++
		}
	}
	for _, ab := range reply.ResultAborts {
		if t := a.byName[ab.Name]; t != nil {
			h.drop(t)
			c.abort.Add(1)
		}
	}
	for _, ab := range reply.ResultAbortsINS {
		// "If not started": still downloading, or never given a CPU.
		if t := a.byName[ab.Name]; t != nil && (t.phase == phaseDownloading ||
			t.phase == phaseComputing && t.cp.State == clientpolicy.TaskWaiting) {
			h.drop(t)
			c.abort.Add(1)
		}
	}

	a.sticky.forget(reply.DeleteFileInfos)
	if reply.MessageAck != nil {
		// Every message of the request is stored: the client deletes them.
		c.tricklesAcked.Add(int64(a.msgsSent))
		a.msgs = a.msgs[a.msgsSent:]
	}
	a.msgsSent = 0
	c.downs.Add(int64(len(reply.TrickleDowns)))
	gotBy, est := h.addTasks(a, reply, now)
	got, askedAny := 0, false
	for k := range gotBy {
		got += gotBy[k]
		askedAny = askedAny || asked[k] > 0
	}
	overloaded := reply.Overloaded != nil
	if overloaded {
		c.overloaded.Add(1)
	}
	if got > 0 {
		h.r.rec.Fetched(a.index, got, est)
	} else if askedAny && !overloaded {
		h.r.rec.NoWork(a.index)
	}
	// Each resource learns what its own request got: one asked for and
	// not given backs off alone (client/work_fetch.cpp); one the project
	// says it has no apps for is not asked again.
	for k := range gotBy {
		rp := a.rp[k]
		rp.NoApps = slices.Contains(reply.NoRscApps, h.resourceName(k))
		h.policy(k).RPCSucceeded(rp, now, clientpolicy.Reply{RequestDelay: max(reply.RequestDelay, 0),
			AskedSeconds: asked[k], NewTasks: gotBy[k], Overloaded: overloaded}, h.rand())
	}
	if unacked > 0 {
		// Reports the server did not take are retried after a back-off,
		// not at once.
		a.reportFailures++
		d := backoff(a.reportFailures, o.scaled(rpcBackoffMin), o.scaled(rpcBackoffMax), h.rand())
		a.p.MinRPC = max(a.p.MinRPC, now+d.Seconds())
	} else {
		a.reportFailures = 0
	}
	if reply.NextRPCDelay > 0 {
		a.nextRPCAt = now + reply.NextRPCDelay
	}
	h.log.Debug("scheduler rpc", "project", h.r.projects[a.index].Name, "host_id", a.hostID,
		"reported", len(reporting), "acked", len(reporting)-unacked, "received", got,
		"asked_seconds", asked, "request_delay", reply.RequestDelay, "overloaded", overloaded)
	if h.kind == KindVanishing && got > 0 {
		c.vanished.Add(int64(len(h.tasks)))
		h.log.Debug("host vanished", "tasks", len(h.tasks))
		return true
	}
	return false
}

// addTasks takes the reply's new results, linking each to its workunit and
// file_infos, and starts their downloads; a result that cannot be linked is
// skipped, as the real client discards it. Each task runs where its app
// version's usage says (versionUsage). It returns how many it took for
// each resource and their estimated CPU seconds.
func (h *host) addTasks(a *attachment, reply *protocol.SchedulerReply, now float64) ([]int, float64) {
	files := make(map[string]protocol.FileInfo, len(reply.FileInfos))
	for _, f := range reply.FileInfos {
		files[f.Name] = f
	}
	wus := make(map[string]protocol.Workunit, len(reply.Workunits))
	for _, w := range reply.Workunits {
		wus[w.Name] = w
	}
	for _, av := range reply.AppVersions {
		a.addAppVersion(protocol.ClientAppVer{AppName: av.AppName, VersionNum: av.VersionNum,
			Platform: av.Platform, PlanClass: av.PlanClass, AvgNCPUs: av.AvgNCPUs, Flops: av.Flops})
		a.usage[versionKey{av.AppName, av.VersionNum, av.PlanClass}] = usageOf(av)
	}
	got, est := make([]int, h.resources()), 0.0
	var err error
	for _, res := range reply.Results {
		if a.byName[res.Name] != nil {
			continue
		}
		wu, ok := wus[res.WUName]
		if !ok {
			h.r.warnRateLimited("result without its workunit; discarded", "host", h.index, "result", res.Name, "workunit", res.WUName)
			continue
		}
		t := &task{att: a, res: res, appVersion: -1, appName: wu.AppName}
		u := a.usage[versionKey{wu.AppName, res.VersionNum, res.PlanClass}]
		t.rsc, t.width, t.cpus, t.noDevice = h.place(u)
		if t.noDevice != "" {
			h.r.c.noDevice.Add(1)
			h.r.warnRateLimited("task for a coprocessor the host lacks", "host", h.index, "result", res.Name, "why", t.noDevice)
		}
		for i, av := range a.appVersions {
			if av.AppName == wu.AppName && av.VersionNum == res.VersionNum && av.PlanClass == res.PlanClass {
				t.appVersion = i
			}
		}
		var missing string
		t.inputs, missing = lookupFiles(wu.FileRefs, files, &a.sticky)
		if missing == "" {
			t.outputs, missing = lookupFiles(res.FileRefs, files, nil)
			t.outputRefs = res.FileRefs
		}
		if missing != "" {
			h.r.warnRateLimited("result refers to a file_info not in the reply; discarded", "host", h.index, "result", res.Name, "file", missing)
			continue
		}
		// The app's command line is the app version's and then the job's.
		if t.rounds, err = demoapp.ParseRounds(strings.Fields(wu.CommandLine)); err != nil {
			t.badCommandLine = err.Error()
		}
		// Without an estimate from the server the host guesses its
		// nominal task time. The speed is the one the server gave for
		// the version (<flops>), else the resource's own.
		speed := u.flops
		if !(speed > 0) || math.IsInf(speed, 0) {
			speed = h.flops * t.width
			if t.rsc > 0 {
				speed = h.gpus[t.rsc-1].speed * t.width
			}
		}
		t.estRaw = h.computeTime().Seconds() * h.flops / speed
		if wu.RscFpopsEst > 0 && !math.IsInf(wu.RscFpopsEst, 0) {
			t.estRaw = wu.RscFpopsEst / speed
		}
		h.received(t, now)
		h.r.c.received.Add(1)
		h.r.c.byKind[h.kind].received.Add(1)
		got[t.rsc]++
		est += t.cp.EstCPU
	}
	return got, est
}

func (a *attachment) addAppVersion(av protocol.ClientAppVer) {
	for _, have := range a.appVersions {
		if have.AppName == av.AppName && have.VersionNum == av.VersionNum && have.PlanClass == av.PlanClass {
			return
		}
	}
	a.appVersions = append(a.appVersions, av)
}

// lookupFiles returns the file_infos the references name, in order, or the
// name of the first one the reply did not describe. A sticky file the host
// holds (or is downloading) may be left out of the reply.
func lookupFiles(refs []protocol.FileRef, files map[string]protocol.FileInfo, sticky *stickyFiles) (infos []protocol.FileInfo, missing string) {
	for _, fr := range refs {
		f, ok := files[fr.FileName]
		if !ok && sticky != nil {
			f, ok = sticky.info(fr.FileName)
		}
		if !ok {
			return nil, fr.FileName
		}
		infos = append(infos, f)
	}
	return infos, ""
}
