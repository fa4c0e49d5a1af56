// Command localproject sets up and runs a complete local project — database,
// schema, demo app, users, keys, every daemon as a process and simulated
// volunteers — prints progress while work flows, and at the end a summary
// with the invariant checks. It exits non-zero if an invariant broke.
// `make run` runs it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/localproject"
	"github.com/taskserver/taskserver/internal/store"
)

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	app := &cli.App{
		Name:  "localproject",
		Usage: "run a complete local project with simulated volunteers",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "bin-dir", Value: "bin", Usage: "directory of the built programs"},
			&cli.StringFlag{Name: "server-dsn", Value: "root@tcp(127.0.0.1:3306)/", EnvVars: []string{"TASKSERVER_DB_SERVER"}, Usage: "database server (DSN without database name)"},
			&cli.StringFlag{Name: "database", Value: "taskserver_local", Usage: "project database name"},
			&cli.BoolFlag{Name: "fresh", Value: true, Usage: "start from an empty database and project directory"},
			&cli.StringFlag{Name: "project-dir", Value: "project", Usage: "project directory"},
			&cli.DurationFlag{Name: "duration", Usage: "stop after this long (0: until interrupted)"},
			&cli.IntFlag{Name: "jobs", Usage: "total jobs to create (0: keep a backlog forever)"},
			&cli.BoolFlag{Name: "until-done", Usage: "with --jobs: stop when every job is finished and purged"},
			&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "with --until-done: fail after this long"},
			&cli.IntFlag{Name: "hosts", Value: 40, Usage: "simulated volunteer hosts"},
			&cli.IntFlag{Name: "users", Value: 10, Usage: "volunteer accounts the hosts are spread over"},
			&cli.Float64Flag{Name: "fail-frac", Value: 0.05, Usage: "share of hosts whose tasks all fail"},
			&cli.Float64Flag{Name: "vanish-frac", Value: 0.05, Usage: "share of hosts that take work and never come back"},
			&cli.Float64Flag{Name: "cheat-frac", Value: 0.05, Usage: "share of hosts that return wrong output"},
			&cli.Float64Flag{Name: "trickle-frac", Value: 0.2, Usage: "share of tasks whose app sends a trickle-up message"},
			&cli.DurationFlag{Name: "delay-bound", Value: 30 * time.Second, Usage: "job deadline (short, so lost work is retried during the run)"},
			&cli.DurationFlag{Name: "compute-time", Value: time.Second, Usage: "simulated compute time per task"},
			&cli.StringFlag{Name: "summary-json", Usage: "also write the summary as JSON to this file"},
		},
		Commands: []*cli.Command{{
			Name:  "dbping",
			Usage: "exit 0 if a database server answers at --server-dsn",
			Action: func(c *cli.Context) error {
				pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				st, err := store.Open(pctx, c.String("server-dsn"), store.Options{MaxOpenConns: 1})
				if err != nil {
					return err
				}
				return st.Close()
			},
		}},
		Action: func(c *cli.Context) error {
			opts := localproject.Options{
				BinDir: c.String("bin-dir"), ServerDSN: c.String("server-dsn"), Database: c.String("database"),
				Fresh: c.Bool("fresh"), ProjectDir: c.String("project-dir"), Duration: c.Duration("duration"),
				Jobs: c.Int("jobs"), UntilDone: c.Bool("until-done"), Timeout: c.Duration("timeout"),
				Hosts: c.Int("hosts"), Users: c.Int("users"), FailFrac: c.Float64("fail-frac"),
				VanishFrac: c.Float64("vanish-frac"), CheatFrac: c.Float64("cheat-frac"), TrickleFrac: c.Float64("trickle-frac"),
				DelayBound: c.Duration("delay-bound"), ComputeTime: c.Duration("compute-time"), Out: os.Stdout,
			}
			sum, err := localproject.Run(ctx, opts)
			fmt.Println()
			fmt.Print(sum.String())
			if path := c.String("summary-json"); path != "" {
				b, _ := json.MarshalIndent(sum, "", "  ")
				if werr := os.WriteFile(path, b, 0o644); werr != nil {
					err = errors.Join(err, werr)
				}
			}
			if err != nil {
				return err
			}
			if !sum.OK() {
				return fmt.Errorf("%d invariant(s) broke", len(sum.Violations))
			}
			return nil
		},
	}
	return app.RunContext(ctx, args)
}
