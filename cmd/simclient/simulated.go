package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/simreport"
	"github.com/taskserver/taskserver/internal/simulate"
)

// DefaultSimOut is where a --clock simulated run writes its report.
const DefaultSimOut = "sim-report"

// simulatedFlags are the flags of a --clock simulated run. Their names do
// not clash with the live client's; --seed, --hosts, --duration, --strategy
// and --runtime-stat, when given, override the scenario's values.
func simulatedFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "scenario", Usage: "with --clock simulated: the scenario file (YAML; see scenarios/reference.yaml)", EnvVars: env("scenario")},
		&cli.StringFlag{Name: "out", Value: DefaultSimOut, Usage: "with --clock simulated: directory for report.json, report.txt and shares.svg", EnvVars: env("out")},
	}
}

// runSimulated runs a scenario in simulated time: load it, apply the
// overriding flags, run it, write the report directory and print the text
// report.
func runSimulated(ctx context.Context, c *cli.Context) error {
	path := c.String("scenario")
	if path == "" {
		return errors.New("--clock simulated needs --scenario FILE")
	}
	sc, err := simulate.LoadScenario(path)
	if err != nil {
		return err
	}
	if c.IsSet("seed") {
		sc.Seed = c.Uint64("seed")
	}
	if c.IsSet("hosts") {
		sc.Hosts = c.Int("hosts")
	}
	if c.IsSet("duration") {
		sc.Duration = simulate.Duration(c.Duration("duration"))
	}
	if c.IsSet("strategy") {
		sc.Strategy = c.String("strategy")
	}
	if c.IsSet("runtime-stat") {
		sc.RuntimeStat = c.String("runtime-stat")
	}
	report, err := simulate.Run(ctx, sc)
	if err != nil {
		return err
	}
	out := c.String("out")
	if out == "" {
		out = DefaultSimOut
	}
	if err := report.WriteDir(out); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	w := c.App.Writer
	if err := report.WriteText(w); err != nil {
		return fmt.Errorf("print the report: %w", err)
	}
	if _, err := fmt.Fprintf(w, "\nreport written to %s (%s, %s, %s)\n", out, simreport.JSONFile, simreport.TextFile, simreport.SVGFile); err != nil {
		return fmt.Errorf("print the report: %w", err)
	}
	return nil
}
