// Command supervisor starts, watches and stops every daemon a project's
// configuration file lists under daemons: (with their --mod replicas): the
// equivalent of BOINC's bin/start, bin/stop and bin/status.
//
//	supervisor run    --config project.yaml   # in the foreground (systemd, containers)
//	supervisor start  --config project.yaml   # in the background; waits until all run
//	supervisor status --config project.yaml [--json]
//	supervisor stop   --config project.yaml
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/supervisor"
)

func main() { daemon.Main(run) }

const (
	flagBinDir      = "bin-dir"
	flagGrace       = "grace"
	flagMinBackoff  = "backoff-min"
	flagMaxBackoff  = "backoff-max"
	flagStableAfter = "stable-after"
	flagWait        = "wait"
	flagSettle      = "settle"
	flagTimeout     = "timeout"
	flagJSON        = "json"
)

// errExit makes the program exit 1 after its output said why.
var errExit = errors.New("")

func run(ctx context.Context, args []string) error {
	app := &cli.App{
		Name:  "supervisor",
		Usage: "start, watch and stop a project's daemons",
		Commands: []*cli.Command{
			{Name: "run", Usage: "run the daemons in the foreground until SIGTERM or SIGINT",
				Flags: append(locateFlags(), runFlags()...), Action: func(c *cli.Context) error { return runCmd(ctx, c) }},
			{Name: "start", Usage: "run the supervisor in the background and wait until every daemon runs",
				Flags: append(append(locateFlags(), runFlags()...),
					&cli.DurationFlag{Name: flagWait, Value: time.Minute, Usage: "longest wait for every daemon to run"},
					&cli.DurationFlag{Name: flagSettle, Value: 2 * time.Second, Usage: "how long every daemon must have stayed up to count as started"}),
				Action: func(c *cli.Context) error { return startCmd(ctx, c) }},
			{Name: "stop", Usage: "stop the running supervisor and its daemons",
				Flags: append(locateFlags(), &cli.DurationFlag{Name: flagTimeout, Value: 5 * time.Minute,
					Usage: "longest wait for the supervisor to exit"}),
				Action: func(c *cli.Context) error { return stopCmd(ctx, c) }},
			{Name: "status", Usage: "show the daemons (exit 1 if one is not running or not healthy)",
				Flags:  append(locateFlags(), &cli.BoolFlag{Name: flagJSON, Usage: "print JSON"}),
				Action: func(c *cli.Context) error { return statusCmd(ctx, c) }},
		},
	}
	err := app.RunContext(ctx, args)
	if errors.Is(err, errExit) {
		os.Exit(1)
	}
	return err
}

// locateFlags find the project: its configuration file and directory.
func locateFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: config.FlagConfig, Usage: "project configuration file (YAML) with the daemons list", EnvVars: []string{config.EnvName(config.FlagConfig)}},
		&cli.StringFlag{Name: config.FlagProjectDir, Usage: "project directory (run/ and log/ are under it); default: the configuration's project-dir, else ."},
	}
}

func runFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: flagBinDir, Usage: "directory of the daemons' binaries (default: the supervisor's own)"},
		&cli.StringFlag{Name: config.FlagListen, Value: "127.0.0.1:9100", Usage: "address of the supervisor's /healthz and /metrics (empty: none)"},
		&cli.DurationFlag{Name: flagGrace, Value: 20 * time.Second, Usage: "how long a daemon may take to exit after SIGTERM before it is killed"},
		&cli.DurationFlag{Name: flagMinBackoff, Value: time.Second, Usage: "pause before restarting a daemon that exited"},
		&cli.DurationFlag{Name: flagMaxBackoff, Value: time.Minute, Usage: "longest pause between restarts (the pause doubles while a daemon keeps exiting)"},
		&cli.DurationFlag{Name: flagStableAfter, Value: time.Minute, Usage: "uptime after which a daemon's next restart waits --backoff-min again"},
	}
}

// project is the located project.
type project struct {
	config string // absolute; "" if not given
	body   []byte
	paths  supervisor.Paths
}

