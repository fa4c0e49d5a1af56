// Command transitioner moves jobs through their states: it creates instances
// up to each job's target, times out instances past their deadline, fails
// (or, for apps that hold failed jobs, holds) jobs that hit an error limit,
// and hands jobs on to the validator, the assimilator and the file deleter.
// Its replica with mod index 0 also marks finished batches done and
// accelerates the last jobs of nearly finished batches.
package main

import (
	"context"
	"errors"
	"fmt"
	"time"

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
			&cli.DurationFlag{Name: "tail-interval", Value: transitioner.DefaultTailInterval,
				Usage:   "how often the replica with mod index 0 marks finished batches done and accelerates their tails",
				EnvVars: []string{config.EnvName("tail-interval")}},
			&cli.Float64Flag{Name: "tail-fraction", Value: transitioner.DefaultTailFraction,
				Usage: "a batch with at most max(1, this × its jobs) unfinished jobs gets an extra, reliable-only " +
					"instance of each straggler; 0 disables tail acceleration",
				EnvVars: []string{config.EnvName("tail-fraction")}},
			&cli.Float64Flag{Name: "tail-after", Value: transitioner.DefaultTailAfter,
				Usage:   "a straggler is one whose instance has been out longer than this fraction of its delay bound",
				EnvVars: []string{config.EnvName("tail-after")}},
		},
		Check: func(c *cli.Context, _ config.Common, _ config.Loop) error {
			var errs []error
			if maxOut := c.Int64("max-output-bytes"); maxOut < 1 {
				errs = append(errs, fmt.Errorf("--max-output-bytes %d: want at least 1", maxOut))
			}
			if d := c.Duration("tail-interval"); d < time.Second {
				errs = append(errs, fmt.Errorf("--tail-interval %v: want at least 1s", d))
			}
			if f := c.Float64("tail-fraction"); !(f >= 0 && f <= 1) {
				errs = append(errs, fmt.Errorf("--tail-fraction %v: want 0 to 1", f))
			}
			if f := c.Float64("tail-after"); !(f >= 0 && f <= 10) {
				errs = append(errs, fmt.Errorf("--tail-after %v: want 0 to 10", f))
			}
			return errors.Join(errs...)
		},
		Build: func(c *cli.Context, env daemon.Env) (daemon.Service, func() error, error) {
			transitioner.RegisterBacklog(env.Registry, env.Store, time.Now)
			return transitioner.New(env.Store, env.Log, transitioner.NewMetrics(env.Registry), transitioner.Options{
				Mod: env.Loop.Mod, ModIndex: env.Loop.ModIndex, Batch: env.Loop.Batch,
				MaxOutputBytes: float64(c.Int64("max-output-bytes")),
				TailInterval:   c.Duration("tail-interval"),
				TailFraction:   c.Float64("tail-fraction"),
				TailAfter:      c.Float64("tail-after")}), nil, nil
		},
	})
}
