// Command benchscale measures how the server's costs grow with its tables
// (issue 22, `make bench-scale`): for each --scale it fills a private
// MariaDB with that many result rows in a real project's proportions and
// measures dispatch, the feeder, each daemon and the status reads among
// them, writing report.json, report.txt and cpu.svg into --out.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/scalebench"
)

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	return newApp(func(c *cli.Context) error { return bench(ctx, c) }).RunContext(ctx, args)
}

// newApp is the command line, running action.
func newApp(action cli.ActionFunc) *cli.App {
	return &cli.App{
		Name:  "benchscale",
		Usage: "measure costs against table size: fill a private MariaDB to each size and measure every daemon there",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "scale", Value: "100000", Usage: "result-table sizes, separated by spaces or commas (\"100000 1000000\" makes a curve)"},
			&cli.StringFlag{Name: "out", Value: "bench-results/scale", Usage: "directory for report.json, report.txt and cpu.svg"},
			&cli.StringFlag{Name: "bin-dir", Usage: "directory of the built programs (default: this program's directory)"},
			&cli.Float64Flag{Name: "dispatch-seconds", Value: 10, Usage: "how long each dispatch load level runs"},
			&cli.DurationFlag{Name: "phase-timeout", Value: 20 * time.Minute, Usage: "fail a daemon's phase that has not ended after this long"},
			&cli.StringFlag{Name: "buffer-pool", Value: "1G", Usage: "the private MariaDB's innodb_buffer_pool_size (without --pools)"},
			&cli.StringFlag{Name: "pools", Usage: "sweep the buffer pool: innodb_buffer_pool_size values, separated by spaces or commas (\"256M 1G 4G\"); " +
				"each size is filled once and measured under each pool on a copy, the main figures are the largest pool's, " +
				"and the report gives each phase's working set (empty: one run with --buffer-pool)"},
			&cli.BoolFlag{Name: "statements", Usage: "run the private MariaDB with performance_schema and report, per phase and dispatch level, " +
				"the statements that took the most of its time (the instrumentation costs CPU: compare such runs with each other only)"},
		},
		Action: action,
	}
}

// parseSizes reads --scale.
func parseSizes(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' }) {
		n, err := strconv.ParseFloat(f, 64) // 1e6 is accepted
		if err != nil || n < 1000 || n != float64(int64(n)) {
			return nil, fmt.Errorf("--scale %q: %q is not a whole number of result rows of at least 1000", s, f)
		}
		out = append(out, int64(n))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--scale %q: no size given", s)
	}
	return out, nil
}

// options reads the command line into the run's options.
func options(c *cli.Context) (scalebench.Options, error) {
	sizes, err := parseSizes(c.String("scale"))
	if err != nil {
		return scalebench.Options{}, err
	}
	if c.Float64("dispatch-seconds") <= 0 {
		return scalebench.Options{}, fmt.Errorf("--dispatch-seconds %g: want more than 0", c.Float64("dispatch-seconds"))
	}
	pools, err := scalebench.ParsePools(c.String("pools"))
	if err != nil {
		return scalebench.Options{}, fmt.Errorf("--pools: %w", err)
	}
	bin := c.String("bin-dir")
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return scalebench.Options{}, fmt.Errorf("find the programs: %w", err)
		}
		bin = filepath.Dir(exe)
	}
	return scalebench.Options{BinDir: bin, Sizes: sizes, DispatchSeconds: c.Float64("dispatch-seconds"),
		PhaseTimeout: c.Duration("phase-timeout"), BufferPool: c.String("buffer-pool"), Pools: pools,
		Statements: c.Bool("statements"), Out: os.Stdout}, nil
}

func bench(ctx context.Context, c *cli.Context) error {
	o, err := options(c)
	if err != nil {
		return err
	}
	r, runErr := scalebench.Run(ctx, o)
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
