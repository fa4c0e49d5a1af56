package taskctl

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// maxKnownAnswerBytes is what a known_answer MEDIUMBLOB column holds.
const maxKnownAnswerBytes = 1<<24 - 1

func (t *tool) knownAnswerCommand() *cli.Command {
	return &cli.Command{
		Name: "known-answer",
		Usage: "manage known-answer inputs: a share of an app's jobs (app set --known-answer-fraction) are copies of " +
			"them, and a host whose output differs from the known one is caught",
		Subcommands: []*cli.Command{{
			Name:  "add",
			Usage: "add an input with its correct output; prints its id",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "app", Required: true, Usage: "app the input is for"},
				&cli.StringFlag{Name: "name", Required: true, Usage: "name, unique within the app"},
				&cli.StringFlag{Name: "input", Required: true, Usage: "input file"},
				&cli.StringFlag{Name: "output", Required: true, Usage: "the output the app must produce for it"},
			},
			Action: func(c *cli.Context) error {
				in, err := readLimited(c.String("input"), "--input")
				if err != nil {
					return err
				}
				out, err := readLimited(c.String("output"), "--output")
				if err != nil {
					return err
				}
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					app, err := st.AppGetByName(ctx, c.String("app"))
					if err != nil {
						return notFoundHint(err, "add it with: taskctl app add")
					}
					id, err := st.KnownAnswerInsert(ctx, row.KnownAnswer{CreateTime: t.now().Unix(), AppID: app.ID,
						Name: c.String("name"), Input: in, Output: out})
					if err != nil {
						return err
					}
					t.printf("known_answer %d %s\n", id, c.String("name"))
					if app.KnownAnswerFraction == 0 {
						t.notef("app %s mixes in no known-answer jobs yet: taskctl app set --name %s --known-answer-fraction 0.05\n",
							app.Name, app.Name)
					}
					return nil
				})
			},
		}, {
			Name:  "list",
			Usage: "list an app's known-answer inputs",
			Flags: []cli.Flag{&cli.StringFlag{Name: "app", Required: true, Usage: "app name"}},
			Action: func(c *cli.Context) error {
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					app, err := st.AppGetByName(ctx, c.String("app"))
					if err != nil {
						return notFoundHint(err, "add it with: taskctl app add")
					}
					list, err := st.KnownAnswerList(ctx, app.ID)
					if err != nil {
						return err
					}
					w := tabwriter.NewWriter(t.stdout, 0, 0, 2, ' ', 0)
					fmt.Fprintf(w, "ID\tNAME\tCREATED\n")
					for _, k := range list {
						fmt.Fprintf(w, "%d\t%s\t%d\n", k.ID, k.Name, k.CreateTime)
					}
					return w.Flush()
				})
			},
		}},
	}
}

// readLimited reads a file that must fit a known_answer column.
func readLimited(path, flag string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if fi.Size() > maxKnownAnswerBytes {
		return nil, fmt.Errorf("%s %s: %d bytes, at most %d allowed", flag, path, fi.Size(), maxKnownAnswerBytes)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return b, nil
}
