// Command chaos runs the fault-injection suite (issue 8, `make chaos`): a
// project of every daemon and simulated hosts runs --jobs jobs while daemons
// are killed with SIGKILL, the database server restarts, the upload disk
// fills and the scheduler is flooded; then it prints the faults and the
// checked outcomes and writes <out>/report.json. It exits non-zero when the
// run did not finish or any outcome count is above 0. `chaos load` is the
// load test (`make load`): the same project under a steady stream of hosts
// with the database connections cut once, its memory bound checked.
// `chaos cluster` is the cluster run (`make cluster`): the same project on a
// private three-node MariaDB Galera cluster with two feeder/scheduler
// pairs, a database node killed and rejoined mid-run; it writes
// report.json and report.txt.
// `chaos record` is the assimilation handler the run gives the assimilator.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/chaos"
	"github.com/taskserver/taskserver/internal/daemon"
)

func main() { daemon.Main(run) }

func run(ctx context.Context, args []string) error {
	app := &cli.App{
		Name:  "chaos",
		Usage: "run jobs through a local project under faults and check that nothing was lost",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "jobs", Value: 5000, Usage: "jobs to run (two instances each)"},
			&cli.StringFlag{Name: "out", Value: "chaos-report", Usage: "directory of report.json, the logs and the project"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed of the fault schedule and the hosts (0: from the clock; printed)"},
			&cli.IntFlag{Name: "kills", Value: 100, Usage: "SIGKILLs of daemons to inject in total"},
			&cli.DurationFlag{Name: "kill-every", Value: time.Second, Usage: "mean time between two kills"},
			&cli.DurationFlag{Name: "restart-after", Value: time.Second, Usage: "longest a killed daemon stays down"},
			&cli.DurationFlag{Name: "db-down", Value: 3 * time.Second, Usage: "how long the database server stays down after its kill"},
			&cli.DurationFlag{Name: "disk-full-for", Value: 10 * time.Second, Usage: "how long the upload disk stays full"},
			&cli.IntFlag{Name: "burst-hosts", Value: 200, Usage: "extra hosts starting at once to overload the scheduler (0: no overload)"},
			&cli.DurationFlag{Name: "burst-for", Value: 15 * time.Second, Usage: "how long the extra hosts run"},
			&cli.IntFlag{Name: "hosts", Value: 40, Usage: "steady simulated hosts"},
			&cli.Float64Flag{Name: "fail-frac", Value: chaos.DefaultFailFrac, Usage: "share of hosts failing every task (0: none)"},
			&cli.DurationFlag{Name: "delay-bound", Value: 30 * time.Second, Usage: "each job's deadline (lost instances are replaced after it)"},
			&cli.DurationFlag{Name: "timeout", Value: 40 * time.Minute, Usage: "give up when the jobs are not all finished after this long"},
			&cli.StringFlag{Name: "bin-dir", Usage: "directory of the built programs (default: this program's directory)"},
		},
		Action: func(c *cli.Context) error { return runChaos(ctx, c) },
		Commands: []*cli.Command{{
			Name: "load",
			Usage: "load the scheduler with a steady stream of hosts for --duration, cut every database connection in the middle, " +
				"check that memory and goroutines stay bounded and that nothing was lost (make load)",
			Flags: []cli.Flag{
				&cli.DurationFlag{Name: "duration", Value: 5 * time.Minute, Usage: "how long the hosts load the scheduler (then generation stops and the jobs drain)"},
				&cli.StringFlag{Name: "out", Value: "load-report", Usage: "directory of report.json, the logs and the project"},
				&cli.DurationFlag{Name: "db-cut", Value: 10 * time.Second, Usage: "how long every database connection stays cut, from the middle of the run"},
				&cli.IntFlag{Name: "hosts", Value: 400, Usage: "simulated hosts"},
				&cli.IntFlag{Name: "users", Value: 40, Usage: "accounts the hosts are spread over"},
				&cli.IntFlag{Name: "ncpus", Value: 1, Usage: "CPUs per host"},
				&cli.DurationFlag{Name: "compute-time", Value: 4 * time.Second, Usage: "one task's CPU time on a host"},
				&cli.DurationFlag{Name: "next-rpc-delay", Value: time.Second, Usage: "the scheduler's next_rpc_delay: how often each host comes back"},
				&cli.Float64Flag{Name: "fail-frac", Value: chaos.DefaultFailFrac, Usage: "share of hosts failing every task (0: none)"},
				&cli.DurationFlag{Name: "delay-bound", Value: 30 * time.Second, Usage: "each job's deadline"},
				&cli.DurationFlag{Name: "drain-timeout", Value: 10 * time.Minute, Usage: "give up when the jobs are not all purged this long after the load"},
				&cli.Uint64Flag{Name: "seed", Usage: "seed of the hosts (0: from the clock; printed)"},
				&cli.StringFlag{Name: "bin-dir", Usage: "directory of the built programs (default: this program's directory)"},
			},
			Action: func(c *cli.Context) error { return runLoad(ctx, c) },
		}, {
			Name: "cluster",
			Usage: "run the project on a private three-node MariaDB Galera cluster with two feeder/scheduler pairs, kill a database node " +
				"with SIGKILL mid-run and bring it back (IST), and check that nothing was lost (make cluster); --single runs the same on one server",
			Flags: []cli.Flag{
				&cli.IntFlag{Name: "jobs", Value: 3000, Usage: "jobs to run (two instances each)"},
				&cli.StringFlag{Name: "out", Value: "cluster-report", Usage: "directory of report.json, report.txt, the logs and the project"},
				&cli.Uint64Flag{Name: "seed", Usage: "seed of the fault schedule and the hosts (0: from the clock; printed)"},
				&cli.IntFlag{Name: "nodes", Value: 3, Usage: "Galera nodes (at least 3)"},
				&cli.BoolFlag{Name: "single", Usage: "one plain private MariaDB server instead of a cluster, no node kill: the capacity baseline"},
				&cli.IntFlag{Name: "pairs", Value: 2, Usage: "feeder/scheduler pairs (feeders --mod pairs --mod-index i), hosts spread over their schedulers"},
				&cli.DurationFlag{Name: "node-down", Value: 10 * time.Second, Usage: "how long the killed database node stays down"},
				&cli.Float64Flag{Name: "kill-at", Value: 0.3, Usage: "kill the node once this share of the jobs reached the assimilation handler"},
				&cli.BoolFlag{Name: "failover-dsns", Value: true, Usage: "give every daemon every node's DSN (--db-dsn a,b,c), its own node first, so it fails over when its node dies (false: its own node only)"},
				&cli.IntFlag{Name: "kills", Value: 20, Usage: "SIGKILLs of daemons besides the node kill (0: none)"},
				&cli.DurationFlag{Name: "kill-every", Value: time.Second, Usage: "mean time between two daemon kills"},
				&cli.DurationFlag{Name: "restart-after", Value: time.Second, Usage: "longest a killed daemon stays down"},
				&cli.IntFlag{Name: "burst-hosts", Value: 0, Usage: "extra hosts starting at once to overload the first scheduler (0: no overload)"},
				&cli.IntFlag{Name: "hosts", Value: 40, Usage: "steady simulated hosts, spread over the schedulers"},
				&cli.Float64Flag{Name: "fail-frac", Value: chaos.DefaultFailFrac, Usage: "share of hosts failing every task (0: none)"},
				&cli.DurationFlag{Name: "delay-bound", Value: 30 * time.Second, Usage: "each job's deadline (lost instances are replaced after it)"},
				&cli.DurationFlag{Name: "timeout", Value: 40 * time.Minute, Usage: "give up when the jobs are not all finished after this long"},
				&cli.StringFlag{Name: "bin-dir", Usage: "directory of the built programs (default: this program's directory)"},
			},
			Action: func(c *cli.Context) error { return runCluster(ctx, c) },
		}, {
			Name:      "record",
			Usage:     "assimilation handler of a chaos run: append the job (from TASKSERVER_* variables) and its outputs' digest to --log",
			ArgsUsage: "[OUTPUT...]",
			Flags:     []cli.Flag{&cli.StringFlag{Name: "log", Required: true, Usage: "the handled log to append to"}},
			Action:    func(c *cli.Context) error { return chaos.Record(c.String("log"), c.Args().Slice()) },
		}},
	}
	return app.RunContext(ctx, args)
}

