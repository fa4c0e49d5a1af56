package supervisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Replica states in the state file.
const (
	StateStarting   = "starting"   // not started yet
	StateRunning    = "running"    // the process is up
	StateRestarting = "restarting" // it exited; waiting out the back-off
	StateStopping   = "stopping"   // SIGTERM sent, waiting for it to exit
	StateStopped    = "stopped"    // stopped by the supervisor
)

// State is the supervisor's state file: what status and stop read.
type State struct {
	PID       int       `json:"pid"`
	Config    string    `json:"config"`
	Listen    string    `json:"listen,omitempty"`
	StartedAt time.Time `json:"started_at"`
	// Stopping is set once a stop signal arrived; StoppedAt once every
	// daemon has exited.
	Stopping  bool          `json:"stopping"`
	StoppedAt *time.Time    `json:"stopped_at,omitempty"`
	Daemons   []DaemonState `json:"daemons"`
}

// DaemonState is one replica in the state file.
type DaemonState struct {
	Name     string `json:"name"`
	Program  string `json:"program"`
	Listen   string `json:"listen,omitempty"`
	Log      string `json:"log"`
	PID      int    `json:"pid"`
	State    string `json:"state"`
	Restarts int    `json:"restarts"`
	// StartedAt is when the current (or last) process started.
	StartedAt *time.Time `json:"started_at,omitempty"`
	// LastExit describes how the last process ended ("exit status 1",
	// "signal: killed", or why it could not start); LastExitCode is its
	// exit code, -1 for a signal or a failed start.
	LastExit     string     `json:"last_exit,omitempty"`
	LastExitCode int        `json:"last_exit_code"`
	LastExitAt   *time.Time `json:"last_exit_at,omitempty"`
	// Killed is set when the process did not stop within the grace period
	// after SIGTERM and was killed.
	Killed bool `json:"killed,omitempty"`
}

// Paths are the files a supervisor keeps under its project directory.
type Paths struct {
	ProjectDir string
}

// RunDir holds the pid and state files.
func (p Paths) RunDir() string { return filepath.Join(p.ProjectDir, "run") }

// LogDir holds one log file per replica and the supervisor's own.
func (p Paths) LogDir() string { return filepath.Join(p.ProjectDir, "log") }

// PIDFile holds the running supervisor's pid; the supervisor keeps it
// locked (flock) while it runs, so a stale file is told from a live one
// without trusting the pid.
func (p Paths) PIDFile() string { return filepath.Join(p.RunDir(), "supervisor.pid") }

// StateFile is the JSON State.
func (p Paths) StateFile() string { return filepath.Join(p.RunDir(), "supervisor.json") }

// LogFile is a replica's log (or "supervisor").
func (p Paths) LogFile(name string) string { return filepath.Join(p.LogDir(), name+".log") }

// writeState replaces the state file atomically (temporary file and
// rename), so a reader never sees half of it.
func writeState(path string, st State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

// ReadState reads a state file.
func ReadState(path string) (State, error) {
	var st State
	b, err := os.ReadFile(path)
	if err != nil {
		return st, fmt.Errorf("read state: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("state file %s: %w", path, err)
	}
	return st, nil
}
