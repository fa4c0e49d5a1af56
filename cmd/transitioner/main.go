// Command transitioner moves jobs through their states: it creates instances
// up to each job's target, times out instances past their deadline, fails
// jobs that hit an error limit, and hands jobs on to the validator, the
// assimilator and the file deleter.
package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/transitioner"
)

const program = "transitioner"

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	own := []cli.Flag{
		&cli.Int64Flag{Name: "max-output-bytes", Value: transitioner.DefaultMaxOutputBytes,
			Usage: "largest output file a new instance may upload, in bytes", EnvVars: []string{config.EnvName("max-output-bytes")}},
	}
	app := &cli.App{
		Name:   program,
		Usage:  "create, time out and finish job instances (the job state machine)",
		Flags:  append(append(config.CommonFlags("127.0.0.1:9102"), config.LoopFlags()...), own...),
		Before: config.LoadFile,
		Action: func(c *cli.Context) error {
			cfg, err := config.CommonFrom(c)
			loop, lerr := config.LoopFrom(c)
			if err := errors.Join(err, lerr); err != nil {
				return err
			}
			maxOut := c.Int64("max-output-bytes")
			if maxOut < 1 {
				return fmt.Errorf("--max-output-bytes %d: want at least 1", maxOut)
			}
			log := daemon.NewLogger(program, cfg.LogLevel)
			reg := daemon.NewRegistry(program)
			st, err := store.Open(ctx, cfg.DBDSN, store.Options{MaxOpenConns: 4})
			if err != nil {
				return err
			}
			defer st.Close()
			if err := st.SchemaCheck(ctx); err != nil {
				return err
			}
			svc := transitioner.New(st, log, transitioner.NewMetrics(reg), transitioner.Options{
				Mod: loop.Mod, ModIndex: loop.ModIndex, Batch: loop.Batch, MaxOutputBytes: float64(maxOut)})
			return daemon.RunLoop(ctx, log, reg, cfg.Listen, daemon.NewLoopMetrics(reg, program), svc,
				daemon.LoopOptions{Sleep: loop.Sleep, OnePass: loop.OnePass})
		},
	}
	return app.RunContext(ctx, args)
}
