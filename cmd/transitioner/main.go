// Command transitioner moves jobs through their states: it creates instances
// up to each job's target, times out instances past their deadline, fails
// (or, for apps that hold failed jobs, holds) jobs that hit an error limit,
// and hands jobs on to the validator, the assimilator and the file deleter.
// Its replica with mod index 0 also marks finished batches done and
// accelerates the last jobs of nearly finished batches.
package main

import (
	"context"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/transitioner"
)

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	return daemon.RunLoopProgram(ctx, args, daemon.LoopProgram[transitioner.Config]{
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
		Config: func(c *cli.Context, _ config.Common, loop config.Loop) transitioner.Config {
			return transitioner.Config{
				Mod: loop.Mod, ModIndex: loop.ModIndex, Batch: loop.Batch,
				MaxOutputBytes: c.Int64("max-output-bytes"),
				TailInterval:   c.Duration("tail-interval"),
				TailFraction:   c.Float64("tail-fraction"),
				TailAfter:      c.Float64("tail-after"),
			}
		},
		Build: func(_ *cli.Context, cfg transitioner.Config, env daemon.Env) (daemon.Service, func() error, error) {
			transitioner.RegisterBacklog(env.Registry, env.Store, time.Now)
			svc, err := transitioner.New(cfg, transitioner.Deps{Store: env.Store, Log: env.Log, Metrics: transitioner.NewMetrics(env.Registry)})
			if err != nil {
				return nil, nil, err
			}
			return svc, nil, nil
		},
	})
}