func locate(c *cli.Context, needConfig bool) (project, error) {
	var p project
	if path := c.String(config.FlagConfig); path != "" {
		abs, err := filepath.Abs(path)
		if err != nil {
			return p, err
		}
		if p.body, err = os.ReadFile(abs); err != nil {
			return p, fmt.Errorf("read config file: %w", err)
		}
		p.config = abs
	} else if needConfig {
		return p, fmt.Errorf("--%s is required", config.FlagConfig)
	}
	dir := c.String(config.FlagProjectDir)
	if dir == "" && p.body != nil {
		values, err := config.Parse(p.body)
		if err != nil {
			return p, fmt.Errorf("config file %s: %w", p.config, err)
		}
		dir = values[config.FlagProjectDir]
	}
	if dir == "" {
		dir = "."
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return p, err
	}
	p.paths = supervisor.Paths{ProjectDir: abs}
	return p, nil
}

func binDir(c *cli.Context) (string, error) {
	if d := c.String(flagBinDir); d != "" {
		return filepath.Abs(d)
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the supervisor's directory (use --%s): %w", flagBinDir, err)
	}
	return filepath.Dir(exe), nil
}

func runCmd(ctx context.Context, c *cli.Context) error {
	p, err := locate(c, true)
	if err != nil {
		return err
	}
	specs, err := config.Daemons(p.body)
	if err != nil {
		return fmt.Errorf("config file %s: %w", p.config, err)
	}
	var replicas []config.Replica
	for _, s := range specs {
		replicas = append(replicas, s.Expand()...)
	}
	bin, err := binDir(c)
	if err != nil {
		return err
	}
	log := daemon.NewLogger("supervisor", "info")
	var page http.Handler
	if sh, err := newStatusHandler(ctx, p.body, log); err != nil {
		return fmt.Errorf("config file %s: %w", p.config, err)
	} else if sh != nil {
		page = sh
	}
	s, err := supervisor.New(supervisor.Options{Handler: page,
		Config: p.config, Daemons: replicas, BinDir: bin, Paths: p.paths, Listen: c.String(config.FlagListen),
		Grace: c.Duration(flagGrace), MinBackoff: c.Duration(flagMinBackoff), MaxBackoff: c.Duration(flagMaxBackoff),
		StableAfter: c.Duration(flagStableAfter), Log: log,
	})
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

func startCmd(ctx context.Context, c *cli.Context) error {
	p, err := locate(c, true)
	if err != nil {
		return err
	}
	// Check the list here, so a mistake is reported on the terminal, not
	// only in the background supervisor's log.
	if _, err := config.Daemons(p.body); err != nil {
		return fmt.Errorf("config file %s: %w", p.config, err)
	}
	bin, err := binDir(c)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"run", "--" + config.FlagConfig, p.config, "--" + config.FlagProjectDir, p.paths.ProjectDir,
		"--" + flagBinDir, bin, "--" + config.FlagListen, c.String(config.FlagListen)}
	for _, f := range []string{flagGrace, flagMinBackoff, flagMaxBackoff, flagStableAfter} {
		args = append(args, "--"+f, c.Duration(f).String())
	}
	st, err := supervisor.Start(ctx, supervisor.StartOptions{Exe: exe, Args: args, Paths: p.paths,
		Wait: c.Duration(flagWait), Settle: c.Duration(flagSettle), Out: c.App.Writer})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "%d daemons running\n", len(st.Daemons))
	return nil
}

func stopCmd(ctx context.Context, c *cli.Context) error {
	p, err := locate(c, false)
	if err != nil {
		return err
	}
	st, err := supervisor.Stop(ctx, p.paths, c.Duration(flagTimeout))
	if err != nil {
		return err
	}
	if bad := supervisor.Unclean(st); len(bad) > 0 {
		fmt.Fprintf(c.App.Writer, "stopped; not cleanly: %s\n", strings.Join(bad, "; "))
		return errExit
	}
	fmt.Fprintf(c.App.Writer, "stopped %d daemons\n", len(st.Daemons))
	return nil
}

func statusCmd(ctx context.Context, c *cli.Context) error {
	p, err := locate(c, false)
	if err != nil {
		return err
	}
	r, err := supervisor.Status(ctx, p.paths)
	if err != nil {
		return err
	}
	if c.Bool(flagJSON) {
		err = r.WriteJSON(c.App.Writer)
	} else {
		err = r.WriteTable(c.App.Writer)
	}
	if err != nil {
		return err
	}
	if !r.OK() {
		return errExit
	}
	return nil
}
