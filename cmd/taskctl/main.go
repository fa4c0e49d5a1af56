// Command taskctl is the project operator's tool: schema, platforms, apps and
// their policies, app versions, users, job and batch submission, cancel and
// requeue, known-answer inputs, batch outputs, queue status and key
// generation.
package main

import (
	"context"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/taskctl"
)

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	return taskctl.NewApp(taskctl.Options{}).RunContext(ctx, args)
}
