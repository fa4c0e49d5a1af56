// Command work_generator keeps an app's backlog of unsent instances near a
// target by creating demo jobs and staging their input files. A project
// making its own jobs' inputs writes its own main around the public package
// workgenerator's Main instead (see examples/workgenerator).
package main

import (
	"context"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/workgenerator"
)

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	return workgenerator.Run(ctx, args, workgenerator.Program{})
}
