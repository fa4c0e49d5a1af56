// Command validator checks the outputs of each job's instances for an app:
// it finds a quorum of equal outputs, picks the canonical instance, judges
// instances reported later against it, and grants credit.
package main

import (
	"context"
	"errors"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/validator"
)

const program = "validator"

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	own := []cli.Flag{
		&cli.StringFlag{Name: "app", Value: demoapp.AppName, Usage: "app whose jobs to validate", EnvVars: []string{config.EnvName("app")}},
	}
	app := &cli.App{
		Name:   program,
		Usage:  "compare instance outputs, choose canonical results, grant credit",
		Flags:  append(append(config.CommonFlags(":9104"), config.LoopFlags()...), own...),
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
			svc := validator.New(st, log, validator.NewMetrics(reg), validator.Options{
				App: c.String("app"), UploadDir: cfg.UploadDir, Fanout: cfg.Fanout,
				Mod: loop.Mod, ModIndex: loop.ModIndex, Batch: loop.Batch})
			return daemon.RunLoop(ctx, log, reg, cfg.Listen, daemon.NewLoopMetrics(reg, program), svc,
				daemon.LoopOptions{Sleep: loop.Sleep, OnePass: loop.OnePass})
		},
	}
	return app.RunContext(ctx, args)
}
