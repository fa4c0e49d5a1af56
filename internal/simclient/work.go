package simclient

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/taskserver/taskserver/internal/clientpolicy"
	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/state"
)

// BOINC client exit statuses the simulated hosts report.
const (
	exitComputeError   = 1    // what a failing app returns
	errResultDownload  = -186 // ERR_RESULT_DOWNLOAD
	errResultUpload    = -187 // ERR_RESULT_UPLOAD
	errMD5Failed       = -119 // ERR_MD5_FAILED
	uploadFailedErrMsg = "permanent upload error"
)

// dcfWeight is how far one completed task pulls a project's duration
// correction factor down towards its observed runtime ratio. The first
// completed task sets it, and a task longer than estimated raises it at
// once, as the real client does, so the host errs towards holding too
// little work rather than missing deadlines.
const dcfWeight = 0.1

// taskPhase is where a task is in its life on the host.
type taskPhase int

const (
	// phaseDownloading: its inputs are being fetched; the CPU scheduler
	// does not know it yet.
	phaseDownloading taskPhase = iota
	// phaseComputing: with the CPU scheduler, waiting, running or
	// preempted; its CPU time grows while it runs.
	phaseComputing
	// phaseFinishing: computed; its output is being produced and
	// uploaded (a late host first waits for the deadline). The scheduler
	// has it as finished, so its CPU is free, but with no finish time and
	// no deadline until the upload is done, so no report-result session
	// is due for it before there is something to report.
	phaseFinishing
	// phaseReady: finished (done with the scheduler); its report goes in
	// every RPC to its project until the server acknowledges it.
	phaseReady
)

// task is one result the host holds, from receipt until the server acks it.
type task struct {
	att        *attachment
	res        protocol.Result
	inputs     []protocol.FileInfo
	outputs    []protocol.FileInfo
	outputRefs []protocol.FileRef // the result's file_refs, parallel to outputs
	appVersion int                // index into att.appVersions, or -1
	// rsc is the resource the task runs on (0: CPUs, k: host.gpus[k-1]);
	// width how many of its instances it occupies (CPUs of a
	// multi-threaded task, a GPU fraction); cpus how many CPUs it keeps
	// busy (width for a CPU task, avg_ncpus for a GPU task).
	rsc         int
	width, cpus float64
	noDevice    string // the version needs a coprocessor the host lacks
	appName     string
	phase       taskPhase
	cp          clientpolicy.Task
	deadline    float64       // report deadline, run seconds
	estRaw      float64       // rsc_fpops_est / p_fpops, before the correction factor
	runtime     float64       // CPU seconds it really takes on this host
	fails       bool          // ends in a compute error (failing host, or the demo app fails on it)
	files       demoapp.Files // the inputs' contents, in the workunit's order
	rounds      int           // the demo app's --rounds, from the command line
	// badCommandLine, if not empty, is why the demo app would refuse the
	// job's command line: the task ends in a compute error.
	badCommandLine string
	trickles       bool // its app sends a trickle-up when it finishes computing
	reported       bool
	late           bool // first reported after its report deadline
	wasRunning     bool // scratch of host.schedule
	cancel         context.CancelFunc
	report         protocol.ReportResult
}

// received starts a task the server sent: it joins its project's tasks and
// its inputs start downloading.
func (h *host) received(t *task, now float64) {
	a := t.att
	h.nextID++
	t.deadline = h.r.runTime(t.res.ReportDeadline)
	t.cp = clientpolicy.Task{ID: h.nextID, Project: a.rp[t.rsc], EstCPU: t.estRaw * a.dcf[t.rsc],
		Deadline: t.deadline, Received: now, NCPUs: t.width}
	h.tasks = append(h.tasks, t)
	a.byName[t.res.Name] = t
	a.downloading++
	if h.kind == KindVanishing {
		return // gone before it downloads anything
	}
	ctx, cancel := context.WithCancel(h.taskCtx)
	t.cancel = cancel
	h.taskWG.Go(func() {
		defer cancel()
		start := time.Now()
		files, err := h.download(ctx, t)
		if ctx.Err() != nil {
			return // stopping or aborted
		}
		elapsed := time.Since(start)
		h.post(ctx, func(now float64) { h.downloaded(t, files, err, elapsed, now) })
	})
}

