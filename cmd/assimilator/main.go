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
)

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	return daemon.RunLoopProgram(ctx, args, daemon.LoopProgram{
		Name:   "assimilator",
		Usage:  "store the canonical output of finished jobs, record failed ones",
		Listen: "127.0.0.1:9105",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "app", Value: demoapp.AppName, Usage: "app whose finished jobs to handle", EnvVars: []string{config.EnvName("app")}},
			&cli.StringFlag{Name: "results-dir", Value: "results",
				Usage:   "directory receiving <job name> (canonical output) and <job name>.error (failed job) files",
				EnvVars: []string{config.EnvName("results-dir")}},
		},
		Check: func(c *cli.Context, _ config.Common, _ config.Loop) error {
			var errs []error
			if c.String("app") == "" {
				errs = append(errs, errors.New("--app is empty"))
			}
			if c.String("results-dir") == "" {
				errs = append(errs, errors.New("--results-dir is empty"))
			}
			return errors.Join(errs...)
		},
		Build: func(c *cli.Context, env daemon.Env) (daemon.Service, func() error, error) {
			h := assimilator.FileHandler{Dir: env.Common.Path(c.String("results-dir")), UploadDir: env.Common.UploadDir, Fanout: env.Common.Fanout}
			return assimilator.New(env.Store, h, env.Log, assimilator.NewMetrics(env.Registry), assimilator.Options{
				App: c.String("app"), Mod: env.Loop.Mod, ModIndex: env.Loop.ModIndex, Batch: env.Loop.Batch}), nil, nil
		},
	})
}
