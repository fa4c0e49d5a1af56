package paperbench

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/projectrun"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/state"
)

// loadGen drives the scheduler like the paper's simulated hosts: conns
// workers, each with its own keep-alive connection and a few hosts it serves
// in turn. Every request reports the host's previous instance as a success
// and asks for one new one. The outputs are already in the upload directory
// (stageOutputs), as finished uploads would leave them.
type loadGen struct {
	url       string
	uploadDir string
	fanout    int
	want      int64 // instances to dispatch and see acknowledged

	seen sync.Map // result name → struct{}: instances received

	received, acked, requests, noWork, unacked, httpErrors atomic.Int64
}

// simHost is one simulated host: one CPU, created by its first request.
type simHost struct {
	index int
	auth  string
	id    int64
	seqno int64
	cpid  string
	held  []protocol.ReportResult
	// sticky are the sticky files the host was sent (the demo model): it
	// lists them in every request, as the real client does, so the
	// scheduler neither describes them again nor counts their disk twice.
	sticky []protocol.HostFile
}

// loadResult is what the load generator measured.
type loadResult struct {
	latencies []time.Duration
	elapsed   time.Duration
}

// run serves hosts (spread round-robin over auths) from conns workers until
// every wanted instance was received and its report acknowledged.
func (g *loadGen) run(ctx context.Context, conns, hostsPerConn int, auths []string) (loadResult, error) {
	start := time.Now()
	var wg sync.WaitGroup
	lat := make([][]time.Duration, conns)
	errs := make([]error, conns)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for w := range conns {
		hosts := make([]*simHost, hostsPerConn)
		for i := range hosts {
			n := w*hostsPerConn + i
			hosts[i] = &simHost{index: n, auth: auths[n%len(auths)], cpid: fmt.Sprintf("%032x", n+1)}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{
				MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, DisableCompression: true}}
			defer client.CloseIdleConnections()
			lat[w], errs[w] = g.worker(wctx, client, hosts)
			if errs[w] != nil {
				cancel() // one lost worker dooms the phase: stop the others
			}
		}()
	}
	wg.Wait()
	res := loadResult{elapsed: time.Since(start)}
	for _, l := range lat {
		res.latencies = append(res.latencies, l...)
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("load generator stopped: %w", err)
	}
	// A failed worker cancels the others: keep its error, not their
	// "context canceled".
	errs = slices.DeleteFunc(errs, func(err error) bool { return errors.Is(err, context.Canceled) })
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	if got := g.acked.Load(); got != g.want {
		return res, fmt.Errorf("load generator: %d of %d instances acknowledged", got, g.want)
	}
	return res, nil
}

// maxErrors is how many failed requests in a row a worker tolerates.
const maxErrors = 50

// worker serves its hosts in turn until none holds an instance and every
// wanted instance has been handed out.
func (g *loadGen) worker(ctx context.Context, client *http.Client, hosts []*simHost) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, 1024)
	failures := 0
	for {
		active := 0
		for _, h := range hosts {
			if len(h.held) == 0 && g.received.Load() >= g.want {
				continue
			}
			active++
			if err := ctx.Err(); err != nil {
				return lat, err
			}
			d, gotWork, err := g.rpc(ctx, client, h)
			if err != nil {
				g.httpErrors.Add(1)
				if failures++; failures >= maxErrors {
					return lat, fmt.Errorf("host %d: %d scheduler requests failed in a row, the last: %w", h.index, failures, err)
				}
				sleep(ctx, 100*time.Millisecond)
				continue
			}
			failures = 0
			lat = append(lat, d)
			if !gotWork && len(h.held) == 0 {
				// The cache is momentarily empty or holds only jobs this
				// user already has: do not spin.
				sleep(ctx, 5*time.Millisecond)
			}
		}
		if active == 0 {
			return lat, nil
		}
	}
}

