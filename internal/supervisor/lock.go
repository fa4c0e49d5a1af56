package supervisor

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNotRunning is returned when no supervisor holds the project's pid file.
var ErrNotRunning = errors.New("no supervisor is running for this project")

// RunningError is returned when a supervisor already runs for the project.
type RunningError struct {
	PID     int
	PIDFile string
}

func (e *RunningError) Error() string {
	return fmt.Sprintf("a supervisor is already running for this project (pid %d, %s)", e.PID, e.PIDFile)
}

// pidLock is the pid file, held locked for the supervisor's lifetime. The
// lock, not the pid in the file, says whether a supervisor runs: the kernel
// drops it when the process dies, even by SIGKILL.
type pidLock struct {
	f    *os.File
	path string
}

// lockPIDFile takes the pid file's lock and writes pid into it. A lock
// held by someone else is retried briefly, since status and stop take it
// for a moment to probe.
func lockPIDFile(path string, pid int) (*pidLock, error) {
	var lastErr error
	for range 10 {
		l, err := tryLock(path, pid)
		if err == nil {
			return l, nil
		}
		var re *RunningError
		if !errors.As(err, &re) {
			return nil, err
		}
		lastErr = err
		time.Sleep(50 * time.Millisecond)
	}
	return nil, lastErr
}

func tryLock(path string, pid int) (*pidLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open pid file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			other, _ := readPID(path)
			return nil, &RunningError{PID: other, PIDFile: path}
		}
		return nil, fmt.Errorf("lock pid file %s: %w", path, err)
	}
	// The previous holder removes the file as it exits: a lock on a file
	// that is no longer at path locks nothing anyone else will open.
	fi, err1 := f.Stat()
	pi, err2 := os.Stat(path)
	if err1 != nil || err2 != nil || !os.SameFile(fi, pi) {
		f.Close()
		return tryLock(path, pid)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("write pid file: %w", err)
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(pid)+"\n"), 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("write pid file: %w", err)
	}
	return &pidLock{f: f, path: path}, nil
}

// release removes the pid file, then drops the lock.
func (l *pidLock) release() {
	_ = os.Remove(l.path)
	_ = l.f.Close()
}

// Running reports the pid of the supervisor holding the pid file at path,
// or ErrNotRunning.
func Running(path string) (int, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, ErrNotRunning
	}
	if err != nil {
		return 0, fmt.Errorf("open pid file: %w", err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	if err == nil {
		return 0, ErrNotRunning // a stale file: its owner died
	}
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		return 0, fmt.Errorf("probe pid file %s: %w", path, err)
	}
	// The holder writes its pid just after taking the lock: an empty file
	// is one being written.
	for range 20 {
		pid, err := readPID(path)
		if err == nil {
			return pid, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return readPID(path)
}

func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("pid file %s: %q is not a pid", path, b)
	}
	return pid, nil
}
