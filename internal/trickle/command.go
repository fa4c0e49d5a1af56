package trickle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/taskserver/taskserver/internal/extcmd"
	"github.com/taskserver/taskserver/internal/row"
)

// Environment variables a CommandHandler's command gets, besides the
// handler's own environment.
const (
	EnvMsgID      = "TASKSERVER_TRICKLE_ID"
	EnvHostID     = "TASKSERVER_TRICKLE_HOST_ID"
	EnvVariety    = "TASKSERVER_TRICKLE_VARIETY"
	EnvResultName = "TASKSERVER_TRICKLE_RESULT_NAME"
	// EnvReply names a file the command may write: its content, if any, is
	// sent back to the application as a trickle-down of the same variety.
	EnvReply = "TASKSERVER_TRICKLE_REPLY"
)

// maxOutput is how much of a command's output is kept for the log.
const maxOutput = 4096

// CommandHandler runs a program per message, with the message as received
// on its standard input and the message described in the Env* variables.
// Exit status 0 means handled; anything else, or running past Timeout,
// means the message is retried. The program must be idempotent.
type CommandHandler struct {
	// Argv is the program and its fixed arguments.
	Argv []string
	// Timeout bounds one run; 0 means no limit.
	Timeout time.Duration
	// Log receives the output of successful runs at debug level.
	Log *slog.Logger
}

// Handle runs the command for one message.
func (h CommandHandler) Handle(ctx context.Context, m row.MsgFromHost) ([]Reply, error) {
	dir, err := os.MkdirTemp("", "trickle-reply-")
	if err != nil {
		return nil, fmt.Errorf("handler command: %w", err)
	}
	defer os.RemoveAll(dir)
	reply := filepath.Join(dir, "reply")
	res, err := extcmd.Run(ctx, extcmd.Spec{Argv: h.Argv, Timeout: h.Timeout, MaxOutput: maxOutput, Stdin: []byte(m.XML),
		Env: []string{
			EnvMsgID + "=" + strconv.FormatInt(m.ID, 10),
			EnvHostID + "=" + strconv.FormatInt(m.HostID, 10),
			EnvVariety + "=" + m.Variety,
			EnvResultName + "=" + m.ResultName,
			EnvReply + "=" + reply,
		}})
	if err != nil {
		return nil, fmt.Errorf("handler command: %w", err)
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("handler command: exit status %d; output: %q", res.ExitCode, res.Output)
	}
	if h.Log != nil && res.OutputBytes > 0 {
		h.Log.Debug("handler command output", "msg_id", m.ID, "output", res.Output)
	}
	body, err := os.ReadFile(reply)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(body) == 0) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("handler command: reply: %w", err)
	}
	return []Reply{{Variety: m.Variety, Body: string(body)}}, nil
}
