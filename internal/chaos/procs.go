package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// proc is one program of the project, started again after each kill. Its
// output of every run is appended to one log file.
type proc struct {
	name string
	bin  string
	args func() []string // fresh arguments per start (e.g. a free metrics port)
	log  string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	err      error
	starts   int
	killed   bool // the last exit was ours (SIGKILL or stop)
	crashes  int  // exits we did not cause
	stopping bool
	// metrics is host:port of the current run's /metrics: its --listen
	// address.
	metrics string
}

// newProc describes a program; nothing runs until start.
func newProc(name, bin, logDir string, args func() []string) *proc {
	return &proc{name: name, bin: bin, args: args, log: filepath.Join(logDir, name+".log")}
}

// start launches the program once more.
func (p *proc) start() error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log of %s: %w", p.name, err)
	}
	args := p.args()
	cmd := exec.Command(p.bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Own process group: a Ctrl-C in the terminal reaches only us.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.killed = cmd, done, false
	p.metrics = metricsAddr(args)
	p.starts++
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		if !p.killed {
			p.crashes++
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// metricsAddr is the address a program started with args serves /metrics
// on: --listen; "" without it.
func metricsAddr(args []string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--listen" {
			return args[i+1]
		}
	}
	return ""
}

// current returns the pid and metrics address of the current run; pid 0
// when it is not running.
func (p *proc) current() (pid int, metrics string) {
	if !p.running() {
		return 0, ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid, p.metrics
}

// running reports whether the current run has not exited.
func (p *proc) running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL to the whole process group (a handler command the
// assimilator runs dies with it, as in a machine crash) and waits.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.killed = true
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// stop sends SIGTERM and waits up to grace, then kills. It returns the
// exit error of a run that did not stop cleanly.
func (p *proc) stop(grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.killed, p.stopping = true, true
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return fmt.Errorf("%s did not stop within %s after SIGTERM (see %s)", p.name, grace, p.log)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var ee *exec.ExitError
	if errors.As(p.err, &ee) && ee.ExitCode() != 0 {
		return fmt.Errorf("%s: %w (see %s)", p.name, p.err, p.log)
	}
	return nil
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// listenAddr is a fresh loopback address for a metrics listener.
func listenAddr() string {
	n, err := freePort()
	if err != nil {
		return "127.0.0.1:0"
	}
	return fmt.Sprintf("127.0.0.1:%d", n)
}

// waitTCP waits until addr accepts connections.
func waitTCP(ctx context.Context, addr string, p *proc) error {
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if !p.running() {
			return fmt.Errorf("%s exited before listening on %s (see %s)", p.name, addr, p.log)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s on %s: %w", p.name, addr, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitFile waits until path exists.
func waitFile(ctx context.Context, path string, p *proc) error {
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if !p.running() {
			return fmt.Errorf("%s exited before creating %s (see %s)", p.name, path, p.log)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to create %s: %w", p.name, path, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
