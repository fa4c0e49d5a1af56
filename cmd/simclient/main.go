// Command simclient runs many simulated volunteer hosts in one process. With
// --clock real (the default) they speak the BOINC protocol to live
// schedulers: they register, fetch work, download, compute the demo app,
// upload, report, and some of them fail, vanish, cheat or come back after
// the deadline. Every host follows the client policies (work fetch, CPU
// scheduling with preemption, RPC back-off) over one or more projects with
// resource shares. It prints a summary line periodically; with --report it
// writes its statistics as JSON when it stops, with --report-dir the run
// report (shares achieved against resource shares, with a plot).
//
// With --clock simulated it runs a scenario file in simulated time against
// an in-process model of the servers instead, and writes the same report.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/clientpolicy"
	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/simclient"
)

const program = "simclient"

// The clocks a run can use.
const (
	clockReal      = "real"
	clockSimulated = "simulated"
)

func main() { daemon.Main(run) }

func env(name string) []string { return []string{config.EnvName(name)} }

func run(ctx context.Context, args []string) error {
	app := &cli.App{
		Name:  program,
		Usage: "simulate volunteer hosts attached to projects, against live schedulers or in simulated time",
		Flags: append(liveFlags(), simulatedFlags()...),
		// A --project value holds commas of its own.
		DisableSliceFlagSeparator: true,
		Before:                    config.LoadFile,
		Action: func(c *cli.Context) error {
			level := c.String(config.FlagLogLevel)
			switch level {
			case "debug", "info", "warn", "error":
			default:
				return fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
			}
			switch clock := c.String("clock"); clock {
			case clockReal:
				return runLive(ctx, c, level)
			case clockSimulated:
				return runSimulated(ctx, c)
			default:
				return fmt.Errorf("--clock %q: want %s or %s", clock, clockReal, clockSimulated)
			}
		},
	}
	return app.RunContext(ctx, args)
}

func strategyNames() string {
	var names []string
	for _, s := range clientpolicy.Strategies() {
		names = append(names, string(s))
	}
	return strings.Join(names, ", ")
}

