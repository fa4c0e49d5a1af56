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
	"github.com/taskserver/taskserver/internal/validator"
)

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	return daemon.RunLoopProgram(ctx, args, daemon.LoopProgram{
		Name:   "validator",
		Usage:  "compare instance outputs, choose canonical results, grant credit",
		Listen: "127.0.0.1:9104",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "app", Value: demoapp.AppName, Usage: "app whose jobs to validate", EnvVars: []string{config.EnvName("app")}},
		},
		Check: func(c *cli.Context, _ config.Common, _ config.Loop) error {
			if c.String("app") == "" {
				return errors.New("--app is empty")
			}
			return nil
		},
		Build: func(c *cli.Context, env daemon.Env) (daemon.Service, func() error, error) {
			return validator.New(env.Store, env.Log, validator.NewMetrics(env.Registry), validator.Options{
				App: c.String("app"), UploadDir: env.Common.UploadDir, Fanout: env.Common.Fanout,
				Mod: env.Loop.Mod, ModIndex: env.Loop.ModIndex, Batch: env.Loop.Batch}), nil, nil
		},
	})
}
