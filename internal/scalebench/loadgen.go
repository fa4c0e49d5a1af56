package scalebench

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/projectrun"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

// loadGen drives the scheduler with the filled hosts: host i keeps the
// hardware the fill gave it (i mod 10 = 0: an NVIDIA GPU, 1: an AMD GPU,
// 2-4: eight cores, else four), asks for work for its CPUs and, when it has
// one, its GPU, and reports what it was sent last time as a success, its
// outputs put in the upload directory as finished uploads (uploads).
type loadGen struct {
	url, uploadDir string
	users          int64
	uploads        *uploads

	sent, reported, requests, errors atomic.Int64
}

// simHost is one of the filled hosts as the load generator plays it.
type simHost struct {
	id, user int64
	seqno    int64
	held     []protocol.ReportResult
}

// level is one load level's outcome.
type level struct {
	Conns     int     `json:"conns"`
	RPS       float64 `json:"rps"`
	P50MS     float64 `json:"p50_ms"`
	P99MS     float64 `json:"p99_ms"`
	Sent      int64   `json:"instances_sent"`
	Requests  int64   `json:"requests"`
	Errors    int64   `json:"errors"`
	SchedCPUS float64 `json:"scheduler_cpu_s"`
	FeedCPUS  float64 `json:"feeder_cpu_s"`
	DBCPUS    float64 `json:"db_cpu_s"`
	// DiskReads and PagesRead are the buffer pool's misses in the level
	// (DaemonCost has them for a phase).
	DiskReads int64 `json:"buffer_pool_disk_reads"`
	PagesRead int64 `json:"buffer_pool_pages_read"`
	// BacklogDry says the project's unsent work ran out during the level
	// (dry): its replies were largely "no work", which costs a fraction of
	// a send, so it measures neither the rate nor the cost of dispatch,
	// and the phase stops there.
	BacklogDry bool `json:"backlog_dry"`
	// Statements are the level's statement forms (Options.Statements).
	Statements []Statement `json:"statements,omitempty"`
}

// dry reports whether l's backlog ran out (level.BacklogDry): it sent
// fewer instances than half its requests, or fewer per request than three
// quarters of what first, the phase's first level, sent per request (its
// hosts are of the same mix, and it had the whole backlog; later levels
// send as many or more). At 10^6 rows levels of 50 connections sent 0.55
// and 1.54 per request where the first sent 2.9, and their 2,396 and 1,407
// requests/s, largely "no work", passed the first test alone.
func (l level) dry(first level) bool {
	if l.Sent*2 < l.Requests {
		return true
	}
	return first.Requests > 0 && float64(l.Sent)*float64(first.Requests)*4 < 3*float64(first.Sent)*float64(l.Requests)
}

// backlogFactor is how many times a level's sends the unsent backlog must
// hold for the next level to run: a level runs as long as the others, and
// one with more connections sends more.
const backlogFactor = 2

// run serves hosts from conns workers, each with its own keep-alive
// connection and hosts [firstHost + w·perConn, …), for d.
func (g *loadGen) run(ctx context.Context, conns, perConn int, firstHost int64, d time.Duration) ([]time.Duration, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	lat := make([][]time.Duration, conns)
	errs := make([]error, conns)
	start := time.Now()
	for w := range conns {
		hosts := make([]*simHost, perConn)
		for i := range hosts {
			id := firstHost + int64(w*perConn+i)
			hosts[i] = &simHost{id: id, user: 1 + (id-1)%g.users}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, DisableCompression: true}}
			defer client.CloseIdleConnections()
			for ctx.Err() == nil {
				for _, h := range hosts {
					d, err := g.rpc(ctx, client, h)
					if ctx.Err() != nil {
						break
					}
					if err != nil {
						g.errors.Add(1)
						errs[w] = err
						sleep(ctx, 50*time.Millisecond)
						continue
					}
					lat[w] = append(lat[w], d)
				}
			}
		}()
	}
	wg.Wait()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	var firstErr error
	for _, e := range errs {
		if e != nil {
			firstErr = e
			break
		}
	}
	return all, time.Since(start), firstErr
}

