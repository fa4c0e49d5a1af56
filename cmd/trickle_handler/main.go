// Command trickle_handler handles the trickle-up messages running
// applications send, each once: --handler-cmd runs a program per message
// (the message on its standard input; what it writes to
// $TASKSERVER_TRICKLE_REPLY goes back as a trickle-down), and the built-in
// options extend the task's deadline (--extend-deadline) and grant credit
// for the CPU time reported (--credit-per-cpu-second). Science code with
// its own Go handler builds its own program with trickle.Main.
package main

import (
	"context"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/trickle"
)

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	return trickle.Run(ctx, args, trickle.Program{})
}
