// Command taskctl is the project operator's tool: schema, platforms, apps,
// app versions, users, job submission, queue status and key generation.
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
