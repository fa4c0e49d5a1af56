// Package projectrun runs a project's programs as child processes and
// watches the project they make: start a program (again, after a kill),
// stop it (SIGTERM, then SIGKILL), wait for its cache file or for the
// addresses it reports listening on (daemons start on port 0 and say which
// port they got, see --addr-file), and count the jobs and instances live
// in the database and purged into the archives. `make run`
// (localproject), `make bench` (paperbench), `make chaos` and `make load`
// (chaos) and the end-to-end tests all drive their projects with it.
package projectrun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/httpserve"
)

// poll is how often the waits look again.
const poll = 50 * time.Millisecond

// Spec describes one program of a project.
type Spec struct {
	// Name names the program in messages and its log file, Name.log.
	Name string
	// Bin is the executable's path.
	Bin string
	// Args are its arguments; SetArgs changes them for the next start.
	Args []string
	// LogDir holds the log file, appended to by every start.
	LogDir string
	// ReportsAddrs says the program takes --addr-file: each start is given
	// a fresh one, which WaitAddr and Addr read.
	ReportsAddrs bool
}

// Proc is one program of a project running as a child process in a
// process group of its own (a Ctrl-C in the terminal reaches the harness
// once, and it stops the programs in order). It may be started again
// after it exited or was killed.
type Proc struct {
	name     string
	bin      string
	logPath  string
	addrFile string // "" when the program reports no addresses

	mu      sync.Mutex
	args    []string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
	ours    bool // the current run is ended by us (Kill or Stop)
	crashes int  // runs that ended without us
	addrs   map[string]string
}

// New describes a program; nothing runs until Start.
func New(s Spec) *Proc {
	p := &Proc{name: s.Name, bin: s.Bin, logPath: filepath.Join(s.LogDir, s.Name+".log"), args: s.Args}
	if s.ReportsAddrs {
		p.addrFile = filepath.Join(s.LogDir, s.Name+".addr")
	}
	return p
}

// Start describes a program and starts it.
func Start(s Spec) (*Proc, error) {
	p := New(s)
	return p, p.Start()
}

// Name is the program's name in messages.
func (p *Proc) Name() string { return p.name }

// LogPath is the program's log file.
func (p *Proc) LogPath() string { return p.logPath }

// SetArgs sets the arguments of the next start, e.g. to start a server
// again on the address it got the first time.
func (p *Proc) SetArgs(args []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.args = args
}

// Start launches the program once more, its output appended to its log.
func (p *Proc) Start() error {
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log of %s: %w", p.name, err)
	}
	p.mu.Lock()
	args := append([]string(nil), p.args...)
	p.mu.Unlock()
	if p.addrFile != "" {
		// The last run's addresses are no one's now.
		if err := os.Remove(p.addrFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			f.Close()
			return fmt.Errorf("start %s: %w", p.name, err)
		}
		args = append(args, "--"+config.FlagAddrFile, p.addrFile)
	}
	cmd := exec.Command(p.bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.err, p.ours, p.addrs = cmd, done, nil, false, nil
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		if !p.ours {
			p.crashes++
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Done is closed when the current run ends; nil before the first start.
func (p *Proc) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Running reports whether the current run has not ended.
func (p *Proc) Running() bool {
	done := p.Done()
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

// Err is the exit error of the last run once it ended (nil for a clean
// exit).
func (p *Proc) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// PID is the current run's process id; 0 when it is not running.
func (p *Proc) PID() int {
	if !p.Running() {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Crashes counts the runs that ended on their own, not by Kill or Stop.
func (p *Proc) Crashes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.crashes
}

// Kill sends SIGKILL to the run's whole process group (a command the
// program runs dies with it, as in a machine crash) and waits for it.
func (p *Proc) Kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.ours = true
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Stop sends SIGTERM, waits up to grace, then kills the process group. It
// returns an error when the run did not stop within grace or ended with
// an error (on its own or upon SIGTERM); a run ended by Kill is none.
func (p *Proc) Stop(grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	killed := p.ours
	p.ours = true
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
	default:
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(grace):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			return fmt.Errorf("%s did not stop within %s after SIGTERM (see %s)", p.name, grace, p.logPath)
		}
	}
	if err := p.Err(); err != nil && !killed {
		return fmt.Errorf("%s: %w (see %s)", p.name, err, p.logPath)
	}
	return nil
}

// WaitFile waits until path exists (the feeder made its cache), the run
// ends, or ctx ends.
func (p *Proc) WaitFile(ctx context.Context, path string) error {
	return p.wait(ctx, "create "+path, func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
}

// WaitAddr waits until the run reports the address its listener name
// (the flag that set it: "listen", "addr") bound, and returns it.
func (p *Proc) WaitAddr(ctx context.Context, name string) (string, error) {
	if p.addrFile == "" {
		return "", fmt.Errorf("%s reports no addresses", p.name)
	}
	var addr string
	err := p.wait(ctx, "report its --"+name+" address", func() bool {
		addr = p.Addr(name)
		return addr != ""
	})
	return addr, err
}

// Addr is the address the current run reported for its listener name; ""
// until it did, or when it is not running.
func (p *Proc) Addr(name string) string {
	if p.addrFile == "" || !p.Running() {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.addrs[name] == "" {
		// Rewritten whole by the program at each bind: read it whole again.
		if m, err := httpserve.ReadAddrFile(p.addrFile); err == nil {
			p.addrs = m
		}
	}
	return p.addrs[name]
}

// wait polls cond until it holds, the run ends, or ctx ends.
func (p *Proc) wait(ctx context.Context, what string, cond func() bool) error {
	for !cond() {
		if !p.Running() {
			return fmt.Errorf("%s exited before it could %s: %v (see %s)", p.name, what, p.Err(), p.logPath)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to %s: %w", p.name, what, ctx.Err())
		case <-time.After(poll):
		}
	}
	return nil
}
