package validator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/taskserver/taskserver/internal/extcmd"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/job"
)

// Environment variables the Command checker's programs get, besides the
// validator's own environment.
const (
	// EnvResultName and EnvResultID name the result whose output the init
	// command checks.
	EnvResultName = "TASKSERVER_RESULT_NAME"
	EnvResultID   = "TASKSERVER_RESULT_ID"
	// EnvResultA and EnvResultB name the two results the compare command
	// compares; EnvFilesPerResult is how many of its arguments belong to
	// each (A's files come first).
	EnvResultA        = "TASKSERVER_RESULT_A"
	EnvResultB        = "TASKSERVER_RESULT_B"
	EnvFilesPerResult = "TASKSERVER_FILES_PER_RESULT"
	// EnvOutputNames holds the logical names (open names) of one
	// result's files, one per line, in the order of its arguments: for
	// the compare command A's and B's, which have the same outputs.
	EnvOutputNames = "TASKSERVER_OUTPUT_NAMES"
)

// Exit statuses of the Command checker's programs.
const (
	// ExitAgree: the compare command found the outputs equivalent; the
	// init command found the output acceptable.
	ExitAgree = 0
	// ExitDisagree: the compare command found the outputs different; the
	// init command found the output invalid.
	ExitDisagree = 1
)

// DefaultCommandTimeout bounds one run of a Command checker's program when
// Timeout is 0.
const DefaultCommandTimeout = time.Minute

// Command is the Checker that asks programs of the project's own. InitArgv,
// if set, is run with one result's output files appended: exit status 0
// accepts the output, 1 rejects it (a validate error). CompareArgv is run
// with the files of result A then those of result B appended: 0 means they
// agree, 1 that they do not. A result's files are those the validator
// compares (see Checker.Init), in the job's output order, one argument
// each; EnvOutputNames names them, so a program finds an output by its
// logical name. A job with one output gives one argument per result, as
// before outputs had names. Any other status, a program that cannot start,
// or one running past Timeout (killed with everything it started) is a
// transient error: the job is retried on a later pass. Programs must not
// change the files. The argument lists are taken as given, without a shell.
type Command struct {
	// InitArgv is the optional init program and its fixed arguments.
	InitArgv []string
	// CompareArgv is the compare program and its fixed arguments.
	CompareArgv []string
	// Timeout bounds one run; 0 means DefaultCommandTimeout.
	Timeout time.Duration
}

// Check reports a Command that cannot work.
func (c Command) Check() error {
	if len(c.CompareArgv) == 0 || c.CompareArgv[0] == "" {
		return errors.New("command checker: no compare program")
	}
	if c.Timeout < 0 {
		return fmt.Errorf("command checker: timeout %s is negative", c.Timeout)
	}
	return nil
}

// commandOutput is one instance's output for Command: where its files are.
type commandOutput struct {
	name  string
	files []string
	// names are the files' logical names, one per line (EnvOutputNames).
	names string
}

// Init runs the init program, if any, on the result's files.
func (c Command) Init(ctx context.Context, r row.Result, outputs []job.Output) (any, error) {
	out := commandOutput{name: r.Name, files: make([]string, len(outputs))}
	names := make([]string, len(outputs))
	for i, o := range outputs {
		out.files[i], names[i] = o.Path, o.Name
	}
	out.names = strings.Join(names, "\n")
	if len(c.InitArgv) == 0 {
		return out, nil
	}
	ok, err := c.run(ctx, c.InitArgv, out.files, EnvResultName+"="+r.Name, EnvResultID+"="+strconv.FormatInt(r.ID, 10),
		EnvOutputNames+"="+out.names)
	if err != nil {
		return nil, fmt.Errorf("init command for result %s: %w", r.Name, err)
	}
	if !ok {
		return nil, fmt.Errorf("init command rejected the output of result %s: %w", r.Name, ErrInvalidOutput)
	}
	return out, nil
}

// Compare runs the compare program on both outputs' files. Outputs with
// different numbers of files disagree without it.
func (c Command) Compare(ctx context.Context, a, b any) (bool, error) {
	oa, okA := a.(commandOutput)
	ob, okB := b.(commandOutput)
	if !okA || !okB {
		return false, fmt.Errorf("command compare: got %T and %T, want command output", a, b)
	}
	if len(oa.files) != len(ob.files) {
		return false, nil
	}
	names := oa.names
	if names == "" {
		// A known answer's expected output has no names; the instance's
		// are the job's.
		names = ob.names
	}
	args := append(append([]string(nil), oa.files...), ob.files...)
	ok, err := c.run(ctx, c.CompareArgv, args, EnvResultA+"="+oa.name, EnvResultB+"="+ob.name,
		EnvFilesPerResult+"="+strconv.Itoa(len(oa.files)), EnvOutputNames+"="+names)
	if err != nil {
		return false, fmt.Errorf("compare command for results %s and %s: %w", oa.name, ob.name, err)
	}
	return ok, nil
}

// Cleanup does nothing: the files belong to the upload directory.
func (Command) Cleanup(any) {}

// maxCommandOutput bounds the program output kept for an error message.
const maxCommandOutput = 4096

// run runs argv with args appended and env added, and maps its exit status:
// ExitAgree → true, ExitDisagree → false, anything else → an error.
func (c Command) run(ctx context.Context, argv, args []string, env ...string) (bool, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultCommandTimeout
	}
	res, err := extcmd.Run(ctx, extcmd.Spec{Argv: argv, Args: args, Env: env, Timeout: timeout, MaxOutput: maxCommandOutput})
	switch {
	case err != nil:
		return false, err
	case res.ExitCode == ExitAgree:
		return true, nil
	case res.ExitCode == ExitDisagree:
		return false, nil
	default:
		return false, fmt.Errorf("exit status %d; output: %q", res.ExitCode, res.Output)
	}
}
