// Command file_deleter deletes the input and output files of finished jobs
// and marks their rows done, deletes the shared input files no unfinished
// job refers to, and sweeps the upload directory for orphaned
// uploads (files no result row names any more).
package main

import (
	"context"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/filedeleter"
	"github.com/taskserver/taskserver/internal/scheduler"
)

func main() { daemon.Main(run) }

const (
	flagOrphanAge   = "orphan-age"
	flagOrphanEvery = "orphan-every"
	flagUploadGrace = "upload-grace"
	flagSharedGrace = "shared-file-grace"
)

func run(ctx context.Context, args []string) error {
	return daemon.RunLoopProgram(ctx, args, daemon.LoopProgram[filedeleter.Config]{
		Name:   "file_deleter",
		Usage:  "delete the files of workunits and results marked ready for deletion",
		Listen: "127.0.0.1:9106",
		Flags: []cli.Flag{
			// A day: far longer than an upload or a report takes, so only
			// files no result will ever claim are old enough.
			&cli.DurationFlag{Name: flagOrphanAge, Value: 24 * time.Hour,
				Usage:   "delete an uploaded file no result row names once it is unchanged this long (0: never sweep the upload directory for such orphans)",
				EnvVars: []string{config.EnvName(flagOrphanAge)}},
			&cli.DurationFlag{Name: flagOrphanEvery, Value: time.Hour,
				Usage:   "least time between the starts of two sweeps of the upload directory for orphans (only replica 0 of --mod sweeps)",
				EnvVars: []string{config.EnvName(flagOrphanEvery)}},
			&cli.DurationFlag{Name: flagUploadGrace, Value: scheduler.DefaultUploadGrace,
				Usage:   "the scheduler's --" + flagUploadGrace + ", which must match it (set upload-grace in the project file both read): an output deleted while its upload certificate is still good (until the task's report deadline plus this) is replaced by an empty closed tombstone until then, so the certificate cannot create it again; 0 is the default, negative is none",
				EnvVars: []string{config.EnvName(flagUploadGrace)}},
			&cli.DurationFlag{Name: flagSharedGrace, Value: 24 * time.Hour,
				Usage:   "delete a shared input file once no unfinished job refers to it and none referred to it (nor was it staged) for this long, so a file staged for jobs not submitted yet is kept (0: no grace)",
				EnvVars: []string{config.EnvName(flagSharedGrace)}},
		},
		Config: func(c *cli.Context, common config.Common, loop config.Loop) filedeleter.Config {
			return filedeleter.Config{
				DownloadDir:     common.DownloadDir,
				UploadDir:       common.UploadDir,
				Fanout:          common.Fanout,
				Mod:             loop.Mod,
				ModIndex:        loop.ModIndex,
				Batch:           loop.Batch,
				OrphanAge:       c.Duration(flagOrphanAge),
				OrphanEvery:     c.Duration(flagOrphanEvery),
				UploadGrace:     scheduler.UploadGraceFromFlag(c.Duration(flagUploadGrace)),
				SharedFileGrace: c.Duration(flagSharedGrace),
			}
		},
		Build: func(_ *cli.Context, cfg filedeleter.Config, env daemon.Env) (daemon.Service, func() error, error) {
			filedeleter.RegisterBacklog(env.Registry, env.Store)
			svc, err := filedeleter.New(cfg, filedeleter.Deps{Store: env.Store, Log: env.Log, Metrics: filedeleter.NewMetrics(env.Registry)})
			if err != nil {
				return nil, nil, err
			}
			return svc, svc.Close, nil
		},
	})
}
