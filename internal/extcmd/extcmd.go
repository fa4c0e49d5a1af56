// Package extcmd runs the external programs a project plugs into the
// server (a validator's compare command, an assimilator's handler command):
// with a time limit that kills the program and everything it started, and
// with its output kept, up to a bound, for the log or an error message.
package extcmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"
)

// waitDelay is how long Run waits for the output pipes after the program
// ended or was killed: something that outlived the kill and holds a pipe
// open must not hang the caller.
const waitDelay = 5 * time.Second

// Spec is one run of a program.
type Spec struct {
	// Argv is the program and its fixed arguments; Args are appended.
	Argv, Args []string
	// Env is added to this process's environment.
	Env []string
	// Stdin is the program's standard input; nil gives it none.
	Stdin []byte
	// Timeout kills the program (and its process group) after this long; 0
	// means no limit beyond ctx.
	Timeout time.Duration
	// MaxOutput bounds the bytes of stdout and stderr kept; 0 means 4 KiB.
	MaxOutput int
}

// Result is how a run ended.
type Result struct {
	// ExitCode is the program's exit status; -1 if it did not exit normally.
	ExitCode int
	// Output is stdout and stderr together, cut at MaxOutput.
	Output string
	// OutputBytes counts all the output, kept or not.
	OutputBytes int
}

// ErrNoProgram is returned for an empty Argv.
var ErrNoProgram = errors.New("no program")

// Run runs s. A program that ran and exited, with any status, gives a nil
// error and its exit code; a program that could not start, was killed by a
// signal or timed out gives an error (wrapping context.DeadlineExceeded for
// a timeout) with its output so far.
func Run(ctx context.Context, s Spec) (Result, error) {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return Result{ExitCode: -1}, ErrNoProgram
	}
	if s.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.Timeout)
		defer cancel()
	}
	limit := s.MaxOutput
	if limit <= 0 {
		limit = 4096
	}
	cmd := exec.CommandContext(ctx, s.Argv[0], append(append([]string(nil), s.Argv[1:]...), s.Args...)...)
	cmd.Env = append(os.Environ(), s.Env...)
	if s.Stdin != nil {
		cmd.Stdin = bytes.NewReader(s.Stdin)
	}
	out := &cappedBuffer{max: limit}
	cmd.Stdout, cmd.Stderr = out, out
	killProcessGroup(cmd)
	cmd.WaitDelay = waitDelay
	err := cmd.Run()
	res := Result{ExitCode: -1, Output: out.String(), OutputBytes: out.Len()}
	var exit *exec.ExitError
	switch {
	case err == nil:
		res.ExitCode = 0
		return res, nil
	case ctx.Err() != nil:
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && s.Timeout > 0 {
			return res, fmt.Errorf("killed after %s (%w); output: %q", s.Timeout, context.DeadlineExceeded, res.Output)
		}
		return res, fmt.Errorf("%w; output: %q", ctx.Err(), res.Output)
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		res.ExitCode = exit.ExitCode()
		return res, nil
	default:
		return res, fmt.Errorf("%w; output: %q", err, res.Output)
	}
}

// cappedBuffer keeps the first max bytes written to it and counts the rest.
// It never fails a write, so a chatty program is not killed by a broken
// pipe. Stdout and stderr share it, written from two goroutines.
type cappedBuffer struct {
	mu      sync.Mutex
	max     int
	buf     []byte
	dropped int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := min(len(p), b.max-len(b.buf))
	b.buf = append(b.buf, p[:n]...)
	b.dropped += len(p) - n
	return len(p), nil
}

// Len is the number of bytes written, kept or not.
func (b *cappedBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.buf) + b.dropped
}

func (b *cappedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dropped == 0 {
		return string(b.buf)
	}
	return string(b.buf) + fmt.Sprintf("... (%d more bytes)", b.dropped)
}
