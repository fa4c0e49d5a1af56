package simclient

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskserver/taskserver/internal/simreport"
)

// warnEvery rate-limits the run's warnings so a down server produces one
// line per interval, not one per host.
const warnEvery = 10 * time.Second

// runner is what the hosts of one run share.
type runner struct {
	opts       Options
	projects   []Project // with defaults: names and shares
	web        *web
	c          counters
	rec        *simreport.Recorder
	interval   float64         // of the report's series, seconds
	rpcCtx     context.Context // ends on the caller's stop or Duration, not on MaxRPCs
	start      time.Time
	stop       context.CancelFunc
	ackMu      sync.Mutex // serialises lines of opts.AckLog
	rpcStarted atomic.Int64
	lastWarn   atomic.Int64 // unix nanoseconds
	suppressed atomic.Int64
	versions   versionRecorder
}

// now is the run's clock for the client policy: seconds since the start.
func (r *runner) now() float64 { return time.Since(r.start).Seconds() }

// runTime converts a Unix time in seconds (a report deadline) to the run's
// clock; no time (0) is never.
func (r *runner) runTime(unix float64) float64 {
	if !(unix > 0) {
		return math.Inf(1)
	}
	return unix - float64(r.start.UnixNano())/1e9
}

// reserveRPC counts an RPC against Options.MaxRPCs; when the bound is
// reached it stops the whole run and reports false.
func (r *runner) reserveRPC() bool {
	if r.opts.MaxRPCs <= 0 {
		return true
	}
	if r.rpcStarted.Add(1) > r.opts.MaxRPCs {
		r.stop()
		return false
	}
	return true
}

// logAck writes one line of opts.AckLog, if any. A write error is warned
// about, not fatal: the simulation matters more than its log.
func (r *runner) logAck(name string, kind Kind, success, late bool) {
	if r.opts.AckLog == nil {
		return
	}
	outcome, when := "error", "on_time"
	if success {
		outcome = "success"
	}
	if late {
		when = "late"
	}
	r.ackMu.Lock()
	_, err := fmt.Fprintf(r.opts.AckLog, "%s %s %s %s\n", name, kind, outcome, when)
	r.ackMu.Unlock()
	if err != nil {
		r.warnRateLimited("write ack log", "error", err)
	}
}

// warnRateLimited logs at warn level at most once per warnEvery, with the
// number of warnings it swallowed since the last line.
func (r *runner) warnRateLimited(msg string, args ...any) {
	now := time.Now().UnixNano()
	last := r.lastWarn.Load()
	if now-last < int64(warnEvery) || !r.lastWarn.CompareAndSwap(last, now) {
		r.suppressed.Add(1)
		return
	}
	args = append(args, "suppressed", r.suppressed.Swap(0))
	r.opts.Log.Warn(msg, args...)
}

// Run simulates opts.Hosts volunteer hosts against the projects until ctx
// ends, opts.Duration passes, opts.MaxRPCs RPCs have been made, or every
// host has vanished. It returns the run's statistics; the error is for
// invalid options, or a report directory that could not be written. Every
// goroutine it starts has ended when it returns.
func Run(ctx context.Context, opts Options) (Stats, error) {
	s, _, err := RunReport(ctx, opts)
	return s, err
}

