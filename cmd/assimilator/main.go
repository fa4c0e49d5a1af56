// Command assimilator hands an app's finished jobs to the project: the
// canonical output of each successful job is stored in the results
// directory, and each failed job gets a file saying why.
package main

import (
	"context"
	"errors"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/assimilator"
	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/store"
)

const program = "assimilator"

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	own := []cli.Flag{
		&cli.StringFlag{Name: "app", Value: demoapp.AppName, Usage: "app whose finished jobs to handle", EnvVars: []string{config.EnvName("app")}},
		&cli.StringFlag{Name: "results-dir", Value: "results",
			Usage:   "directory receiving <job name> (canonical output) and <job name>.error (failed job) files",
			EnvVars: []string{config.EnvName("results-dir")}},
	}
	app := &cli.App{
		Name:   program,
		Usage:  "store the canonical output of finished jobs, record failed ones",
		Flags:  append(append(config.CommonFlags(":9105"), config.LoopFlags()...), own...),
		Before: config.LoadFile,
		Action: func(c *cli.Context) error {
			cfg, err := config.CommonFrom(c)
			loop, lerr := config.LoopFrom(c)
			if err := errors.Join(err, lerr); err != nil {
				return err
			}
			if c.String("app") == "" {
				return errors.New("--app is empty")
			}
			if c.String("results-dir") == "" {
				return errors.New("--results-dir is empty")
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
			h := assimilator.FileHandler{Dir: cfg.Path(c.String("results-dir")), UploadDir: cfg.UploadDir, Fanout: cfg.Fanout}
			svc := assimilator.New(st, h, log, assimilator.NewMetrics(reg), assimilator.Options{
				App: c.String("app"), Mod: loop.Mod, ModIndex: loop.ModIndex, Batch: loop.Batch})
			return daemon.RunLoop(ctx, log, reg, cfg.Listen, daemon.NewLoopMetrics(reg, program), svc,
				daemon.LoopOptions{Sleep: loop.Sleep, OnePass: loop.OnePass})
		},
	}
	return app.RunContext(ctx, args)
}
