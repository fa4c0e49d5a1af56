package taskctl

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/jobtemplate"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// appTemplateFlags are an app's default templates, for app add and app
// templates.
func appTemplateFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "input-template", Usage: "the app's default input template file (BOINC's format)"},
		&cli.StringFlag{Name: "output-template", Usage: "the app's default output template file (BOINC's format)"},
	}
}

// appTemplates reads and checks the template files the flags name: each
// text, or "" when its flag is not given.
func appTemplates(c *cli.Context) (in, out string, err error) {
	read := func(flag, kind string) (string, error) {
		path := c.String(flag)
		if path == "" {
			return "", nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("--%s: %w", flag, err)
		}
		text := string(b)
		if kind == jobtemplate.KindInput {
			_, err = jobtemplate.ParseInput(text)
		} else {
			_, err = jobtemplate.ParseOutput(text)
		}
		if err != nil {
			return "", fmt.Errorf("--%s %s: %w", flag, path, err)
		}
		return text, nil
	}
	if in, err = read("input-template", jobtemplate.KindInput); err != nil {
		return "", "", err
	}
	out, err = read("output-template", jobtemplate.KindOutput)
	return in, out, err
}

// putTemplates stores the templates given (in, out; "" for none) and sets
// their ids in a.
func (t *tool) putTemplates(ctx context.Context, st *store.Store, a *row.App, in, out string) error {
	now := t.now().Unix()
	if in != "" {
		id, err := st.JobTemplatePut(ctx, jobtemplate.KindInput, in, now)
		if err != nil {
			return err
		}
		a.InputTemplateID = id
	}
	if out != "" {
		id, err := st.JobTemplatePut(ctx, jobtemplate.KindOutput, out, now)
		if err != nil {
			return err
		}
		a.OutputTemplateID = id
	}
	return nil
}

func (t *tool) appTemplatesCommand() *cli.Command {
	return &cli.Command{
		Name: "templates",
		Usage: "set an app's default input and output templates (used by jobs that name none; jobs created " +
			"before keep theirs), or show them when no template is given",
		Flags: append([]cli.Flag{&cli.StringFlag{Name: "app", Required: true, Usage: "the app"}}, appTemplateFlags()...),
		Action: func(c *cli.Context) error {
			in, out, err := appTemplates(c)
			if err != nil {
				return err
			}
			return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
				a, err := st.AppGetByName(ctx, c.String("app"))
				if err != nil {
					return notFoundHint(err, "add it with: taskctl app add")
				}
				if in == "" && out == "" {
					return t.showTemplates(ctx, st, a)
				}
				if err := t.putTemplates(ctx, st, &a, in, out); err != nil {
					return err
				}
				if err := st.AppSetTemplates(ctx, a.ID, a.InputTemplateID, a.OutputTemplateID); err != nil {
					return err
				}
				t.printf("app %d %s: input template %d, output template %d\n", a.ID, a.Name, a.InputTemplateID, a.OutputTemplateID)
				return nil
			})
		},
	}
}

// showTemplates prints app a's templates, or says it uses a built-in one.
func (t *tool) showTemplates(ctx context.Context, st *store.Store, a row.App) error {
	for _, x := range []struct {
		kind, builtin string
		id            int64
	}{
		{jobtemplate.KindInput, "built-in: one file given to each job, opened as \"in\"", a.InputTemplateID},
		{jobtemplate.KindOutput, "built-in: one output, opened as \"out\", of at most the job's disk bound", a.OutputTemplateID},
	} {
		if x.id == 0 {
			t.printf("%s template: %s\n", x.kind, x.builtin)
			continue
		}
		tm, err := st.JobTemplateGet(ctx, x.id)
		if err != nil {
			return err
		}
		t.printf("%s template %d (md5 %s):\n%s\n", x.kind, tm.ID, tm.MD5, tm.Body)
	}
	return nil
}

func (t *tool) fileCommand() *cli.Command {
	return &cli.Command{
		Name:  "file",
		Usage: "manage shared input files (staged once, used by many jobs as --input shared:NAME)",
		Subcommands: []*cli.Command{{
			Name: "stage",
			Usage: "stage a local file as shared file NAME; prints its physical name (NAME_<md5>) and md5. " +
				"Staging new content under NAME later leaves jobs of the old one unchanged; new jobs get the new one",
			ArgsUsage: "NAME PATH",
			Flags: []cli.Flag{&cli.BoolFlag{Name: "gzip",
				Usage: "stage a gzip'd copy too (sent to clients whose input template asks for <gzip/>)"}},
			Action: func(c *cli.Context) error {
				if c.NArg() != 2 {
					return fmt.Errorf("want two arguments, NAME and PATH (got %d)", c.NArg())
				}
				data, err := os.ReadFile(c.Args().Get(1))
				if err != nil {
					return fmt.Errorf("read shared file: %w", err)
				}
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, cfg config.Common) error {
					creator := jobs.NewCreator(st, cfg.DownloadDir, cfg.Fanout, t.now)
					f, err := creator.StageShared(ctx, c.Args().First(), data, c.Bool("gzip"))
					if err != nil {
						return err
					}
					t.printf("%s %s\n", f.Name, f.MD5)
					return nil
				})
			},
		}, {
			Name:  "list",
			Usage: "list shared files with their state and the jobs that referred to them",
			Action: func(c *cli.Context) error {
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					list, err := st.SharedFileList(ctx)
					if err != nil {
						return err
					}
					w := tabwriter.NewWriter(t.stdout, 0, 0, 2, ' ', 0)
					fmt.Fprintf(w, "NAME\tMD5\tBYTES\tGZIPPED\tSTATE\tJOBS\tLAST USED\n")
					for _, f := range list {
						fmt.Fprintf(w, "%s\t%s\t%.0f\t%.0f\t%s\t%d\t%d\n", f.Name, f.MD5, f.Nbytes, f.GzippedNbytes,
							sharedState(f.State), f.NJobs, f.LastRefTime)
					}
					return w.Flush()
				})
			},
		}},
	}
}

func sharedState(s int) string {
	switch s {
	case row.SharedFileLive:
		return "live"
	case row.SharedFileDeleting:
		return "deleting"
	case row.SharedFileDeleted:
		return "deleted"
	}
	return fmt.Sprint(s)
}