// request builds host h's scheduler request.
func (g *loadGen) request(h *simHost) *protocol.SchedulerRequest {
	kind := h.id % 10
	ncpus := 4
	if kind >= 2 && kind <= 4 {
		ncpus = 8
	}
	h.seqno++
	req := &protocol.SchedulerRequest{
		Authenticator: fmt.Sprintf("%s%d", authPrefix, h.user), HostID: h.id, RPCSeqno: h.seqno + 10,
		CoreClientMajorVersion: 7, CoreClientMinorVersion: 24, CoreClientRelease: 5,
		ResourceShareFraction: 1, DurationCorrectionFactor: 1,
		WorkReqSeconds: 3600, CPUReqSecs: 3600, CPUReqInstances: 1, PlatformName: projectrun.DemoPlatform,
		TimeStats: protocol.TimeStats{OnFrac: 0.9, ConnectedFrac: 1, CPUAndNetworkAvailableFrac: 1, ActiveFrac: 0.9, GPUActiveFrac: 0.9},
		HostInfo: protocol.HostInfo{DomainName: fmt.Sprintf("host%d.example.org", h.id), IPAddr: "127.0.0.1",
			HostCPID: hostCPID(h.id), PNCPUs: ncpus, PVendor: "GenuineIntel", PModel: "Intel(R) Core(TM) i7",
			PFeatures: "fpu sse sse2 avx avx2", PFpops: 4e9, PIops: 1e10, PMembw: 1e9, MNbytes: 16e9, MCache: 1 << 20,
			MSwap: 2e9, DTotal: 5e11, DFree: 2e11, OSName: "Linux", OSVersion: "6.1.0"},
		DiskUsage: protocol.DiskUsage{DBoincUsedTotal: 1e8, DBoincUsedProject: 1e8, DProjectShare: 1e11},
		Results:   h.held,
	}
	switch kind {
	case 0:
		req.Coprocs = &protocol.Coprocs{NVIDIA: &protocol.CoprocNVIDIA{Count: 1, Name: "NVIDIA GeForce RTX 3080",
			AvailableRAM: 10 << 30, HaveCUDA: 1, ReqSecs: 3600, ReqInstances: 1, PeakFlops: 29.8e12, CUDAVersion: 12020,
			DrvVersion: 53554, TotalGlobalMem: 10 << 30, Major: 8, Minor: 6}}
	case 1:
		req.Coprocs = &protocol.Coprocs{AMD: &protocol.CoprocAMD{Count: 1, Name: "AMD Radeon RX 6800 XT",
			AvailableRAM: 16 << 30, HaveOpenCL: 1, ReqSecs: 3600, ReqInstances: 1, PeakFlops: 20.7e12, LocalRAM: 16384,
			OpenCL: &protocol.OpenCLProp{Name: "gfx1030", Vendor: "Advanced Micro Devices, Inc.", GlobalMemSize: 16 << 30,
				DeviceVersion: "OpenCL 2.0 AMD-APP (3513.0)", DriverVersion: "3513.0 (HSA1.1,LC)", PeakFlops: 20.7e12}}}
	}
	return req
}

// hostCPID is the cross-project id the fill gave host id: MD5 of its id.
func hostCPID(id int64) string {
	s := md5.Sum([]byte(fmt.Sprint(id)))
	return hex.EncodeToString(s[:])
}

