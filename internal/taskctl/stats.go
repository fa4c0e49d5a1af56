package taskctl

import (
	"context"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/statsexport"
	"github.com/taskserver/taskserver/internal/store"
)

func (t *tool) statsCommand() *cli.Command {
	return &cli.Command{
		Name:  "stats",
		Usage: "statistics for the volunteer statistics sites",
		Subcommands: []*cli.Command{{
			Name: "export",
			Usage: "write the statistics dump now (BOINC's db_dump files: user.gz, team.gz, host.gz, user_deleted.gz, " +
				"host_deleted.gz, tables.xml), replacing the one in --out only once the new one is complete; the db_dump " +
				"daemon does the same every --interval",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "out", Value: "html/stats", Usage: "directory the dump is published in (relative to the project directory)"},
				&cli.IntFlag{Name: "batch", Value: 5000, Usage: "rows read per query"},
			},
			Action: func(c *cli.Context) error {
				if c.Int("batch") < 1 {
					return fmt.Errorf("--batch %d: want at least 1", c.Int("batch"))
				}
				if c.String("out") == "" {
					return fmt.Errorf("--out is empty")
				}
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, cfg config.Common) error {
					dir := cfg.Path(c.String("out"))
					start := time.Now()
					res, err := statsexport.Export(ctx, st, dir, c.Int("batch"), t.now())
					if err != nil {
						return err
					}
					t.printf("statistics exported to %s: %d users, %d teams, %d hosts, total credit %.0f, %d bytes, in %s\n",
						dir, res.Users, res.Teams, res.Hosts, res.TotalCredit, res.Bytes, time.Since(start).Round(time.Millisecond))
					return nil
				})
			},
		}},
	}
}
