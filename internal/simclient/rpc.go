package simclient

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/taskserver/taskserver/internal/clientpolicy"
	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/protocol"
)

// rpc does one scheduler RPC to a's project, as the policy asked in wr, and
// applies its reply. It reports whether the host has vanished.
func (h *host) rpc(ctx context.Context, a *attachment, wr clientpolicy.WorkRequest) (vanished bool) {
	started := h.r.now()
	req, reporting := h.buildRequest(a, wr, started)
	h.r.c.rpcs.Add(1)
	reply, err := h.r.web.schedulerRPC(ctx, a.url, req)
	if ctx.Err() != nil {
		return false // stopping; the failure is ours, not the server's
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
	return h.applyReply(a, now, reply, reporting, wr.Seconds)
}

// buildRequest writes the scheduler request to a's project: identity, host
// description, the work the policy asked for, every finished task, and the
// tasks in progress.
func (h *host) buildRequest(a *attachment, wr clientpolicy.WorkRequest, now float64) (*protocol.SchedulerRequest, []*task) {
	o := h.r.opts
	startUnix := float64(h.r.start.UnixNano()) / 1e9
	req := &protocol.SchedulerRequest{
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
		TimeStats: protocol.TimeStats{OnFrac: o.OnFrac, ConnectedFrac: 1, CPUAndNetworkAvailableFrac: 1,
			ActiveFrac: o.OnFrac, GPUActiveFrac: 1, ClientStartTime: float64(h.r.start.Unix()), Now: startUnix + now},
		DiskUsage:   protocol.DiskUsage{DBoincUsedTotal: 1e6, DBoincUsedProject: 1e6, DProjectShare: h.info.DFree / 2},
		AppVersions: append([]protocol.ClientAppVer(nil), a.appVersions...),
		HostFiles:   a.sticky.held(),
	}
	req.MsgsFromHost = append(req.MsgsFromHost, a.msgs...)
	a.msgsSent = len(a.msgs)
	if wr.Seconds > 0 {
		secs := max(wr.Seconds/a.dcf, 1e-3)
		req.WorkReqSeconds = secs
		req.CPUReqSecs = secs
		req.CPUReqInstances = float64(h.idleCPUs())
	}
	var reporting []*task
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
	return req, reporting
}

// idleCPUs is how many CPUs have no task to compute.
func (h *host) idleCPUs() int {
	n := h.r.opts.NCPUs
	for _, t := range h.tasks {
		if t.phase == phaseDownloading || t.phase == phaseComputing {
			n--
		}
	}
	return max(n, 0)
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
func (h *host) applyReply(a *attachment, now float64, reply *protocol.SchedulerReply, reporting []*task, asked float64) (vanished bool) {
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
	got, est := h.addTasks(a, reply, now)
	if got > 0 {
		h.r.rec.Fetched(a.index, got, est)
	} else if asked > 0 {
		h.r.rec.NoWork(a.index)
	}
	h.cp.RPCSucceeded(a.p, now, clientpolicy.Reply{RequestDelay: max(reply.RequestDelay, 0), AskedSeconds: asked, NewTasks: got}, h.rand())
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
		"asked_seconds", asked, "request_delay", reply.RequestDelay)
	if h.kind == KindVanishing && got > 0 {
		c.vanished.Add(int64(len(h.tasks)))
		h.log.Debug("host vanished", "tasks", len(h.tasks))
		return true
	}
	return false
}

// addTasks takes the reply's new results, linking each to its workunit and
// file_infos, and starts their downloads; a result that cannot be linked is
// skipped, as the real client discards it. It returns how many it took and
// their estimated CPU seconds.
func (h *host) addTasks(a *attachment, reply *protocol.SchedulerReply, now float64) (int, float64) {
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
	}
	got, est := 0, 0.0
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
		t := &task{att: a, res: res, appVersion: -1}
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
		// nominal task time.
		t.estRaw = h.computeTime().Seconds()
		if wu.RscFpopsEst > 0 && !math.IsInf(wu.RscFpopsEst, 0) {
			t.estRaw = wu.RscFpopsEst / h.flops
		}
		h.received(t, now)
		h.r.c.received.Add(1)
		h.r.c.byKind[h.kind].received.Add(1)
		got++
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
