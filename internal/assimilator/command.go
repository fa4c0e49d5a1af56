package assimilator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/taskserver/taskserver/internal/extcmd"
	"github.com/taskserver/taskserver/internal/plugin"
	"github.com/taskserver/taskserver/internal/row"
)

// Environment variables a CommandHandler's command gets, besides the
// assimilator's own environment.
const (
	EnvJobName    = "TASKSERVER_JOB_NAME"
	EnvJobID      = "TASKSERVER_JOB_ID"
	EnvBatch      = "TASKSERVER_BATCH"
	EnvErrorMask  = "TASKSERVER_ERROR_MASK"  // the job's error_mask as a number; 0 for a success
	EnvErrorNames = "TASKSERVER_ERROR_NAMES" // its bits' names joined by "|"; empty for a success
	// EnvOutputNames holds the logical names (open names) of the output
	// files given as arguments, one per line, in the arguments' order.
	EnvOutputNames = "TASKSERVER_OUTPUT_NAMES"
)

// DefaultMaxOutput is how much of a command's output CommandHandler keeps
// for the log when MaxOutput is 0.
const DefaultMaxOutput = 4096

// CommandHandler runs a program for each job: Argv, then the paths of the
// canonical instance's output files in the upload directory, one argument
// each in the instance's file order (an optional output it does not have
// left out; none for a failed job), EnvOutputNames naming them, with the
// job described in the other Env* variables. Exit status 0 means the job is
// handled; anything else, a missing or unfinished output file (see
// plugin.Canonical), or running past Timeout, means it is retried. The
// program must be idempotent, like any Handler. Its standard output and
// error, together and bounded, go to the log (debug on success) and into
// the error (on failure).
type CommandHandler struct {
	// Argv is the program and its fixed arguments. The program is looked
	// up in PATH unless it holds a slash.
	Argv []string
	// Timeout bounds one run; the program and everything it started in its
	// process group are killed then. 0 means no limit.
	Timeout time.Duration
	// UploadDir and Fanout locate output files (see package fanout).
	UploadDir string
	Fanout    int
	// MaxOutput bounds the output kept per run; 0 means DefaultMaxOutput.
	MaxOutput int
	// Log receives the output of successful runs at debug level; nil
	// discards it.
	Log *slog.Logger
}

// Handle runs the command for one job.
func (h CommandHandler) Handle(ctx context.Context, wu row.Workunit, canonical *row.Result) error {
	if len(h.Argv) == 0 || h.Argv[0] == "" {
		return errors.New("handler command: no program")
	}
	var paths, logical []string
	if canonical != nil {
		in, err := plugin.Canonical(*canonical, h.UploadDir, h.Fanout)
		if err != nil {
			return err
		}
		for _, o := range in.Outputs {
			paths, logical = append(paths, o.Path), append(logical, o.Name)
		}
	}
	names := ""
	if wu.ErrorMask != 0 {
		names = wu.ErrorMask.String()
	}
	limit := h.MaxOutput
	if limit <= 0 {
		limit = DefaultMaxOutput
	}
	res, err := extcmd.Run(ctx, extcmd.Spec{Argv: h.Argv, Args: paths, Timeout: h.Timeout, MaxOutput: limit,
		Env: []string{
			EnvJobName + "=" + wu.Name,
			EnvJobID + "=" + strconv.FormatInt(wu.ID, 10),
			EnvBatch + "=" + strconv.FormatInt(wu.Batch, 10),
			EnvErrorMask + "=" + strconv.Itoa(int(wu.ErrorMask)),
			EnvErrorNames + "=" + names,
			EnvOutputNames + "=" + strings.Join(logical, "\n"),
		}})
	if err != nil {
		return fmt.Errorf("handler command for job %s: %w", wu.Name, err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("handler command for job %s: exit status %d; output: %q", wu.Name, res.ExitCode, res.Output)
	}
	if h.Log != nil && res.OutputBytes > 0 {
		h.Log.Debug("handler command output", "workunit_id", wu.ID, "output", res.Output)
	}
	return nil
}
