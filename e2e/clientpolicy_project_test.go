package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/projectrun"
)

// cpProject is one of the client-policy test's two projects: the lifecycle
// test's project (database, users, keys, handler script) with every daemon
// started but no simulated hosts, since one simclient attaches its hosts to
// both projects, and a scheduler that can be stopped and started again on
// its address to play an outage.
type cpProject struct {
	*lcProject
	name   string  // "A" or "B", in logs and messages
	share  float64 // the hosts' resource share of this project
	prefix string  // job names start with it, so an acked result tells its project
	addr   string  // the scheduler's host:port
	// schedArgs start the scheduler, the first time and after an outage.
	schedArgs []string
	sched     *projectrun.Proc
	hc        *http.Client
	// schedMetrics is the current scheduler run's /metrics address
	// (--listen, on a new port each start).
	schedMetrics string
	// feederMetrics is the feeder's /metrics address.
	feederMetrics string
}

// newCPProject makes a project with users for the hosts and the demo app
// whose jobs take rsc_fpops_est operations.
func newCPProject(t *testing.T, bin, name string, share float64, users int) *cpProject {
	lp := newLCProject(t, bin, lcParams{Users: users})
	return &cpProject{lcProject: lp, name: name, share: share, prefix: "cp" + strings.ToLower(name),
		hc: &http.Client{Timeout: 2 * time.Second}}
}

// start launches every daemon of the project. The scheduler sends many
// tasks per RPC and lets hosts hold many, and does not ask for immediate
// reports: the client's own policy decides how much work to hold and when
// to report, and that is what the test measures. The work generator keeps
// unsentTarget instances unsent, so the hosts never meet a "no work" reply
// (which would back off their fetches and skew the shares), with deadlines
// far beyond the run, so no deadline is at risk and EDF falls back to the
// short-term debt split by shares.
func (p *cpProject) start(ctx context.Context, unsentTarget int, fpopsEst float64) {
	t := p.t
	p.writeConfig()
	t.Cleanup(func() { p.stopAll() })
	// The first start on port 0; after an outage, on the address it got.
	p.schedArgs = []string{"--config", p.config, "--addr", anyPort, "--listen", anyPort, "--url-base", "",
		"--upload-key", filepath.Join(p.dir, "keys", "upload_private"), "--request-delay", "1s",
		"--report-immediately=false", "--max-results-per-rpc", "50", "--max-in-progress-per-cpu", "100"}
	steps := []struct {
		name string
		args []string
	}{
		// More slots than the work generator keeps unsent: the cache can
		// hold all of it, so the hosts' first burst (all of them at
		// once, each filling a 2T buffer) finds the work in memory.
		{"feeder", []string{"--listen", anyPort, "--sleep", "200ms", "--slots", strconv.Itoa(2 * unsentTarget)}},
		{"transitioner", []string{"--listen", anyPort, "--sleep", "300ms"}},
		{"validator", []string{"--listen", anyPort, "--sleep", "300ms"}},
		{"assimilator", []string{"--listen", anyPort, "--sleep", "300ms", "--handler-cmd", filepath.Join(p.dir, "handler.sh")}},
		{"file_deleter", []string{"--listen", anyPort, "--sleep", "500ms"}},
		{"work_generator", []string{"--listen", anyPort, "--sleep", "300ms", "--job-prefix", p.prefix,
			"--unsent-target", strconv.Itoa(unsentTarget), "--delay-bound", "3h", "--min-quorum", "2", "--target-nresults", "2",
			"--max-error-results", "2", "--max-total-results", "4", "--max-success-results", "3",
			"--rsc-fpops-est", strconv.FormatFloat(fpopsEst, 'g', -1, 64)}},
	}
	for _, s := range steps {
		pr := p.startDaemon(ctx, s.name, s.name, s.args...)
		if s.name == "feeder" {
			addr, err := pr.WaitAddr(ctx, "listen")
			if err != nil {
				p.dumpLogs()
				t.Fatalf("project %s: %v", p.name, err)
			}
			p.feederMetrics = addr
		}
	}
	if err := p.startScheduler(ctx); err != nil {
		p.dumpLogs()
		t.Fatalf("project %s: %v", p.name, err)
	}
}

