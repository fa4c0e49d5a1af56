package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// StartOptions configures Start.
type StartOptions struct {
	// Exe is the supervisor binary and Args the arguments of its run
	// command ("run", "--config", ...).
	Exe  string
	Args []string
	// Paths locate the pid, state and log files of the project.
	Paths Paths
	// Wait bounds how long Start waits for every daemon to be running.
	Wait time.Duration
	// Settle is how long every daemon must have been up: a daemon that
	// exits at once (bad flag, database down) is not reported as started.
	Settle time.Duration
	// Out receives progress lines.
	Out io.Writer
}

// Start runs the supervisor in the background (a new session, output
// appended to log/supervisor.log) and waits until the state file shows
// every daemon running for Settle. It refuses when a supervisor already
// runs for the project. When some daemon does not come up it returns an
// error naming them and leaves the supervisor running (it keeps retrying;
// stop stops it).
func Start(ctx context.Context, o StartOptions) (State, error) {
	if pid, err := Running(o.Paths.PIDFile()); err == nil {
		return State{}, &RunningError{PID: pid, PIDFile: o.Paths.PIDFile()}
	} else if !errors.Is(err, ErrNotRunning) {
		return State{}, err
	}
	if err := os.MkdirAll(o.Paths.LogDir(), 0o755); err != nil {
		return State{}, fmt.Errorf("create log directory: %w", err)
	}
	logPath := o.Paths.LogFile("supervisor")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return State{}, fmt.Errorf("open supervisor log: %w", err)
	}
	defer logf.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return State{}, err
	}
	defer devnull.Close()
	cmd := exec.Command(o.Exe, o.Args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return State{}, fmt.Errorf("start supervisor: %w", err)
	}
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fmt.Fprintf(o.Out, "supervisor started (pid %d, log %s)\n", pid, logPath)

	deadline := time.Now().Add(o.Wait)
	var last State
	for {
		select {
		case err := <-exited:
			return last, fmt.Errorf("supervisor exited at start (%v): %s", err, tail(logPath, 10))
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		st, err := ReadState(o.Paths.StateFile())
		if err != nil || st.PID != pid {
			if time.Now().After(deadline) {
				return last, fmt.Errorf("supervisor (pid %d) wrote no state within %s: %s", pid, o.Wait, tail(logPath, 10))
			}
			continue
		}
		last = st
		notUp := notSettled(st, o.Settle, time.Now())
		if len(notUp) == 0 {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("not running after %s: %s (the supervisor keeps retrying; see their logs, or stop it)", o.Wait, strings.Join(notUp, "; "))
		}
	}
}

// notSettled describes the daemons that are not running or have been up
// for less than settle.
func notSettled(st State, settle time.Duration, now time.Time) []string {
	var out []string
	for _, d := range st.Daemons {
		switch {
		case d.State != StateRunning:
			s := d.Name + " " + d.State
			if d.LastExit != "" {
				s += " (last exit: " + d.LastExit + ", log " + d.Log + ")"
			}
			out = append(out, s)
		case d.StartedAt == nil || now.Sub(*d.StartedAt) < settle:
			out = append(out, d.Name+" starting")
		}
	}
	return out
}

// Stop sends SIGTERM to the project's supervisor and waits up to timeout
// for it to exit (its pid file lock released). It returns the final state
// the supervisor wrote: every daemon's last exit.
func Stop(ctx context.Context, paths Paths, timeout time.Duration) (State, error) {
	pid, err := Running(paths.PIDFile())
	if err != nil {
		return State{}, err
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return State{}, fmt.Errorf("signal supervisor %d: %w", pid, err)
	}
	deadline := time.Now().Add(timeout)
	for {
		// The lock goes a moment before the process: wait for both.
		if _, err := Running(paths.PIDFile()); errors.Is(err, ErrNotRunning) && !Alive(pid) {
			break
		}
		if time.Now().After(deadline) {
			return State{}, fmt.Errorf("supervisor %d still running %s after SIGTERM", pid, timeout)
		}
		select {
		case <-ctx.Done():
			return State{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	st, err := ReadState(paths.StateFile())
	if err != nil {
		return st, err
	}
	if st.PID != pid || st.StoppedAt == nil {
		return st, fmt.Errorf("supervisor %d exited without recording its daemons stopped (killed?)", pid)
	}
	return st, nil
}

// tail returns the last n lines of a file, for an error message.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "last lines of " + path + ":\n" + strings.Join(lines, "\n")
}

// Alive reports whether process pid exists and has not exited: a zombie
// (exited, not yet reaped by its parent) counts as gone.
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil // no /proc: ask the kernel
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
