// Command simclient runs many simulated volunteer hosts, in one process,
// against a project's scheduler: they register, fetch work, download,
// compute the demo app, upload, report, and some of them fail, vanish,
// cheat or come back after the deadline. It prints a summary line periodically and, with --report, writes
// its statistics as JSON when it stops.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/simclient"
)

const program = "simclient"

func main() { daemon.Main(run) }

func env(name string) []string { return []string{config.EnvName(name)} }

func run(ctx context.Context, args []string) error {
	app := &cli.App{
		Name:  program,
		Usage: "simulate volunteer hosts attached to a project",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: config.FlagConfig, Usage: "project configuration file (YAML; keys are these flag names)", EnvVars: env(config.FlagConfig)},
			&cli.StringFlag{Name: "url", Value: simclient.DefaultSchedulerURL, Usage: "scheduler URL", EnvVars: env("url")},
			&cli.StringFlag{Name: "authenticators", Usage: "file of account keys, one per line; hosts are spread round-robin over them (required)", EnvVars: env("authenticators")},
			&cli.IntFlag{Name: "hosts", Value: simclient.DefaultHosts, Usage: "number of simulated hosts", EnvVars: env("hosts")},
			&cli.IntFlag{Name: "ncpus", Value: simclient.DefaultNCPUs, Usage: "CPUs per host (tasks run at once)", EnvVars: env("ncpus")},
			&cli.Float64Flag{Name: "flops", Value: simclient.DefaultFlops, Usage: "nominal per-CPU speed (p_fpops); each host varies ±50%", EnvVars: env("flops")},
			&cli.Float64Flag{Name: "fail-frac", Usage: "share of hosts that fail every task (state 3, exit_status 1)", EnvVars: env("fail-frac")},
			&cli.Float64Flag{Name: "vanish-frac", Usage: "share of hosts that take work and never contact the server again", EnvVars: env("vanish-frac")},
			&cli.Float64Flag{Name: "cheat-frac", Usage: "share of hosts that upload a plausible but wrong output", EnvVars: env("cheat-frac")},
			&cli.Float64Flag{Name: "late-frac", Usage: "share of hosts that go offline with their work and upload and report it only after its deadline", EnvVars: env("late-frac")},
			&cli.DurationFlag{Name: "late-by", Value: simclient.DefaultLateBy, Usage: "a late host returns a task its deadline plus this × [1, 2) after", EnvVars: env("late-by")},
			&cli.StringFlag{Name: "ack-log", Usage: "append a line per acknowledged result to this file: <result> <host kind> <success|error> <on_time|late>", EnvVars: env("ack-log")},
			&cli.DurationFlag{Name: "compute-time", Value: simclient.DefaultComputeTime, Usage: "simulated run time of one task on a host of speed --flops", EnvVars: env("compute-time")},
			&cli.IntFlag{Name: "buffer-per-cpu", Value: 2, Usage: "tasks per CPU a host asks to hold when a CPU is idle", EnvVars: env("buffer-per-cpu")},
			&cli.DurationFlag{Name: "duration", Usage: "stop after this long (0: until interrupted)", EnvVars: env("duration")},
			&cli.Int64Flag{Name: "max-rpcs", Usage: "stop after this many scheduler RPCs in total (0: no bound)", EnvVars: env("max-rpcs")},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of host speeds, kinds and jitter", EnvVars: env("seed")},
			&cli.Float64Flag{Name: "backoff-scale", Value: 1, Usage: "multiplies the real client's back-offs (RPC 1 min..4 h, work fetch 10 min..1 day, transfers 2 min..6 h); 0.001667 turns 1 min into 100 ms", EnvVars: env("backoff-scale")},
			&cli.DurationFlag{Name: "backoff-max", Usage: "cap on every scaled back-off (0: none)", EnvVars: env("backoff-max")},
			&cli.IntFlag{Name: "transfer-attempts", Value: 10, Usage: "tries of one download or upload before it fails the task", EnvVars: env("transfer-attempts")},
			&cli.DurationFlag{Name: "http-timeout", Value: time.Minute, Usage: "time limit of one HTTP exchange", EnvVars: env("http-timeout")},
			&cli.DurationFlag{Name: "summary-every", Value: 10 * time.Second, Usage: "period of the info-level summary line (0: never)", EnvVars: env("summary-every")},
			&cli.StringFlag{Name: "report", Usage: "write the statistics as JSON to this file on exit", EnvVars: env("report")},
			&cli.StringFlag{Name: config.FlagLogLevel, Value: "info", Usage: "log level: debug, info, warn, error", EnvVars: env(config.FlagLogLevel)},
		},
		Before: config.LoadFile,
		Action: func(c *cli.Context) error {
			level := c.String(config.FlagLogLevel)
			switch level {
			case "debug", "info", "warn", "error":
			default:
				return fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
			}
			if c.String("authenticators") == "" {
				return errors.New("--authenticators is required")
			}
			keys, err := simclient.ReadAuthenticatorsFile(c.String("authenticators"))
			if err != nil {
				return err
			}
			var ackLog *os.File
			if path := c.String("ack-log"); path != "" {
				ackLog, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
				if err != nil {
					return fmt.Errorf("open ack log: %w", err)
				}
				defer ackLog.Close()
			}
			summary := c.Duration("summary-every")
			if summary == 0 {
				summary = -1
			}
			stats, err := simclient.Run(ctx, simclient.Options{
				SchedulerURL:     c.String("url"),
				Authenticators:   keys,
				Hosts:            c.Int("hosts"),
				NCPUs:            c.Int("ncpus"),
				Flops:            c.Float64("flops"),
				FailFrac:         c.Float64("fail-frac"),
				VanishFrac:       c.Float64("vanish-frac"),
				CheatFrac:        c.Float64("cheat-frac"),
				LateFrac:         c.Float64("late-frac"),
				LateBy:           c.Duration("late-by"),
				ComputeTime:      c.Duration("compute-time"),
				BufferPerCPU:     c.Int("buffer-per-cpu"),
				Duration:         c.Duration("duration"),
				MaxRPCs:          c.Int64("max-rpcs"),
				Seed:             c.Uint64("seed"),
				BackoffScale:     c.Float64("backoff-scale"),
				BackoffMax:       c.Duration("backoff-max"),
				TransferAttempts: c.Int("transfer-attempts"),
				HTTPTimeout:      c.Duration("http-timeout"),
				SummaryEvery:     summary,
				Log:              daemon.NewLogger(program, level),
				AckLog:           writerOrNil(ackLog),
			})
			if err != nil {
				return err
			}
			if path := c.String("report"); path != "" {
				if err := stats.WriteFile(path); err != nil {
					return err
				}
			}
			if ackLog != nil {
				if err := ackLog.Close(); err != nil {
					return fmt.Errorf("close ack log: %w", err)
				}
			}
			return nil
		},
	}
	return app.RunContext(ctx, args)
}

// writerOrNil keeps a nil *os.File from becoming a non-nil io.Writer.
func writerOrNil(f *os.File) io.Writer {
	if f == nil {
		return nil
	}
	return f
}
