package paperbench

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/procstat"
	"github.com/taskserver/taskserver/internal/projectrun"
)

// program is one of the project's programs running as a child process,
// with its memory sampled about once a second.
type program struct {
	*projectrun.Proc

	mu          sync.Mutex
	first, last procstat.Usage
	sampled     bool
	peak        int64
}

// sample reads the process's usage and keeps the first and latest reading
// and the peak resident size. A process that has just exited is skipped.
func (p *program) sample() {
	pid := p.PID()
	if pid == 0 {
		return
	}
	u, err := procstat.Read(pid)
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.sampled {
		p.first, p.sampled = u, true
	}
	p.last = u
	p.peak = max(p.peak, u.PeakRSSBytes, u.RSSBytes)
}

// usage returns the first and latest samples and the peak RSS.
func (p *program) usage() (first, last procstat.Usage, peak int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.first, p.last, p.peak
}

// itemsProcessed is the sum of the program's *_items_processed_total
// counters, read from its /metrics.
func (p *program) itemsProcessed(ctx context.Context, c *http.Client) (float64, error) {
	// Not waited for at start: the phase is measured from the first
	// program's start, and the watch asks the database until this answers.
	addr := p.Addr(daemon.AdminListener)
	if addr == "" {
		return 0, errors.New("no /metrics address reported yet")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") || !strings.HasSuffix(name, "_items_processed_total") {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			sum += v
		}
	}
	return sum, sc.Err()
}