// liveFlags are the flags of a --clock real run, and the clock itself.
func liveFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: config.FlagConfig, Usage: "project configuration file (YAML; keys are these flag names)", EnvVars: env(config.FlagConfig)},
		&cli.StringFlag{Name: "clock", Value: clockReal, Usage: "real: hosts talk to live schedulers in wall time; simulated: run --scenario in simulated time", EnvVars: env("clock")},
		&cli.StringFlag{Name: "url", Value: simclient.DefaultSchedulerURL, Usage: "scheduler URL of the one project, when no --project is given", EnvVars: env("url")},
		&cli.StringFlag{Name: "authenticators", Usage: "file of account keys, one per line, of the one project when no --project is given; hosts are spread round-robin over them", EnvVars: env("authenticators")},
		&cli.StringSliceFlag{Name: "project", Usage: "URL,SHARE,AUTHFILE: attach every host to this project (scheduler URL, resource share, file of account keys); URL may list several schedulers separated by spaces, tried in turn, or be master:PAGE; repeat for several projects; replaces --url and --authenticators", EnvVars: env("project")},
		&cli.StringFlag{Name: "strategy", Value: string(clientpolicy.StrategyEDF), Usage: "CPU scheduling policy: " + strategyNames(), EnvVars: env("strategy")},
		&cli.StringFlag{Name: "runtime-stat", Value: string(clientpolicy.StatAverage), Usage: "runtime statistic of the fair-share, wrr and iwrr strategies: average or median", EnvVars: env("runtime-stat")},
		&cli.DurationFlag{Name: "connect-period", Usage: "T of the work-fetch policy: a host keeps T to 2T of work (0: --buffer-per-cpu × the host's task time)", EnvVars: env("connect-period")},
		&cli.DurationFlag{Name: "sched-period", Usage: "scheduling period: when the debt and edf strategies reconsider every CPU (0: one task time of the host, the real client's ratio of a 1 h period to tasks of hours)", EnvVars: env("sched-period")},
		&cli.DurationFlag{Name: "report-after", Usage: "longest a finished task waits for a report-result session (0: report at once)", EnvVars: env("report-after")},
		&cli.Float64Flag{Name: "on-frac", Value: 1, Usage: "fraction of the time each host is on (computing and contacting projects), in (0, 1]", EnvVars: env("on-frac")},
		&cli.DurationFlag{Name: "on-period", Usage: "mean length of a host's on period when --on-frac < 1 (0: 20 × --compute-time)", EnvVars: env("on-period")},
		&cli.IntFlag{Name: "hosts", Value: simclient.DefaultHosts, Usage: "number of simulated hosts", EnvVars: env("hosts")},
		&cli.IntFlag{Name: "ncpus", Value: simclient.DefaultNCPUs, Usage: "CPUs per host (tasks run at once)", EnvVars: env("ncpus")},
		&cli.Float64Flag{Name: "flops", Value: simclient.DefaultFlops, Usage: "nominal per-CPU speed (p_fpops); each host varies ±50%", EnvVars: env("flops")},
		&cli.Float64Flag{Name: "gpu-frac", Usage: "share of hosts with one or two GPUs (NVIDIA or AMD, several models), described in <coprocs> and fetched for per resource", EnvVars: env("gpu-frac")},
		&cli.StringFlag{Name: "gpu-types", Usage: "comma-separated GPU resources the GPU hosts have: NVIDIA, ATI (empty: both)", EnvVars: env("gpu-types")},
		&cli.Float64Flag{Name: "gpu-efficiency", Value: simclient.DefaultGPUEfficiency, Usage: "fraction of a GPU's peak FLOPS a task gets (the default makes GPUs 2-15 times a default CPU)", EnvVars: env("gpu-efficiency")},
		&cli.Float64Flag{Name: "mt-frac", Usage: "share of hosts that are multi-core, with --mt-cpus CPUs and AVX2", EnvVars: env("mt-frac")},
		&cli.IntFlag{Name: "mt-cpus", Value: simclient.DefaultMTCPUs, Usage: "CPUs of a multi-core host", EnvVars: env("mt-cpus")},
		&cli.DurationFlag{Name: "activity-window", Usage: "time constant over which a host measures the fraction of time it is on (0: 5 × its mean on/off cycle)", EnvVars: env("activity-window")},
		&cli.StringFlag{Name: "master-url", Usage: "master page of the one project: hosts read its <scheduler> links (instead of --url), again after 10 failed RPCs and every --master-reread", EnvVars: env("master-url")},
		&cli.DurationFlag{Name: "master-reread", Usage: "how often a host reads the master page again (0: 1 day × --backoff-scale)", EnvVars: env("master-reread")},
		&cli.Float64Flag{Name: "fail-frac", Usage: "share of hosts that fail every task (state 3, exit_status 1)", EnvVars: env("fail-frac")},
		&cli.Float64Flag{Name: "vanish-frac", Usage: "share of hosts that take work and never contact the server again", EnvVars: env("vanish-frac")},
		&cli.Float64Flag{Name: "cheat-frac", Usage: "share of hosts that upload a plausible but wrong output", EnvVars: env("cheat-frac")},
		&cli.Float64Flag{Name: "late-frac", Usage: "share of hosts that go offline with their work and upload and report it only after its deadline", EnvVars: env("late-frac")},
		&cli.Float64Flag{Name: "trickle-frac", Usage: "share of tasks whose app sends a trickle-up message (variety progress, with its CPU time) when it finishes computing", EnvVars: env("trickle-frac")},
		&cli.DurationFlag{Name: "late-by", Value: simclient.DefaultLateBy, Usage: "a late host returns a task its deadline plus this × [1, 2) after", EnvVars: env("late-by")},
		&cli.StringFlag{Name: "ack-log", Usage: "append a line per acknowledged result to this file: <result> <host kind> <success|error> <on_time|late>", EnvVars: env("ack-log")},
		&cli.DurationFlag{Name: "compute-time", Value: simclient.DefaultComputeTime, Usage: "simulated CPU time of one task on a host of speed --flops", EnvVars: env("compute-time")},
		&cli.IntFlag{Name: "buffer-per-cpu", Value: 2, Usage: "tasks per CPU in the default connect period (a host holds this to twice this many per CPU)", EnvVars: env("buffer-per-cpu")},
		&cli.DurationFlag{Name: "duration", Usage: "stop after this long (0: until interrupted)", EnvVars: env("duration")},
		&cli.Int64Flag{Name: "max-rpcs", Usage: "stop after this many scheduler RPCs in total (0: no bound)", EnvVars: env("max-rpcs")},
		&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of host speeds, kinds and jitter", EnvVars: env("seed")},
		&cli.Float64Flag{Name: "backoff-scale", Value: 1, Usage: "multiplies the real client's back-offs (RPC 1 min..4 h, work fetch 10 min..1 day, transfers 2 min..6 h); 0.001667 turns 1 min into 100 ms", EnvVars: env("backoff-scale")},
		&cli.DurationFlag{Name: "backoff-max", Usage: "cap on every scaled back-off (0: none)", EnvVars: env("backoff-max")},
		&cli.IntFlag{Name: "transfer-attempts", Value: 10, Usage: "tries of one download or upload before it fails the task", EnvVars: env("transfer-attempts")},
		&cli.DurationFlag{Name: "http-timeout", Value: time.Minute, Usage: "time limit of one HTTP exchange", EnvVars: env("http-timeout")},
		&cli.DurationFlag{Name: "summary-every", Value: 10 * time.Second, Usage: "period of the info-level summary line (0: never)", EnvVars: env("summary-every")},
		&cli.StringFlag{Name: "report", Usage: "write the statistics as JSON to this file on exit", EnvVars: env("report")},
		&cli.StringFlag{Name: "report-dir", Usage: "write the run report there on exit: report.json, report.txt, shares.svg", EnvVars: env("report-dir")},
		&cli.DurationFlag{Name: "sample-every", Usage: "interval of the run report's share-over-time series (0: --duration / 100, or 10s)", EnvVars: env("sample-every")},
		&cli.StringFlag{Name: config.FlagLogLevel, Value: "info", Usage: "log level: debug, info, warn, error", EnvVars: env(config.FlagLogLevel)},
	}
}

