package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/httpserve"
)

// Options configures a Supervisor. Durations left zero get the defaults
// documented on each field.
type Options struct {
	// Config is the project's configuration file; every daemon gets
	// --config with its absolute path.
	Config string
	// Daemons are the replicas to run, in start order (the expanded
	// daemons list of Config).
	Daemons []config.Replica
	// BinDir holds one binary per program name.
	BinDir string
	// Paths locate the pid, state and log files.
	Paths Paths
	// Listen is the address of /healthz and /metrics (empty: none).
	Listen string
	// Handler, when set, is mounted at "/" on the Listen address, beside
	// /healthz and /metrics (the status page).
	Handler http.Handler
	// Grace is how long a daemon may take to exit after SIGTERM before it
	// is killed; default 20 s.
	Grace time.Duration
	// MinBackoff is the pause before the first restart; default 1 s.
	MinBackoff time.Duration
	// MaxBackoff caps the doubling pause; default 1 min.
	MaxBackoff time.Duration
	// StableAfter is how long a daemon must stay up for the next restart
	// to wait MinBackoff again; default 1 min.
	StableAfter time.Duration
	Log         *slog.Logger
	// Registry receives the supervisor's metrics; nil: a fresh one.
	Registry *prometheus.Registry
}

// Supervisor runs a project's daemons; see the package doc.
type Supervisor struct {
	opts    Options
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *metrics

	mu    sync.Mutex
	state State
}

// New checks opts and returns a supervisor ready to Run.
func New(opts Options) (*Supervisor, error) {
	var errs []error
	if len(opts.Daemons) == 0 {
		errs = append(errs, fmt.Errorf("config %s: the daemons list is empty: nothing to run", opts.Config))
	}
	for _, r := range opts.Daemons {
		bin := filepath.Join(opts.BinDir, r.Program)
		if fi, err := os.Stat(bin); err != nil {
			errs = append(errs, fmt.Errorf("daemon %s: %w", r.Name, err))
		} else if fi.IsDir() || fi.Mode()&0o111 == 0 {
			errs = append(errs, fmt.Errorf("daemon %s: %s is not an executable file", r.Name, bin))
		}
	}
	if opts.Paths.ProjectDir == "" {
		errs = append(errs, errors.New("project directory is empty"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&opts.Grace, 20*time.Second)
	def(&opts.MinBackoff, time.Second)
	def(&opts.MaxBackoff, time.Minute)
	def(&opts.StableAfter, time.Minute)
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Registry == nil {
		opts.Registry = daemon.NewRegistry("supervisor")
	}
	s := &Supervisor{opts: opts, log: opts.Log, reg: opts.Registry, metrics: newMetrics(opts.Registry)}
	s.state = State{PID: os.Getpid(), Config: opts.Config, Listen: opts.Listen}
	for _, r := range opts.Daemons {
		s.state.Daemons = append(s.state.Daemons, DaemonState{Name: r.Name, Program: r.Program, Listen: r.Listen,
			Log: opts.Paths.LogFile(r.Name), State: StateStarting, LastExitCode: -1})
		s.metrics.up.WithLabelValues(r.Name).Set(0)
		s.metrics.restarts.WithLabelValues(r.Name).Add(0)
	}
	return s, nil
}

// Snapshot returns a copy of the current state (what the state file holds).
func (s *Supervisor) Snapshot() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state
	st.Daemons = slices.Clone(s.state.Daemons)
	return st
}

// Run takes the pid file, starts every daemon in order and supervises them
// until ctx ends, then stops them in reverse order and returns nil once all
// have exited. It fails at once, starting nothing, if another supervisor
// holds the pid file or the listen address cannot be bound.
func (s *Supervisor) Run(ctx context.Context) error {
	for _, d := range []string{s.opts.Paths.RunDir(), s.opts.Paths.LogDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	lock, err := lockPIDFile(s.opts.Paths.PIDFile(), os.Getpid())
	if err != nil {
		return err
	}
	defer lock.release()

	var ln net.Listener
	if s.opts.Listen != "" {
		if ln, err = net.Listen("tcp", s.opts.Listen); err != nil {
			return fmt.Errorf("listen on %s: %w", s.opts.Listen, err)
		}
	}
	s.mu.Lock()
	s.state.StartedAt = time.Now()
	if ln != nil {
		s.state.Listen = ln.Addr().String()
	}
	s.saveLocked()
	s.mu.Unlock()

	srvDone := make(chan error, 1)
	var srv *http.Server
	if ln != nil {
		mux := daemon.AdminMux(s.reg, &daemon.Health{})
		if s.opts.Handler != nil {
			mux.Handle("/", s.opts.Handler)
		}
		srv = httpserve.New(mux, httpserve.Options{})
		go func() { srvDone <- srv.Serve(ln) }()
		s.log.Info("listening", "addr", ln.Addr().String())
	}

	children := make([]*child, len(s.opts.Daemons))
	for i, r := range s.opts.Daemons {
		c := &child{s: s, idx: i, r: r, stop: make(chan struct{}), done: make(chan struct{})}
		children[i] = c
		go c.supervise()
	}
	s.log.Info("started", "daemons", len(children))

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-srvDone:
		serveErr = fmt.Errorf("serve %s: %w", s.opts.Listen, serveErr)
		s.log.Error("listener failed; stopping", "error", serveErr)
	}
	s.mu.Lock()
	s.state.Stopping = true
	s.saveLocked()
	s.mu.Unlock()
	s.log.Info("stopping", "daemons", len(children))
	for i := len(children) - 1; i >= 0; i-- {
		close(children[i].stop)
		<-children[i].done
	}
	s.mu.Lock()
	now := time.Now()
	s.state.StoppedAt = &now
	s.saveLocked()
	s.mu.Unlock()
	if srv != nil && serveErr == nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-srvDone
	}
	s.log.Info("stopped")
	return serveErr
}

