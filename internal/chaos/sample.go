package chaos

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/procstat"
)

// Metric names the load run reads from the daemons' /metrics.
const (
	metricGoroutines     = "go_goroutines"
	metricHeapInuse      = "go_memstats_heap_inuse_bytes"
	metricSchedRequests  = "taskserver_scheduler_requests_total"
	metricSchedSent      = "taskserver_scheduler_results_sent_total"
	outcomeOK            = "ok"
	outcomeUnavailable   = "unavailable"
	maxMetricsAnswerSize = 4 << 20
)

// memSample is one reading of one daemon: seconds since the load began,
// its resident set, its Go heap in use and its goroutines (NaN when its
// /metrics did not answer), and its open sockets (NaN when /proc did not
// say).
type memSample struct {
	at         float64
	rss, heap  float64
	goroutines float64
	sockets    float64
}

// counter accumulates a Prometheus counter over restarts of its program:
// a value below the last one means the counter began again from 0.
type counter struct {
	last, total float64
	seen        bool
}

func (c *counter) add(v float64) {
	switch {
	case math.IsNaN(v):
		return
	case !c.seen:
		c.seen = true
	case v >= c.last:
		c.total += v - c.last
	default:
		c.total += v
	}
	c.last = v
}

// sampler reads every daemon's memory and goroutines, and the scheduler's
// request counters, at a fixed interval during the load.
type sampler struct {
	p      *project
	client *http.Client
	start  time.Time

	mu       sync.Mutex
	series   map[string][]memSample
	cpu      map[string]*counter // CPU seconds, over restarts
	requests counter             // scheduler requests answered ok
	refused  counter             // scheduler requests answered 503 (database unavailable)
	sent     counter             // results sent
	lastAt   float64
}

func newSampler(p *project, start time.Time) *sampler {
	return &sampler{p: p, client: &http.Client{Timeout: 2 * time.Second}, start: start,
		series: map[string][]memSample{}, cpu: map[string]*counter{}}
}

// run samples every interval until ctx ends, and once more then.
func (s *sampler) run(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		s.sampleAll(context.WithoutCancel(ctx))
		select {
		case <-ctx.Done():
			s.sampleAll(context.WithoutCancel(ctx))
			return
		case <-tick.C:
		}
	}
}

// sampleAll reads every running daemon once.
func (s *sampler) sampleAll(ctx context.Context) {
	at := time.Since(s.start).Seconds()
	for _, d := range s.p.daemons {
		pid, addr := d.PID(), d.Addr(daemon.AdminListener)
		if pid == 0 {
			continue
		}
		u, err := procstat.Read(pid)
		if err != nil {
			continue // it exited meanwhile
		}
		m := memSample{at: at, rss: float64(u.RSSBytes), heap: math.NaN(), goroutines: math.NaN(), sockets: math.NaN()}
		fams, err := scrape(ctx, s.client, addr)
		if err == nil {
			m.goroutines = metricValue(fams, metricGoroutines, "", "")
			m.heap = metricValue(fams, metricHeapInuse, "", "")
		}
		// Right after the goroutines, to which they are compared.
		if n, serr := procstat.Sockets(pid); serr == nil {
			m.sockets = float64(n)
		}
		s.mu.Lock()
		s.series[d.Name()] = append(s.series[d.Name()], m)
		if s.cpu[d.Name()] == nil {
			s.cpu[d.Name()] = &counter{}
		}
		s.cpu[d.Name()].add(u.CPUSeconds)
		if d.Name() == "scheduler" && err == nil {
			s.requests.add(metricValue(fams, metricSchedRequests, "outcome", outcomeOK))
			s.refused.add(metricValue(fams, metricSchedRequests, "outcome", outcomeUnavailable))
			s.sent.add(metricValue(fams, metricSchedSent, "", ""))
		}
		s.lastAt = at
		s.mu.Unlock()
	}
}

// requestsSoFar is the scheduler's ok requests since the first sample and
// the time of the last sample.
func (s *sampler) requestsSoFar() (float64, float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests.total, s.lastAt
}

// scrape reads the Prometheus text exposition at addr's /metrics.
func scrape(ctx context.Context, client *http.Client, addr string) (map[string]*dto.MetricFamily, error) {
	if addr == "" {
		return nil, fmt.Errorf("no metrics address")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(http.MaxBytesReader(nil, resp.Body, maxMetricsAnswerSize))
}

// metricValue is the value of the gauge or counter name, of its series
// whose label has value (any series when label is ""); NaN when absent.
func metricValue(fams map[string]*dto.MetricFamily, name, label, value string) float64 {
	f := fams[name]
	if f == nil {
		return math.NaN()
	}
	for _, m := range f.GetMetric() {
		if label != "" && !hasLabel(m, label, value) {
			continue
		}
		switch {
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetUntyped() != nil:
			return m.GetUntyped().GetValue()
		}
	}
	return math.NaN()
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}

// writeCSV writes every sample, one line per daemon and moment, for a
// plot of the run.
func (s *sampler) writeCSV(path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.series))
	for n := range s.series {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("daemon,at_s,rss_bytes,heap_inuse_bytes,goroutines,sockets\n")
	for _, n := range names {
		for _, x := range s.series[n] {
			fmt.Fprintf(&b, "%s,%.1f,%.0f,%.0f,%.0f,%.0f\n", n, x.at, x.rss, x.heap, x.goroutines, x.sockets)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