// download fetches a task's inputs; a sticky one comes from the host's
// copy when it holds one.
func (h *host) download(ctx context.Context, t *task) (demoapp.Files, error) {
	files := make(demoapp.Files, 0, len(t.inputs))
	for _, fi := range t.inputs {
		fetch := func() ([]byte, error) {
			var b []byte
			err := h.retry(ctx, &h.r.c.downloadErrors, func(attempt int) error {
				var err error
				b, err = h.r.web.download(ctx, fi, attempt)
				return err
			})
			if err == nil {
				h.r.c.downloads.Add(1)
				if len(fi.GzippedURLs) > 0 {
					h.r.c.gzipped.Add(1)
				}
			}
			return b, err
		}
		var b []byte
		var err error
		if fi.Sticky != nil {
			var reused bool
			if b, reused, err = t.att.sticky.get(ctx, fi, fetch); reused {
				h.r.c.stickyReused.Add(1)
			}
		} else {
			b, err = fetch()
		}
		if err != nil {
			return nil, err
		}
		files = append(files, b)
	}
	return files, nil
}

// downloaded hands a task to the CPU scheduler once its inputs are here,
// or makes it a download error to report.
func (h *host) downloaded(t *task, files demoapp.Files, err error, elapsed time.Duration, now float64) {
	if !h.holds(t) || t.phase != phaseDownloading {
		return
	}
	h.leaveDownloading(t)
	h.policy(t.rsc).AddTask(&t.cp)
	h.dirty = true
	if err != nil {
		h.log.Debug("download failed", "result", t.res.Name, "error", err)
		exit := errResultDownload
		if errors.Is(err, errChecksum) {
			exit = errMD5Failed
		}
		h.ready(t, h.errorReport(t, state.ClientFilesDownloading, exit, elapsed.Seconds(), err.Error()), true, now)
		return
	}
	t.files = files
	t.phase = phaseComputing
	t.trickles = h.r.opts.TrickleFrac > 0 && h.rand() < h.r.opts.TrickleFrac
	d := h.computeTime().Seconds() * (0.9 + 0.2*h.rand())
	if t.rsc > 0 {
		// On a GPU at its speed, for the part of it the task has.
		d *= h.flops / (h.gpus[t.rsc-1].speed * t.width)
	} else {
		d /= t.width // a multi-threaded app on its CPUs
	}
	// A failing host fails everything; every host fails a job the demo
	// app fails on (demoapp.FailMarker, a bad command line), as the real
	// demo_app does; a task for a coprocessor the host lacks fails at
	// once.
	if h.kind == KindFailing || len(files) == 0 || demoapp.Fails(files[0]) || t.badCommandLine != "" || t.noDevice != "" {
		t.fails, d = true, d/2
	}
	t.runtime = d
}

// leaveDownloading ends a task's download phase; the last download of a
// project lets the policy ask it for work again.
func (h *host) leaveDownloading(t *task) {
	if t.phase != phaseDownloading {
		return
	}
	if t.att.downloading--; t.att.downloading == 0 {
		t.att.releaseFetch()
	}
}

