package taskctl

import (
	"context"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/store"
)

func (t *tool) jobCommand() *cli.Command {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "app", Required: true, Usage: "app the job is for"},
		&cli.StringFlag{Name: "name", Usage: "job name, unique (default: <app>_<unix time>_<random hex>)"},
		&cli.StringFlag{Name: "input", Required: true, Usage: "file to stage as the job's input (opened by the app as \"in\")"},
	}
	return &cli.Command{
		Name:  "job",
		Usage: "manage jobs",
		Subcommands: []*cli.Command{{
			Name: "submit",
			Usage: "stage an input file in the download directory and create a job for it, " +
				"as the work generator does; job parameters default to the project configuration",
			Flags: append(flags, jobs.Flags()...),
			// Job parameters set in the project file (shared with the work
			// generator) apply here too.
			Before: config.LoadFile,
			Action: func(c *cli.Context) error {
				params, err := jobs.ParamsFrom(c)
				if err != nil {
					return err
				}
				input, err := os.ReadFile(c.String("input"))
				if err != nil {
					return fmt.Errorf("read --input: %w", err)
				}
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, cfg config.Common) error {
					app, err := st.AppGetByName(ctx, c.String("app"))
					if err != nil {
						return notFoundHint(err, "add it with: taskctl app add")
					}
					name := c.String("name")
					if name == "" {
						name = jobs.NewName(app.Name, t.now())
					}
					creator := jobs.NewCreator(st, cfg.DownloadDir, cfg.Fanout, t.now)
					if err := creator.Submit(ctx, app, jobs.Job{Name: name, Input: input}, params); err != nil {
						return err
					}
					wu, err := st.WorkunitGetByName(ctx, name)
					if err != nil {
						return err
					}
					t.printf("job %d %s\n", wu.ID, wu.Name)
					return nil
				})
			},
		}},
	}
}
