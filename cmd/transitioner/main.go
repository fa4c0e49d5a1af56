// Command transitioner moves jobs through their states: it creates instances
// up to each job's target, times out instances past their deadline, fails
// jobs that hit an error limit, and hands jobs on to the validator, the
// assimilator and the file deleter.
package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/transitioner"
)

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	return daemon.RunLoopProgram(ctx, args, daemon.LoopProgram{
		Name:   "transitioner",
		Usage:  "create, time out and finish job instances (the job state machine)",
		Listen: "127.0.0.1:9102",
		Flags: []cli.Flag{
			&cli.Int64Flag{Name: "max-output-bytes", Value: transitioner.DefaultMaxOutputBytes,
				Usage: "largest output file a new instance may upload, in bytes", EnvVars: []string{config.EnvName("max-output-bytes")}},
		},
		Check: func(c *cli.Context, _ config.Common, _ config.Loop) error {
			if maxOut := c.Int64("max-output-bytes"); maxOut < 1 {
				return fmt.Errorf("--max-output-bytes %d: want at least 1", maxOut)
			}
			return nil
		},
		Build: func(c *cli.Context, env daemon.Env) (daemon.Service, func() error, error) {
			return transitioner.New(env.Store, env.Log, transitioner.NewMetrics(env.Registry), transitioner.Options{
				Mod: env.Loop.Mod, ModIndex: env.Loop.ModIndex, Batch: env.Loop.Batch,
				MaxOutputBytes: float64(c.Int64("max-output-bytes"))}), nil, nil
		},
	})
}