// update changes replica i's state under the lock and rewrites the state
// file.
func (s *Supervisor) update(i int, f func(d *DaemonState)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.state.Daemons[i])
	s.saveLocked()
}

func (s *Supervisor) saveLocked() {
	if err := writeState(s.opts.Paths.StateFile(), s.state); err != nil {
		s.log.Error("write state file", "error", err)
	}
}

// child supervises one replica: it starts the process, waits for it, and
// restarts it after a back-off until stop is closed.
type child struct {
	s    *Supervisor
	idx  int
	r    config.Replica
	stop chan struct{} // closed to stop the replica
	done chan struct{} // closed when the replica is stopped for good
}

// exit is how a process ended.
type exit struct {
	desc string
	code int
}

func (c *child) supervise() {
	defer close(c.done)
	s := c.s
	name := c.r.Name
	b := newBackoff(s.opts.MinBackoff, s.opts.MaxBackoff, s.opts.StableAfter)
	for restarts := 0; ; restarts++ {
		if restarts > 0 {
			s.metrics.restarts.WithLabelValues(name).Inc()
		}
		started := time.Now()
		cmd, exited, err := c.spawn()
		var ex exit
		if err != nil {
			ex = exit{desc: "start: " + err.Error(), code: -1}
			s.log.Error("daemon did not start", "daemon", name, "error", err)
		} else {
			s.update(c.idx, func(d *DaemonState) {
				d.PID, d.State, d.Restarts, d.StartedAt = cmd.Process.Pid, StateRunning, restarts, &started
			})
			s.metrics.up.WithLabelValues(name).Set(1)
			select {
			case ex = <-exited:
			case <-c.stop:
				c.terminate(cmd, exited)
				return
			}
			s.metrics.up.WithLabelValues(name).Set(0)
		}
		uptime := time.Since(started)
		delay := b.next(uptime)
		now := time.Now()
		s.update(c.idx, func(d *DaemonState) {
			d.PID, d.State, d.Restarts = 0, StateRestarting, restarts
			d.LastExit, d.LastExitCode, d.LastExitAt = ex.desc, ex.code, &now
		})
		s.log.Warn("daemon exited; restarting", "daemon", name, "exit", ex.desc,
			"uptime", uptime.Round(time.Millisecond), "restart_in", delay, "restarts", restarts+1)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-c.stop:
			t.Stop()
			s.update(c.idx, func(d *DaemonState) { d.State = StateStopped })
			return
		}
	}
}

// spawn starts the replica's process with its output appended to its log
// file. exited delivers how it ended.
func (c *child) spawn() (*exec.Cmd, <-chan exit, error) {
	s := c.s
	logPath := s.opts.Paths.LogFile(c.r.Name)
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("open log: %w", err)
	}
	defer f.Close() // the child has its own copy
	bin := filepath.Join(s.opts.BinDir, c.r.Program)
	args := append([]string{"--" + config.FlagConfig, s.opts.Config}, c.r.Args...)
	fmt.Fprintf(f, "%s supervisor: starting %s: %s %s\n", time.Now().Format(time.RFC3339), c.r.Name, bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group: a Ctrl-C on a foreground supervisor reaches
	// the supervisor only, which then stops the daemons in order. Pdeathsig:
	// a supervisor killed with -9 leaves no daemon behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	exited := make(chan exit, 1)
	go func() {
		err := cmd.Wait()
		ex := exit{desc: "exit status 0", code: 0}
		if err != nil {
			ex = exit{desc: err.Error(), code: -1}
			if cmd.ProcessState != nil {
				ex.code = cmd.ProcessState.ExitCode()
			}
		}
		exited <- ex
	}()
	return cmd, exited, nil
}

// terminate stops a running replica: SIGTERM, then SIGKILL to its process
// group after the grace period.
func (c *child) terminate(cmd *exec.Cmd, exited <-chan exit) {
	s := c.s
	s.update(c.idx, func(d *DaemonState) { d.State = StateStopping })
	_ = cmd.Process.Signal(syscall.SIGTERM)
	killed := false
	var ex exit
	t := time.NewTimer(s.opts.Grace)
	select {
	case ex = <-exited:
		t.Stop()
	case <-t.C:
		killed = true
		s.log.Warn("daemon did not stop in time; killing it", "daemon", c.r.Name, "grace", s.opts.Grace)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		ex = <-exited
	}
	s.metrics.up.WithLabelValues(c.r.Name).Set(0)
	now := time.Now()
	s.update(c.idx, func(d *DaemonState) {
		d.PID, d.State, d.Killed = 0, StateStopped, killed
		d.LastExit, d.LastExitCode, d.LastExitAt = ex.desc, ex.code, &now
	})
	s.log.Info("daemon stopped", "daemon", c.r.Name, "exit", ex.desc)
}
