package paperbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/taskserver/taskserver/internal/procstat"
)

// program is one of the project's programs running as a child process,
// with its memory sampled about once a second.
type program struct {
	name    string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
	logPath string
	// metricsURL is its /metrics address; "" when it serves none.
	metricsURL string

	mu          sync.Mutex
	first, last procstat.Usage
	sampled     bool
	peak        int64
}

// startProgram launches bin/name with args, its output going to
// logDir/<label>.log.
func startProgram(bin, name, label, logDir string, args ...string) (*program, error) {
	logPath := filepath.Join(logDir, label+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", label, err)
	}
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Own process group: a Ctrl-C reaches the benchmark once, and it stops
	// the programs itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", label, err)
	}
	p := &program{name: label, cmd: cmd, done: make(chan struct{}), logPath: logPath}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	// No sample yet: the first, a second in, is the program's size once
	// it is running, which "memory flat over the run" compares against.
	return p, nil
}

func (p *program) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// sample reads the process's usage and keeps the first and latest reading
// and the peak resident size. A process that has just exited is skipped.
func (p *program) sample() {
	u, err := procstat.Read(p.cmd.Process.Pid)
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

// stop sends SIGTERM and waits up to grace, then kills.
func (p *program) stop(grace time.Duration) error {
	if p.running() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %s of SIGTERM (see %s)", p.name, grace, p.logPath)
	}
	if p.err != nil {
		return fmt.Errorf("%s: %w (see %s)", p.name, p.err, p.logPath)
	}
	return nil
}

// itemsProcessed is the sum of the program's *_items_processed_total
// counters, read from its /metrics.
func (p *program) itemsProcessed(ctx context.Context, c *http.Client) (float64, error) {
	if p.metricsURL == "" {
		return 0, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.metricsURL, nil)
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

// waitTCP waits until addr accepts connections, or p exits.
func waitTCP(ctx context.Context, addr string, p *program) error {
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if !p.running() {
			return fmt.Errorf("%s exited before listening on %s (see %s)", p.name, addr, p.logPath)
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), fmt.Errorf("waiting for %s on %s", p.name, addr))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitFile waits until path exists, or p exits.
func waitFile(ctx context.Context, path string, p *program) error {
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if !p.running() {
			return fmt.Errorf("%s exited before creating %s (see %s)", p.name, path, p.logPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