// binDir is --bin-dir, or else this program's directory.
func binDir(c *cli.Context) (string, error) {
	if bin := c.String("bin-dir"); bin != "" {
		return bin, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the programs: %w", err)
	}
	return filepath.Dir(exe), nil
}

func runChaos(ctx context.Context, c *cli.Context) error {
	bin, err := binDir(c)
	if err != nil {
		return err
	}
	out := c.String("out")
	r, runErr := chaos.Run(ctx, chaos.Options{
		BinDir: bin, OutDir: out, Jobs: c.Int("jobs"), Seed: c.Uint64("seed"),
		Kills: c.Int("kills"), KillEvery: c.Duration("kill-every"), RestartAfter: c.Duration("restart-after"),
		DBDown: c.Duration("db-down"), DiskFullFor: c.Duration("disk-full-for"),
		BurstHosts: c.Int("burst-hosts"), BurstFor: c.Duration("burst-for"),
		Hosts: c.Int("hosts"), FailFrac: c.Float64("fail-frac"), FailFracSet: true, DelayBound: c.Duration("delay-bound"),
		Timeout: c.Duration("timeout"), Out: os.Stdout,
	})
	if r == nil {
		return runErr
	}
	return finish(r, out, runErr, "chaos run broke promises")
}

func runLoad(ctx context.Context, c *cli.Context) error {
	bin, err := binDir(c)
	if err != nil {
		return err
	}
	out := c.String("out")
	r, runErr := chaos.RunLoad(ctx, chaos.LoadOptions{
		BinDir: bin, OutDir: out, Duration: c.Duration("duration"), DBCut: c.Duration("db-cut"),
		Hosts: c.Int("hosts"), Users: c.Int("users"), NCPUs: c.Int("ncpus"), ComputeTime: c.Duration("compute-time"),
		NextRPCDelay: c.Duration("next-rpc-delay"), FailFrac: c.Float64("fail-frac"), FailFracSet: true,
		DelayBound: c.Duration("delay-bound"), DrainTimeout: c.Duration("drain-timeout"), Seed: c.Uint64("seed"), Out: os.Stdout,
	})
	if r == nil {
		return runErr
	}
	return finish(r, out, runErr, "load run failed")
}