// rpc sends one request for h and applies the reply.
func (g *loadGen) rpc(ctx context.Context, client *http.Client, h *simHost) (time.Duration, error) {
	var body bytes.Buffer
	if err := protocol.WriteSchedulerRequest(&body, g.request(h)); err != nil {
		return 0, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url, &body)
	if err != nil {
		return 0, err
	}
	hreq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	t0 := time.Now()
	resp, err := client.Do(hreq)
	if err != nil {
		return 0, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(t0)
	g.requests.Add(1)
	if err != nil {
		return d, err
	}
	if resp.StatusCode != http.StatusOK {
		return d, fmt.Errorf("scheduler replied %s: %s", resp.Status, tail(b))
	}
	rep, err := protocol.ParseSchedulerReply(bytes.NewReader(b))
	if err != nil {
		return d, fmt.Errorf("parse scheduler reply: %w", err)
	}
	acks := map[string]bool{}
	for _, a := range rep.ResultAcks {
		acks[a.Name] = true
	}
	kept := h.held[:0]
	for _, r := range h.held {
		if acks[r.Name] {
			g.reported.Add(1)
			continue
		}
		kept = append(kept, r)
	}
	h.held = kept
	for _, res := range rep.Results {
		g.sent.Add(1)
		rr, err := g.compute(res)
		if err != nil {
			return d, err
		}
		h.held = append(h.held, rr)
	}
	return d, nil
}

// compute "runs" an instance: writes its outputs as finished uploads and
// returns the report of a success.
func (g *loadGen) compute(res protocol.Result) (protocol.ReportResult, error) {
	sum := md5.Sum(outputData)
	rr := protocol.ReportResult{Name: res.Name, FinalCPUTime: 3000, FinalElapsedTime: 3600,
		State: int(state.ClientFilesUploaded), Platform: projectrun.DemoPlatform,
		VersionNum: projectrun.DemoVersionNum, AppVersionNum: projectrun.DemoVersionNum,
		StderrOut: "<core_client_version>7.24.5</core_client_version>\n<stderr_txt>\n</stderr_txt>\n"}
	for _, ref := range res.FileRefs {
		path, err := fanout.Path(g.uploadDir, ref.FileName, fanoutDirs)
		if err != nil {
			return rr, err
		}
		if err := g.uploads.put(path); err != nil {
			return rr, err
		}
		rr.FileInfos = append(rr.FileInfos, protocol.ReportFileInfo{Name: ref.FileName, Nbytes: float64(len(outputData)),
			MaxNbytes: 65536, MD5Cksum: hex.EncodeToString(sum[:])})
	}
	return rr, nil
}

// percentile returns the q-quantile of ds in milliseconds.
func percentile(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := min(int(q*float64(len(s))), len(s)-1)
	return round3(float64(s[i]) / float64(time.Millisecond))
}

// dispatchLevels are the connection counts tried first, lowest first;
// the phase stops raising once p99 passes its bound, and then narrows in
// (dispatchRefinements, between) on the highest count within it.
var dispatchLevels = []int{2, 8, 24, 64, 128}

// dispatchRefinements bounds the levels run between the last level within
// the bound and the first past it: each takes the bounds' geometric mean,
// so two narrow 24..64 to within 1.3x.
const dispatchRefinements = 2

// levelPlan chooses the dispatch phase's levels: dispatchLevels in turn
// until one is past the bound, then up to dispatchRefinements between the
// most connections run within it and the fewest run past it.
type levelPlan struct {
	i, within, past, refined int
}

// next returns the next level's connections; false means the phase is
// done.
func (p *levelPlan) next() (int, bool) {
	if p.past == 0 {
		if p.i >= len(dispatchLevels) {
			return 0, false
		}
		p.i++
		return dispatchLevels[p.i-1], true
	}
	conns, ok := between(p.within, p.past)
	if !ok || p.refined == dispatchRefinements {
		return 0, false
	}
	p.refined++
	return conns, true
}

// record notes whether the level of conns kept p99 within the bound;
// false means stop: the fewest connections are already past it.
func (p *levelPlan) record(conns int, withinBound bool) bool {
	switch {
	case withinBound:
		p.within = conns
	case p.within == 0:
		return false
	default:
		p.past = conns
	}
	return true
}

// between returns the connection count to try between lo, a level within
// the bound, and hi, one past it: their geometric mean, rounded. ok is
// false when they are within 1.25x of each other (the rate between them
// differs by less than the run-to-run noise) or none lies between.
func between(lo, hi int) (conns int, ok bool) {
	if lo <= 0 || hi*4 < lo*5 {
		return 0, false
	}
	m := int(math.Round(math.Sqrt(float64(lo) * float64(hi))))
	if m <= lo || m >= hi {
		return 0, false
	}
	return m, true
}

// p99Bound is the latency the dispatch rate is quoted under.
const p99Bound = 100.0

// measureDispatch runs the feeder and scheduler and loads them at rising
// levels, each with fresh hosts; the report keeps every level and quotes
// the best rate whose p99 is within p99Bound.
func (b *sizeRun) measureDispatch(ctx context.Context, s *Size) error {
	feeder, err := b.start("feeder")
	if err != nil {
		return err
	}
	defer func() { _ = feeder.Stop(30 * time.Second) }()
	if err := feeder.WaitFile(ctx, b.proj.shmPath); err != nil {
		return err
	}
	sched, err := b.start("scheduler", "--addr", "127.0.0.1:0", "--url-base", "",
		"--upload-key", filepath.Join(b.proj.dir, "keys", "upload_private"))
	if err != nil {
		return err
	}
	defer func() { _ = sched.Stop(30 * time.Second) }()
	addr, err := sched.WaitAddr(ctx, "addr")
	if err != nil {
		return err
	}
	const perConn = 4
	next := int64(1)
	d := &DispatchCost{}
	s.Dispatch = d
	outputs := &uploads{dir: b.proj.dir}
	var plan levelPlan
	var mostSent int64 // by one level
	for {
		conns, ok := plan.next()
		if !ok {
			break
		}
		if next+int64(conns*perConn) > b.proj.hosts {
			break
		}
		if need := backlogFactor * mostSent; need > 0 {
			left, err := b.st.ScaleLeftAt(ctx, store.ScaleUnsent, nil, 0, 0, need)
			if err != nil {
				return err
			}
			if left < need {
				fmt.Fprintf(b.o.Out, "dispatch: %d instances left unsent, fewer than %d: no level of %d connections\n", left, need, conns)
				break
			}
		}
		g := &loadGen{url: "http://" + addr + "/scheduler", uploadDir: filepath.Join(b.proj.dir, "upload"), users: b.proj.users,
			uploads: outputs}
		m, err := b.startMeter(ctx)
		if err != nil {
			return err
		}
		sc0, fc0 := cpuOf(sched), cpuOf(feeder)
		lat, el, runErr := g.run(ctx, conns, perConn, next, time.Duration(b.o.DispatchSeconds*float64(time.Second)))
		next += int64(conns * perConn)
		var dc DaemonCost
		if err := m.stop(ctx, &dc); err != nil {
			return err
		}
		l := level{Conns: conns, RPS: round3(float64(len(lat)) / el.Seconds()), P50MS: percentile(lat, 0.5), P99MS: percentile(lat, 0.99),
			Sent: g.sent.Load(), Requests: g.requests.Load(), Errors: g.errors.Load(),
			SchedCPUS: round3(cpuOf(sched) - sc0), FeedCPUS: round3(cpuOf(feeder) - fc0), DBCPUS: dc.DBCPUS,
			DiskReads: dc.BufferPoolDiskReads, PagesRead: dc.BufferPoolPagesRead, Statements: dc.Statements}
		first := l
		if len(d.Levels) > 0 {
			first = d.Levels[0]
		}
		l.BacklogDry = l.dry(first)
		mostSent = max(mostSent, l.Sent)
		d.Levels = append(d.Levels, l)
		d.BufferPoolDataMB, d.BufferPoolDiskReads = dc.BufferPoolDataMB, d.BufferPoolDiskReads+dc.BufferPoolDiskReads
		d.BufferPoolPagesRead += dc.BufferPoolPagesRead
		fmt.Fprintf(b.o.Out, "dispatch, %d connections: %.0f requests/s, p50 %.1f ms, p99 %.1f ms, %d sent, %d errors\n",
			conns, l.RPS, l.P50MS, l.P99MS, l.Sent, l.Errors)
		if l.Errors > l.Requests/100 {
			return fmt.Errorf("%d of %d requests failed, the last: %v (see %s)", l.Errors, l.Requests, runErr, sched.LogPath())
		}
		if l.BacklogDry {
			fmt.Fprintf(b.o.Out, "dispatch: the unsent backlog ran out at %d connections; the levels from here measure no-work replies\n", conns)
			break
		}
		if !plan.record(conns, l.P99MS <= p99Bound) {
			break
		}
	}
	if !sched.Running() {
		return fmt.Errorf("scheduler exited: %v (see %s)", sched.Err(), sched.LogPath())
	}
	return nil
}
