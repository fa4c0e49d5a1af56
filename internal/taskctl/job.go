package taskctl

import (
	"context"
	"errors"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/batch"
	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/store"
)

func (t *tool) jobCommand() *cli.Command {
	var inputs inputList
	flags := []cli.Flag{
		&cli.StringFlag{Name: "app", Required: true, Usage: "app the job is for"},
		&cli.StringFlag{Name: "name", Aliases: []string{"wu-name", "wu_name"},
			Usage: "job name, unique (default: <app>_<unix time>_<random hex>)"},
	}
	flags = append(flags, inputFlags(&inputs)...)
	flags = append(flags, templateFlags()...)
	return &cli.Command{
		Name:  "job",
		Usage: "manage jobs",
		Subcommands: []*cli.Command{{
			Name: "submit",
			Usage: "stage the job's input files in the download directory and create the job, as BOINC's create_work " +
				"does; its templates default to the app's, its parameters to the input template's and then the project " +
				"configuration",
			Flags: append(flags, jobs.Flags()...),
			// Job parameters set in the project file (shared with the work
			// generator) apply here too.
			Before: config.LoadFile,
			Action: func(c *cli.Context) error {
				params, err := jobs.ParamsFrom(c)
				if err != nil {
					return err
				}
				// Every local file and template is read before anything
				// is staged.
				ins, err := inputs.load(t.stdin)
				if err != nil {
					return err
				}
				inT, outT, err := readTemplates(c)
				if err != nil {
					return err
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
					job := jobs.Job{Name: name, Inputs: ins, CommandLine: c.String("command-line"),
						InputTemplate: inT, OutputTemplate: outT}
					creator := jobs.NewCreator(st, cfg.DownloadDir, cfg.Fanout, t.now)
					if err := creator.Submit(ctx, app, job, params); err != nil {
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
		}, t.jobShowCommand(), {
			Name:      "cancel",
			Usage:     "cancel a job that has no result yet (instances in progress are aborted on the hosts' next contact)",
			ArgsUsage: "NAME",
			Action: func(c *cli.Context) error {
				if err := oneArg(c, "the job name"); err != nil {
					return err
				}
				return t.withBatches(c, "", func(ctx context.Context, svc *batch.Service) error {
					wu, err := svc.Job(ctx, c.Args().First())
					if err != nil {
						return err
					}
					if err := svc.CancelJob(ctx, wu); err != nil {
						return err
					}
					t.printf("cancelled job %d %s\n", wu.ID, wu.Name)
					return nil
				})
			},
		}, {
			Name: "requeue",
			Usage: "release a held job (NAME), or every job held for --reason, each with its error, total and " +
				"success limits raised by their current values",
			ArgsUsage: "[NAME]",
			Flags:     []cli.Flag{reasonFlag(false)},
			Action: func(c *cli.Context) error {
				byName := c.NArg() > 0
				if byName {
					if err := oneArg(c, "the job name"); err != nil {
						return err
					}
				}
				if byName == (c.String("reason") != "") {
					return errors.New("give a job name or --reason, not both")
				}
				return t.withBatches(c, "", func(ctx context.Context, svc *batch.Service) error {
					if byName {
						wu, err := svc.Job(ctx, c.Args().First())
						if err != nil {
							return err
						}
						if err := svc.RequeueJob(ctx, wu); err != nil {
							return err
						}
						t.printf("requeued job %d %s\n", wu.ID, wu.Name)
						return nil
					}
					reason, err := batch.ParseReason(c.String("reason"))
					if err != nil {
						return err
					}
					n, err := svc.RequeueReason(ctx, reason)
					if err != nil {
						return err
					}
					t.printf("requeued %d jobs held for %s\n", n, reason)
					return nil
				})
			},
		}},
	}
}