// computed is called when a task's CPU time reaches its runtime, at run
// time at. A failing task is ready to report at once; any other produces
// its output and uploads it in a goroutine.
func (h *host) computed(t *task, at float64) {
	a := t.att
	h.r.rec.Completed(a.index)
	t.phase = phaseFinishing
	h.dirty = true
	t.cp.EstCPU = t.cp.CPU
	h.policy(t.rsc).TaskFinished(&t.cp, at)
	switch {
	case t.rsc > 0:
		h.r.c.gpuTasks.Add(1)
	case t.width > 1:
		h.r.c.mtTasks.Add(1)
	}
	if !t.fails {
		h.r.versions.add(t.att.index, t.res, t.appName, t.runtime)
	}
	if t.trickles && !t.fails {
		wall := h.r.start.Add(time.Duration(at * float64(time.Second))).Unix()
		a.msgs = append(a.msgs, protocol.NewMsgFromHost(t.res.Name, wall, "progress",
			fmt.Sprintf("<cpu_time>%.3f</cpu_time>", t.runtime)))
		h.r.c.trickles.Add(1)
	}
	if t.fails {
		h.ready(t, h.errorReport(t, state.ClientComputeError, exitComputeError, t.runtime,
			"process exited with code 1 (0x1, -255)"), true, at)
		return
	}
	if k := t.rsc; t.estRaw > 0 {
		ratio := t.runtime / t.estRaw
		switch {
		case !a.dcfLearned[k] || ratio > a.dcf[k]:
			a.dcf[k], a.dcfLearned[k] = ratio, true
		default:
			a.dcf[k] += dcfWeight * (ratio - a.dcf[k])
		}
		for _, o := range a.byName {
			if o.phase == phaseComputing && o.rsc == k {
				o.cp.EstCPU = o.estRaw * a.dcf[k]
			}
		}
	}
	t.cp.Finished, t.cp.Deadline = math.Inf(1), math.Inf(1) // nothing to report yet
	ctx, cancel := context.WithCancel(h.taskCtx)
	t.cancel = cancel
	h.taskWG.Go(func() {
		defer cancel()
		rep, taskErr := h.finish(ctx, t)
		if ctx.Err() != nil {
			return // stopping or aborted: nothing to report
		}
		h.post(ctx, func(now float64) {
			if h.holds(t) && t.phase == phaseFinishing {
				h.ready(t, rep, taskErr, now)
				h.dirty = true
			}
		})
	})
}

// ready makes a task's report ready to send: for the policy it finished
// now, so a report-result session falls due by the policy's rules. After an
// unrecoverable task error (a crash, a failed download or upload) the
// project's next RPC backs off exponentially in the number of such errors
// in a row (seed 002); a task that went well resets the count.
func (h *host) ready(t *task, rep protocol.ReportResult, taskErr bool, now float64) {
	t.report = rep
	t.phase = phaseReady
	if t.cp.State != clientpolicy.TaskDone {
		h.policy(t.rsc).TaskFinished(&t.cp, now) // a download that failed: it never ran
	}
	t.cp.Finished, t.cp.Deadline = now, t.deadline
	if taskErr {
		h.cp.TaskFailed(t.att.p, now, h.rand())
		h.r.c.errorBackoffs.Add(1)
	} else {
		h.cp.TaskSucceeded(t.att.p)
	}
}

// holds reports whether t is still one of the host's tasks (not acked or
// aborted meanwhile).
func (h *host) holds(t *task) bool { return t.att.byName[t.res.Name] == t }

// drop forgets a task, stopping its transfers. Only the host goroutine
// calls it.
func (h *host) drop(t *task) {
	if t.cancel != nil {
		t.cancel()
	}
	h.leaveDownloading(t)
	if t.phase != phaseDownloading {
		h.policy(t.rsc).RemoveTask(&t.cp)
	}
	t.phase = phaseReady // a late transfer result finds it gone
	delete(t.att.byName, t.res.Name)
	for i, x := range h.tasks {
		if x == t {
			h.tasks = append(h.tasks[:i], h.tasks[i+1:]...)
			break
		}
	}
	h.dirty = true
}

// finish produces a computed task's output and uploads it: the demo app's
// output, or a cheater's forgery; a late host first waits for the deadline
// to pass. It returns the report and whether the task ended in an
// unrecoverable error. When ctx ends early the result is meaningless and
// the caller drops it.
func (h *host) finish(ctx context.Context, t *task) (protocol.ReportResult, bool) {
	out, log := h.compute(t)
	h.r.c.computed.Add(1)
	h.r.c.byKind[h.kind].computed.Add(1)
	if h.kind == KindLate && !sleep(ctx, time.Until(h.lateUntil(t))) {
		return protocol.ReportResult{}, false
	}

	var files []protocol.ReportFileInfo
	for i, fi := range t.outputs {
		data := out
		if t.outputRefs[i].OpenName == demoapp.LogName {
			data = log
		}
		sum := md5hex(data)
		url := ""
		if urls := uploadURLs(fi); len(urls) > 0 {
			url = urls[0]
		}
		rf := protocol.ReportFileInfo{Name: fi.Name, Nbytes: float64(len(data)), MaxNbytes: fi.MaxNbytes,
			MD5Cksum: sum, UploadURL: url}
		err := h.retry(ctx, &h.r.c.uploadErrors, func(attempt int) error {
			return h.r.web.upload(ctx, fi, data, sum, attempt)
		})
		if err != nil {
			if ctx.Err() != nil {
				return protocol.ReportResult{}, false
			}
			h.log.Debug("upload failed", "result", t.res.Name, "error", err)
			rf.ErrorMsg = uploadFailedErrMsg
			rep := h.errorReport(t, state.ClientUploadFailed, errResultUpload, t.runtime, err.Error())
			rep.FileInfos = append(files, rf)
			return rep, true
		}
		h.r.c.uploadedFiles.Add(1)
		files = append(files, rf)
	}
	h.r.c.uploaded.Add(1)
	rep := h.baseReport(t, state.ClientFilesUploaded, 0, t.runtime)
	rep.StderrOut = stderrOut("")
	rep.FileInfos = files
	return rep, false
}

