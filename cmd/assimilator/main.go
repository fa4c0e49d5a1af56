// Command assimilator hands an app's finished jobs to the project with a
// built-in handler: --handler copy (the default) stores the canonical output
// of each successful job in the results directory and gives each failed job
// a file saying why; --handler command runs a program per job. Science code
// with its own Go handler builds its own program with assimilator.Main.
package main

import (
	"context"

	"github.com/taskserver/taskserver/internal/assimilator"
	"github.com/taskserver/taskserver/internal/daemon"
)

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	return assimilator.Run(ctx, args, assimilator.Program{})
}
