// Command bench runs the paper's benchmark (issue 6) against the built
// programs: the six phases of 2 × --jobs instances, each measured on its own,
// reported as a table and as JSON (`make bench`).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/paperbench"
)

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	app := &cli.App{
		Name:  "bench",
		Usage: "run the paper's benchmark: creation, dispatch, validation, assimilation, file deletion, purge",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "jobs", Value: 50000, Usage: "jobs to run through (two instances each)"},
			&cli.StringFlag{Name: "out", Value: "bench-results/paper.json", Usage: "JSON report; the table goes beside it as .txt"},
			&cli.StringFlag{Name: "dsn", Usage: "use this database server (DSN without database name; database taskserver_bench is made and dropped) instead of a private MariaDB; its CPU then counts every client of that server, so use an otherwise idle one"},
			&cli.StringFlag{Name: "bin-dir", Usage: "directory of the built programs (default: this program's directory)"},
			&cli.StringFlag{Name: "project-dir", Usage: "project directory, kept after the run (default: a temporary one, removed unless the run fails)"},
			&cli.StringFlag{Name: "phases", Usage: "run only the phases up to and including this one: " + strings.Join(paperbench.PhaseNames, ", ")},
			&cli.DurationFlag{Name: "phase-timeout", Value: 30 * time.Minute, Usage: "fail a phase that has not ended after this long"},
			&cli.IntFlag{Name: "conns", Value: 64, Usage: "load generator: concurrent HTTP connections"},
			&cli.IntFlag{Name: "hosts-per-conn", Value: 2, Usage: "load generator: simulated hosts served in turn by each connection (one account each)"},
			&cli.StringFlag{Name: "db-log-file-size", Value: "1G", Usage: "the private MariaDB's innodb_log_file_size, as a production server is set up (durability is unchanged); empty: MariaDB's default, 96M, which the dispatch phase's writes wrap several times"},
		},
		Action: func(c *cli.Context) error { return bench(ctx, c) },
	}
	return app.RunContext(ctx, args)
}

func bench(ctx context.Context, c *cli.Context) error {
	bin := c.String("bin-dir")
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find the programs: %w", err)
		}
		bin = filepath.Dir(exe)
	}
	phases := 0
	if p := c.String("phases"); p != "" {
		i := slices.Index(paperbench.PhaseNames, p)
		if i < 0 {
			return fmt.Errorf("--phases %q: want one of %s", p, strings.Join(paperbench.PhaseNames, ", "))
		}
		phases = i + 1
	}
	r, runErr := paperbench.Run(ctx, paperbench.Options{
		BinDir:        bin,
		Jobs:          c.Int("jobs"),
		DSN:           c.String("dsn"),
		ProjectDir:    c.String("project-dir"),
		Phases:        phases,
		PhaseTimeout:  c.Duration("phase-timeout"),
		Conns:         c.Int("conns"),
		HostsPerConn:  c.Int("hosts-per-conn"),
		DBLogFileSize: c.String("db-log-file-size"),
		Out:           os.Stdout,
	})
	if r == nil {
		return runErr
	}
	fmt.Println()
	if err := r.WriteTable(os.Stdout); err != nil {
		return errors.Join(runErr, err)
	}
	if err := r.Write(c.String("out")); err != nil {
		return errors.Join(runErr, err)
	}
	fmt.Printf("report written to %s\n", c.String("out"))
	return runErr
}
