// Command file_deleter deletes the input and output files of finished jobs
// and marks their rows done.
package main

import (
	"context"
	"errors"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/filedeleter"
	"github.com/taskserver/taskserver/internal/store"
)

const program = "file_deleter"

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	app := &cli.App{
		Name:   program,
		Usage:  "delete the files of workunits and results marked ready for deletion",
		Flags:  append(config.CommonFlags("127.0.0.1:9106"), config.LoopFlags()...),
		Before: config.LoadFile,
		Action: func(c *cli.Context) error {
			cfg, err := config.CommonFrom(c)
			loop, lerr := config.LoopFrom(c)
			if err := errors.Join(err, lerr); err != nil {
				return err
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
			svc := filedeleter.New(st, filedeleter.Config{
				DownloadDir: cfg.DownloadDir,
				UploadDir:   cfg.UploadDir,
				Fanout:      cfg.Fanout,
				Mod:         loop.Mod,
				ModIndex:    loop.ModIndex,
				Batch:       loop.Batch,
			}, log, filedeleter.NewMetrics(reg), time.Now)
			return daemon.RunLoop(ctx, log, reg, cfg.Listen, daemon.NewLoopMetrics(reg, program), svc,
				daemon.LoopOptions{Sleep: loop.Sleep, OnePass: loop.OnePass})
		},
	}
	return app.RunContext(ctx, args)
}
