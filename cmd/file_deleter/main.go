// Command file_deleter deletes the input and output files of finished jobs
// and marks their rows done.
package main

import (
	"context"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/filedeleter"
)

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	return daemon.RunLoopProgram(ctx, args, daemon.LoopProgram{
		Name:   "file_deleter",
		Usage:  "delete the files of workunits and results marked ready for deletion",
		Listen: "127.0.0.1:9106",
		Build: func(_ *cli.Context, env daemon.Env) (daemon.Service, func() error, error) {
			filedeleter.RegisterBacklog(env.Registry, env.Store)
			return filedeleter.New(env.Store, filedeleter.Config{
				DownloadDir: env.Common.DownloadDir,
				UploadDir:   env.Common.UploadDir,
				Fanout:      env.Common.Fanout,
				Mod:         env.Loop.Mod,
				ModIndex:    env.Loop.ModIndex,
				Batch:       env.Loop.Batch,
			}, env.Log, filedeleter.NewMetrics(env.Registry), time.Now), nil, nil
		},
	})
}