// startScheduler launches the scheduler and waits until it listens; the
// first start pins the address it got for the starts after an outage.
// Its log is appended to, so an outage leaves both runs in one file.
func (p *cpProject) startScheduler(ctx context.Context) error {
	pr, err := projectrun.Start(projectrun.Spec{Name: "scheduler", Bin: filepath.Join(p.bin, "scheduler"), LogDir: filepath.Join(p.dir, "logs"),
		Args: p.schedArgs, ReportsAddrs: true})
	if err != nil {
		return err
	}
	p.sched = pr
	p.daemons = append(p.daemons, pr)
	addr, err := pr.WaitAddr(ctx, "addr")
	if err == nil {
		p.schedMetrics, err = pr.WaitAddr(ctx, "listen")
	}
	if err != nil {
		return fmt.Errorf("scheduler did not listen: %w", err)
	}
	if p.addr == "" {
		p.addr = addr
		p.schedURL = "http://" + addr + "/scheduler"
		for i, a := range p.schedArgs {
			if a == "--addr" {
				p.schedArgs[i+1] = addr
			}
		}
	}
	return nil
}

// stopScheduler stops the scheduler alone: the project is down for its
// hosts (RPCs, downloads and uploads all fail) while its daemons go on.
func (p *cpProject) stopScheduler() error {
	err := p.sched.Stop(20 * time.Second)
	for i, d := range p.daemons {
		if d == p.sched {
			p.daemons = append(p.daemons[:i], p.daemons[i+1:]...)
			break
		}
	}
	p.sched = nil
	return err
}

// waitBacklog waits until the work generator has made at least n unsent
// instances, so the hosts' first requests find work.
func (p *cpProject) waitBacklog(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		g, err := p.progress(ctx)
		if err == nil && g.Unsent >= n {
			return nil
		}
		if err := p.died(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("project %s: %d unsent instances after %s, want %d", p.name, g.Unsent, timeout, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitCached waits until the feeder's cache holds at least n instances.
// The unsent instances in the database are not enough: the hosts' first
// requests come all at once and are served from the cache alone, and a
// host that meets a "no work" reply there backs off from the project for
// a while, which would skew the shares the test measures.
func (p *cpProject) waitCached(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	present := 0.0
	for {
		m, err := scrapeMetrics(ctx, p.hc, "http://"+p.feederMetrics+"/metrics")
		if err == nil {
			present = m[`taskserver_feeder_slots{state="present"}`]
			if present >= float64(n) {
				return nil
			}
		}
		if err := p.died(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("project %s: the feeder's cache holds %.0f instances after %s, want %d (last scrape error: %v)",
				p.name, present, timeout, n, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// scrapeMetrics reads a Prometheus text page into a map from the series
// (name and labels as written) to its value.
func scrapeMetrics(ctx context.Context, hc *http.Client, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}

// schedulerMetrics reads the scheduler's Prometheus counters: requests
// handled (every outcome) and work requests answered with nothing, by
// reason. The server's own count checks the client's report of its RPCs.
func (p *cpProject) schedulerMetrics(ctx context.Context) (requests float64, noWork map[string]float64, err error) {
	m, err := scrapeMetrics(ctx, p.hc, "http://"+p.schedMetrics+"/metrics")
	if err != nil {
		return 0, nil, err
	}
	noWork = map[string]float64{}
	for series, v := range m {
		name, labels, _ := strings.Cut(series, "{")
		switch name {
		case "taskserver_scheduler_requests_total":
			requests += v
		case "taskserver_scheduler_no_work_total":
			noWork[strings.Trim(strings.TrimPrefix(strings.TrimSuffix(labels, "}"), "reason="), `"`)] += v
		}
	}
	return requests, noWork, nil
}

// rpcCounter is the count of a project's scheduler RPCs over the run, as
// the server saw them, summed over the scheduler's restarts.
type rpcCounter struct {
	base, last float64 // requests of the scheduler runs before the current one; last read of the current one
	samples    []rpcSample
}

type rpcSample struct {
	at    time.Duration // since the hosts started
	total float64
}

func (c *rpcCounter) observe(at time.Duration, raw float64) {
	c.last = raw
	c.samples = append(c.samples, rpcSample{at: at, total: c.base + raw})
}

// restarted starts a new scheduler run: its counters begin at zero.
func (c *rpcCounter) restarted() {
	c.base += c.last
	c.last = 0
}

func (c *rpcCounter) total() float64 { return c.base + c.last }

// peak is the most RPCs in any span of at most w between two samples from
// `from` on.
func (c *rpcCounter) peak(w, from time.Duration) float64 {
	best := 0.0
	for i, a := range c.samples {
		if a.at < from {
			continue
		}
		for _, b := range c.samples[i+1:] {
			if b.at-a.at > w {
				break
			}
			best = max(best, b.total-a.total)
		}
	}
	return best
}