// RunReport is Run that also returns the run report (simreport, clock
// "real"): shares achieved against resource shares, CPU use, RPCs, work
// fetched, deadlines missed. With opts.ReportDir it is written there too.
func RunReport(ctx context.Context, opts Options) (Stats, simreport.Report, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return Stats{}, simreport.Report{}, fmt.Errorf("simclient options: %w", err)
	}
	start := time.Now()
	if opts.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Duration)
		defer cancel()
	}
	// Reaching MaxRPCs cancels hostCtx only: the RPCs already under way
	// run on ctx and finish, so exactly MaxRPCs reach the server.
	hostCtx, stop := context.WithCancel(ctx)
	defer stop()
	client := opts.HTTPClient
	if client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = min(opts.Hosts*(opts.NCPUs+1), 512)
		defer tr.CloseIdleConnections()
		client = &http.Client{Transport: tr}
	}
	projects := opts.projects()
	names := make([]string, len(projects))
	for i, p := range projects {
		names[i] = p.Name
	}
	interval := opts.SampleEvery.Seconds()
	r := &runner{opts: opts, projects: projects, web: &web{client: client, timeout: opts.HTTPTimeout},
		rec: simreport.NewRecorder(names, interval), interval: interval, rpcCtx: ctx, stop: stop, start: start}
	r.versions.projects = projects

	kinds := assignKinds(opts.Hosts, kindFracs{fail: opts.FailFrac, vanish: opts.VanishFrac, cheat: opts.CheatFrac, late: opts.LateFrac},
		rand.New(rand.NewPCG(opts.Seed, 0x6b696e6473)))
	byKind := map[string]int64{}
	cpus := 0
	hosts := make([]*host, opts.Hosts)
	for i := range hosts {
		h := newHost(r, i, kinds[i], rand.New(rand.NewPCG(opts.Seed, uint64(i)+1)))
		hosts[i] = h
		byKind[kinds[i].String()]++
		cpus += h.ncpus
		if h.ncpus != opts.NCPUs {
			r.c.mtHosts.Add(1)
		}
		if len(h.gpus) > 0 {
			r.c.gpuHosts.Add(1)
			r.c.gpus.Add(int64(h.info.NUsableCoprocs))
		}
	}
	opts.Log.Info("starting", "hosts", opts.Hosts, "ncpus", opts.NCPUs, "projects", strings.Join(names, ","),
		"strategy", string(opts.Strategy), "normal", byKind["normal"], "failing", byKind["failing"],
		"vanishing", byKind["vanishing"], "cheating", byKind["cheating"], "late", byKind["late"])

	var hostsWG sync.WaitGroup
	for _, h := range hosts {
		hostsWG.Go(func() { h.run(hostCtx) })
	}
	done := make(chan struct{})
	var summaryWG sync.WaitGroup
	if opts.SummaryEvery > 0 {
		summaryWG.Go(func() {
			tick := time.NewTicker(opts.SummaryEvery)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
					opts.Log.Info("progress", r.c.snapshot(byKind, time.Since(start)).logAttrs()...)
				}
			}
		})
	}
	hostsWG.Wait()
	close(done)
	summaryWG.Wait()
	end := r.now()
	// The host goroutines have ended: their tasks can be read here.
	for _, h := range hosts {
		for _, t := range h.tasks {
			if !t.reported && t.deadline < end {
				r.rec.Missed(t.att.index)
			}
		}
	}
	s := r.c.snapshot(byKind, time.Since(start))
	s.Versions = r.versions.snapshot()
	opts.Log.Info("finished", s.logAttrs()...)
	hw := s.Hardware.Hardware
	rep := r.rec.Report(simreport.Report{Clock: "real", Scenario: "live", Strategy: string(opts.Strategy),
		RuntimeStat: string(opts.RuntimeStat), Hosts: opts.Hosts, CPUs: cpus, DurationSeconds: end, WallSeconds: end,
		Hardware: &hw})
	if opts.ReportDir != "" {
		if err := rep.WriteDir(opts.ReportDir); err != nil {
			return s, rep, err
		}
	}
	return s, rep, nil
}

func (s Stats) logAttrs() []any {
	return []any{"rpcs", s.RPCs, "rpc_errors", s.RPCErrors, "received", s.ResultsReceived,
		"computed", s.ResultsComputed, "uploaded", s.ResultsUploaded, "upload_errors", s.UploadErrors,
		"reported", s.ResultsReported, "acked", s.ResultsAcked, "failed", s.ResultsFailed,
		"vanished", s.ResultsVanished, "cheated", s.ResultsCheated, "aborted", s.ResultsAborted, "late", s.ResultsLate, "preemptions", s.Preemptions,
		"gpu_tasks", s.Hardware.GPUTasks, "mt_tasks", s.Hardware.MTTasks,
		"elapsed", time.Duration(s.ElapsedSeconds * float64(time.Second)).Round(time.Millisecond)}
}