func runCluster(ctx context.Context, c *cli.Context) error {
	bin, err := binDir(c)
	if err != nil {
		return err
	}
	out := c.String("out")
	r, runErr := chaos.RunCluster(ctx, chaos.ClusterOptions{
		Options: chaos.Options{
			BinDir: bin, OutDir: out, Jobs: c.Int("jobs"), Seed: c.Uint64("seed"),
			KillEvery: c.Duration("kill-every"), RestartAfter: c.Duration("restart-after"),
			Hosts: c.Int("hosts"), FailFrac: c.Float64("fail-frac"), FailFracSet: true, DelayBound: c.Duration("delay-bound"),
			Timeout: c.Duration("timeout"), Out: os.Stdout,
		},
		DaemonKills: c.Int("kills"), Burst: c.Int("burst-hosts"), Nodes: c.Int("nodes"), Single: c.Bool("single"),
		Pairs: c.Int("pairs"), NodeDown: c.Duration("node-down"), KillAt: c.Float64("kill-at"), FailoverDSNs: c.Bool("failover-dsns"),
	})
	if r == nil {
		return runErr
	}
	var txt strings.Builder
	if err := r.WriteTable(&txt); err != nil {
		return errors.Join(runErr, err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return errors.Join(runErr, err)
	}
	if err := os.WriteFile(filepath.Join(out, "report.txt"), []byte(txt.String()), 0o644); err != nil {
		return errors.Join(runErr, err)
	}
	return finish(r, out, runErr, "cluster run broke promises or killed no node that came back")
}

// report is what both runs print and write.
type report interface {
	WriteTable(w io.Writer) error
	Write(dir string) error
	OK() bool
}

// finish prints r's table and writes report.json into out; the run's
// error, else failed when r is not OK, is the command's.
func finish(r report, out string, runErr error, failed string) error {
	fmt.Println()
	if err := r.WriteTable(os.Stdout); err != nil {
		return errors.Join(runErr, err)
	}
	if err := r.Write(out); err != nil {
		return errors.Join(runErr, err)
	}
	if runErr != nil {
		return runErr
	}
	if !r.OK() {
		return fmt.Errorf("%s: see %s", failed, filepath.Join(out, "report.json"))
	}
	return nil
}