// rpc sends one scheduler request for h and applies the reply. It returns
// the request's latency and whether new work came.
func (g *loadGen) rpc(ctx context.Context, client *http.Client, h *simHost) (time.Duration, bool, error) {
	h.seqno++
	req := &protocol.SchedulerRequest{
		Authenticator:            h.auth,
		HostID:                   h.id,
		RPCSeqno:                 h.seqno,
		CoreClientMajorVersion:   7,
		CoreClientMinorVersion:   20,
		CoreClientRelease:        5,
		ResourceShareFraction:    1,
		DurationCorrectionFactor: 1,
		WorkReqSeconds:           1,
		CPUReqSecs:               1,
		CPUReqInstances:          1,
		PlatformName:             projectrun.DemoPlatform,
		TimeStats:                protocol.TimeStats{OnFrac: 1, ConnectedFrac: 1, CPUAndNetworkAvailableFrac: 1, ActiveFrac: 1, GPUActiveFrac: 1},
		HostInfo: protocol.HostInfo{DomainName: fmt.Sprintf("bench%d.example.org", h.index), IPAddr: "127.0.0.1",
			HostCPID: h.cpid, PNCPUs: 1, PVendor: "Benchmark", PModel: "paperbench", PFpops: 1e9, PIops: 1e9,
			PMembw: 1e9, MNbytes: 4 << 30, MCache: 1 << 20, MSwap: 2 << 30, DTotal: 5e11, DFree: 2e11, OSName: "Linux", OSVersion: "6"},
		DiskUsage: protocol.DiskUsage{DBoincUsedTotal: 1e6, DBoincUsedProject: 1e6, DProjectShare: 1e11},
		Results:   h.held,
		HostFiles: h.sticky,
	}
	var body bytes.Buffer
	if err := protocol.WriteSchedulerRequest(&body, req); err != nil {
		return 0, false, fmt.Errorf("encode scheduler request: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url, &body)
	if err != nil {
		return 0, false, err
	}
	hreq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	t0 := time.Now()
	resp, err := client.Do(hreq)
	if err != nil {
		return 0, false, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(t0)
	g.requests.Add(1)
	if err != nil {
		return d, false, fmt.Errorf("read scheduler reply: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return d, false, fmt.Errorf("scheduler replied %s: %s", resp.Status, tail(b, 300))
	}
	rep, err := protocol.ParseSchedulerReply(bytes.NewReader(b))
	if err != nil {
		return d, false, fmt.Errorf("parse scheduler reply: %w", err)
	}
	if rep.HostID != 0 {
		h.id = rep.HostID
	}
	acks := map[string]bool{}
	for _, a := range rep.ResultAcks {
		acks[strings.TrimSpace(a.Name)] = true
	}
	kept := h.held[:0]
	for _, r := range h.held {
		if acks[r.Name] {
			g.acked.Add(1)
			continue
		}
		// Not acknowledged: the result was not recorded, and the host
		// reports it again next time, as the real client does.
		g.unacked.Add(1)
		kept = append(kept, r)
	}
	h.held = kept
	maxBytes := map[string]float64{}
	for _, fi := range rep.FileInfos {
		maxBytes[fi.Name] = fi.MaxNbytes
		if fi.Sticky != nil && !slices.ContainsFunc(h.sticky, func(f protocol.HostFile) bool { return f.Name == fi.Name }) {
			h.sticky = append(h.sticky, protocol.HostFile{Name: fi.Name, Nbytes: fi.Nbytes, Status: protocol.FilePresent})
		}
	}
	for _, res := range rep.Results {
		if _, dup := g.seen.LoadOrStore(res.Name, struct{}{}); dup {
			continue // a resend of one the host already holds
		}
		g.received.Add(1)
		rr, err := g.compute(res, maxBytes)
		if err != nil {
			return d, true, err
		}
		h.held = append(h.held, rr)
	}
	if len(rep.Results) == 0 {
		g.noWork.Add(1)
	}
	return d, len(rep.Results) > 0, nil
}

// compute "runs" an instance: it checks each output file is in the upload
// directory and returns the report of a success. The output depends only on
// the job, so the two instances of a job agree bitwise.
func (g *loadGen) compute(res protocol.Result, maxBytes map[string]float64) (protocol.ReportResult, error) {
	data := outputData(res.WUName)
	sum := md5.Sum(data)
	rr := protocol.ReportResult{
		Name: res.Name, FinalCPUTime: 10, FinalElapsedTime: 10, ExitStatus: 0,
		State: int(state.ClientFilesUploaded), Platform: projectrun.DemoPlatform, VersionNum: projectrun.DemoVersionNum, AppVersionNum: projectrun.DemoVersionNum,
		StderrOut: "<core_client_version>7.20.5</core_client_version>\n<stderr_txt>\n</stderr_txt>\n",
	}
	for _, ref := range res.FileRefs {
		path, err := fanout.Path(g.uploadDir, ref.FileName, g.fanout)
		if err != nil {
			return rr, fmt.Errorf("output %s of %s: %w", ref.FileName, res.Name, err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() != int64(len(data)) {
			return rr, fmt.Errorf("output %s of %s was not staged (%v)", ref.FileName, res.Name, err)
		}
		mx := maxBytes[ref.FileName]
		if mx <= 0 {
			mx = 1e6
		}
		rr.FileInfos = append(rr.FileInfos, protocol.ReportFileInfo{Name: ref.FileName, Nbytes: float64(len(data)),
			MaxNbytes: mx, MD5Cksum: hex.EncodeToString(sum[:])})
	}
	return rr, nil
}

// sleep pauses for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