// lateUntil is when a late host comes back online with task t: its report
// deadline plus LateBy × a random factor in [1, 2). A task without a
// deadline is not held.
func (h *host) lateUntil(t *task) time.Time {
	dl := t.res.ReportDeadline
	if !(dl > 0) {
		return time.Time{}
	}
	extra := time.Duration(float64(h.r.opts.LateBy) * (1 + h.rand()))
	return time.Unix(0, int64(dl*1e9)).Add(extra)
}

// compute is the demo app: the correct "out" and "log" of the task's
// inputs and rounds; for a cheater an "out" of the same shape computed from
// a slightly altered first input, so its digest is wrong and differs from
// every other cheater's.
func (h *host) compute(t *task) (out, log []byte) {
	log = demoapp.Log(t.files, t.rounds)
	if h.kind != KindCheating {
		return demoapp.Out(t.files, t.rounds), log
	}
	h.r.c.cheated.Add(1)
	forged := append([]byte(nil), t.files[0]...)
	for len(forged) < len(h.salt) {
		forged = append(forged, 0)
	}
	for i := range h.salt {
		forged[i] ^= h.salt[i]
	}
	files := append(demoapp.Files{forged}, t.files[1:]...)
	return demoapp.Out(files, t.rounds), log
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

// errorReport is a task that ended in error after elapsed seconds.
func (h *host) errorReport(t *task, cs state.ClientState, exit int, elapsed float64, msg string) protocol.ReportResult {
	h.r.c.failed.Add(1)
	h.r.c.byKind[h.kind].failed.Add(1)
	rep := h.baseReport(t, cs, exit, elapsed)
	rep.StderrOut = stderrOut(msg)
	return rep
}

func (h *host) baseReport(t *task, cs state.ClientState, exit int, elapsed float64) protocol.ReportResult {
	platform := t.res.Platform
	if platform == "" {
		platform = platformName
	}
	// A multi-threaded task uses its CPUs the whole time; a GPU task its
	// avg_ncpus.
	cpus := t.cpus
	if !(cpus > 0) {
		cpus = 1
	}
	if t.rsc > 0 {
		cpus = max(t.cpus, 0.01)
	}
	return protocol.ReportResult{
		Name:             t.res.Name,
		FinalCPUTime:     elapsed * cpus,
		FinalElapsedTime: elapsed,
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

// retry runs a transfer until it succeeds, fails permanently, runs out of
// attempts, or ctx ends, backing off between attempts. Every failed attempt
// is counted in errs.
func (h *host) retry(ctx context.Context, errs *atomic.Int64, f func(attempt int) error) error {
	o := h.r.opts
	for attempt := 0; ; attempt++ {
		err := f(attempt)
		if err == nil || ctx.Err() != nil {
			return err
		}
		errs.Add(1)
		if isPermanent(err) || attempt+1 >= o.TransferAttempts {
			return err
		}
		d := backoff(attempt+1, o.scaled(transferBackoffMin), o.scaled(transferBackoffMax), h.rand())
		h.log.Debug("transfer failed; retrying", "error", err, "attempt", attempt+1, "retry_in", d)
		if !sleep(ctx, d) {
			return ctx.Err()
		}
	}
}

// sleep waits d or until ctx ends; it reports whether the full time passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