// liveOptions turns the flags of a --clock real run into simclient options.
func liveOptions(c *cli.Context) (simclient.Options, error) {
	strategy, err := clientpolicy.ParseStrategy(c.String("strategy"))
	if err != nil {
		return simclient.Options{}, fmt.Errorf("--strategy: %w", err)
	}
	stat, err := clientpolicy.ParseRuntimeStat(c.String("runtime-stat"))
	if err != nil {
		return simclient.Options{}, fmt.Errorf("--runtime-stat: %w", err)
	}
	if f := c.Float64("on-frac"); !(f > 0 && f <= 1) {
		return simclient.Options{}, fmt.Errorf("--on-frac %g: want more than 0, at most 1", f)
	}
	summary := c.Duration("summary-every")
	if summary == 0 {
		summary = -1
	}
	o := simclient.Options{
		Strategy:         strategy,
		RuntimeStat:      stat,
		ConnectPeriod:    c.Duration("connect-period"),
		SchedPeriod:      c.Duration("sched-period"),
		ReportAfter:      c.Duration("report-after"),
		OnFrac:           c.Float64("on-frac"),
		OnPeriod:         c.Duration("on-period"),
		ReportDir:        c.String("report-dir"),
		SampleEvery:      c.Duration("sample-every"),
		Hosts:            c.Int("hosts"),
		NCPUs:            c.Int("ncpus"),
		Flops:            c.Float64("flops"),
		GPUFrac:          c.Float64("gpu-frac"),
		GPUEfficiency:    c.Float64("gpu-efficiency"),
		GPUTypes:         splitList(c.String("gpu-types")),
		MTFrac:           c.Float64("mt-frac"),
		MTCPUs:           c.Int("mt-cpus"),
		ActivityWindow:   c.Duration("activity-window"),
		MasterReread:     c.Duration("master-reread"),
		FailFrac:         c.Float64("fail-frac"),
		VanishFrac:       c.Float64("vanish-frac"),
		CheatFrac:        c.Float64("cheat-frac"),
		LateFrac:         c.Float64("late-frac"),
		TrickleFrac:      c.Float64("trickle-frac"),
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
	}
	if specs := c.StringSlice("project"); len(specs) > 0 {
		for _, spec := range specs {
			p, err := simclient.ParseProject(spec)
			if err != nil {
				return simclient.Options{}, fmt.Errorf("--project: %w", err)
			}
			o.Projects = append(o.Projects, p)
		}
		return o, nil
	}
	if c.String("authenticators") == "" {
		return simclient.Options{}, errors.New("--authenticators is required (or give --project)")
	}
	keys, err := simclient.ReadAuthenticatorsFile(c.String("authenticators"))
	if err != nil {
		return simclient.Options{}, err
	}
	o.SchedulerURL, o.Authenticators = c.String("url"), keys
	if m := c.String("master-url"); m != "" {
		o.SchedulerURL = ""
		o.Projects = []simclient.Project{{MasterURL: m, Authenticators: keys}}
	}
	return o, nil
}

// splitList reads a comma-separated flag value; empty items are dropped.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// runLive runs hosts against live schedulers until ctx ends or --duration
// or --max-rpcs stops them, then writes the reports asked for.
func runLive(ctx context.Context, c *cli.Context, level string) error {
	opts, err := liveOptions(c)
	if err != nil {
		return err
	}
	opts.Log = daemon.NewLogger(program, level)
	var ackLog *os.File
	if path := c.String("ack-log"); path != "" {
		ackLog, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("open ack log: %w", err)
		}
		defer ackLog.Close()
		opts.AckLog = ackLog
	}
	stats, err := simclient.Run(ctx, opts)
	if path := c.String("report"); path != "" && stats.Hosts > 0 {
		// The statistics are worth keeping even if the report directory
		// could not be written.
		if werr := stats.WriteFile(path); werr != nil {
			err = errors.Join(err, werr)
		}
	}
	if err != nil {
		return err
	}
	if ackLog != nil {
		if err := ackLog.Close(); err != nil {
			return fmt.Errorf("close ack log: %w", err)
		}
	}
	return nil
}
