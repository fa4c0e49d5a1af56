package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/simreport"
)

// tinyScenario runs in well under a second.
const tinyScenario = `
name: tiny
hosts: 8
duration: 6h
projects:
  - {name: alpha, share: 60, job: {fpops_est: 1e13, delay_bound: 24h}}
  - {name: beta, share: 40, job: {fpops_est: 1e13, delay_bound: 24h}}
`

// simulatedApp is a CLI with the simulated flags and the live flags they
// may override, running runSimulated; main.go's own app dispatches to it
// on --clock simulated.
func simulatedApp(out *bytes.Buffer) *cli.App {
	flags := append(simulatedFlags(),
		&cli.Uint64Flag{Name: "seed", Value: 1},
		&cli.IntFlag{Name: "hosts", Value: 20},
		&cli.DurationFlag{Name: "duration"},
		&cli.StringFlag{Name: "strategy", Value: "edf"},
	)
	return &cli.App{
		Name:   program,
		Flags:  flags,
		Writer: out,
		Action: func(c *cli.Context) error { return runSimulated(c.Context, c) },
	}
}

// The tests of this file run one at a time: urfave/cli's apps share a
// global help flag they write to when parsing, a data race between
// parallel runs.

func TestRunSimulatedWritesTheReport(t *testing.T) {
	dir := t.TempDir()
	scenario := filepath.Join(dir, "tiny.yaml")
	if err := os.WriteFile(scenario, []byte(tinyScenario), 0o644); err != nil {
		t.Fatal(err)
	}
	outDir := filepath.Join(dir, "report")
	var out bytes.Buffer
	args := []string{program, "--scenario", scenario, "--out", outDir, "--hosts", "5", "--strategy", "debt"}
	if err := simulatedApp(&out).RunContext(context.Background(), args); err != nil {
		t.Fatalf("simclient %v = %v", args[1:], err)
	}
	for _, want := range []string{"simulated clock", "tiny", "alpha", "beta", "report written to " + outDir} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, out.String())
		}
	}
	r, err := simreport.ReadFile(filepath.Join(outDir, simreport.JSONFile))
	if err != nil {
		t.Fatalf("read the written report: %v", err)
	}
	if r.Clock != "simulated" || r.Scenario != "tiny" || r.Hosts != 5 || r.Strategy != "debt" || r.DurationSeconds != 6*3600 {
		t.Errorf("report clock %q scenario %q hosts %d strategy %q duration %g; want simulated, tiny, 5 and debt (flags override the file), 21600",
			r.Clock, r.Scenario, r.Hosts, r.Strategy, r.DurationSeconds)
	}
	if len(r.Projects) != 2 || r.Totals.CPUSeconds == 0 {
		t.Errorf("report has %d projects and %g CPU s; want 2 and some", len(r.Projects), r.Totals.CPUSeconds)
	}
	for _, name := range []string{simreport.TextFile, simreport.SVGFile} {
		if st, err := os.Stat(filepath.Join(outDir, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v, size %v; want a non-empty file", name, err, st)
		}
	}
}

func TestRunSimulatedErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("hostz: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no scenario", nil, "needs --scenario"},
		{"missing file", []string{"--scenario", filepath.Join(dir, "none.yaml")}, "read scenario"},
		{"unknown key", []string{"--scenario", bad}, "field hostz not found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			err := simulatedApp(&out).RunContext(context.Background(), append([]string{program, "--out", filepath.Join(dir, c.name)}, c.args...))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("simclient %v = %v, want an error containing %q", c.args, err, c.want)
			}
		})
	}
}
