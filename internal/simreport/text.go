package simreport

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
)

// WriteText writes a human summary: the run's settings, a table with one
// row per project, and the totals.
func (r Report) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%s clock, scenario %s, strategy %s", orDash(r.Clock), orDash(r.Scenario), orDash(r.Strategy))
	if r.RuntimeStat != "" {
		fmt.Fprintf(bw, " (runtime %s)", r.RuntimeStat)
	}
	fmt.Fprintf(bw, "\n%d hosts, %d CPUs, %s covered in %s of wall time\n\n",
		r.Hosts, r.CPUs, formatDuration(r.DurationSeconds), formatDuration(r.WallSeconds))

	// Names are padded to one width so that they read left-aligned in a
	// table whose figures are right-aligned.
	nameWidth := len("project")
	for _, p := range r.Projects {
		nameWidth = max(nameWidth, len(p.Name))
	}
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\tresource share\tachieved share\tCPU hours\tfetched\tcompleted\treported\tdeadlines missed\tRPCs\tRPC failures\tno-work replies\t\n", nameWidth, "project")
	for _, p := range r.Projects {
		fmt.Fprintf(tw, "%-*s\t%.1f%%\t%.1f%%\t%.1f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n",
			nameWidth, p.Name, 100*p.ResourceShare, 100*p.AchievedShare, p.CPUSeconds/3600,
			p.TasksFetched, p.TasksCompleted, p.TasksReported, p.DeadlinesMissed,
			p.RPCs, p.RPCFailures, p.NoWorkReplies)
	}
	t := r.Totals
	fmt.Fprintf(tw, "%-*s\t\t\t%.1f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n",
		nameWidth, "total", t.CPUSeconds/3600, t.TasksFetched, t.TasksCompleted, t.TasksReported, t.DeadlinesMissed,
		t.RPCs, t.RPCFailures, t.NoWorkReplies)
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write text report: %w", err)
	}

	fmt.Fprintf(bw, "\nmax share error     %.2f percentage points\n", 100*t.MaxShareError)
	fmt.Fprintf(bw, "CPU utilisation     %.1f%% (%.1f of %.1f CPU hours available; %.1f%% idle)\n",
		100*t.CPUUtilisation, t.CPUSeconds/3600, t.AvailableCPUSeconds/3600, 100*t.IdleFraction)
	fmt.Fprintf(bw, "work fetched        %.1f estimated CPU hours in %d tasks\n", t.WorkFetchedSeconds/3600, t.TasksFetched)
	fmt.Fprintf(bw, "deadlines missed    %d\n", t.DeadlinesMissed)
	fmt.Fprintf(bw, "scheduler RPCs      %d (%d failed), at most %.0f in one minute\n", t.RPCs, t.RPCFailures, t.MaxRPCsPerMinute)
	for _, p := range r.Projects {
		if len(p.Shortfalls) == 0 {
			continue
		}
		fmt.Fprintf(bw, "sent less (%s)", p.Name)
		for _, reason := range slices.Sorted(maps.Keys(p.Shortfalls)) {
			fmt.Fprintf(bw, " %s %d", reason, p.Shortfalls[reason])
		}
		fmt.Fprintln(bw)
	}
	if hw := r.Hardware; hw != nil {
		fmt.Fprintf(bw, "GPU hosts           %d with %d GPUs: %d GPU tasks, GPUs %.1f%% busy, their CPUs %.1f%% busy\n",
			hw.GPUHosts, hw.GPUs, hw.GPUTasks, 100*hw.GPUBusyFrac, 100*hw.GPUHostCPUBusyFrac)
		fmt.Fprintf(bw, "multi-core          %d hosts, %d multi-threaded tasks; all CPUs %.1f%% busy\n",
			hw.MTHosts, hw.MTTasks, 100*hw.CPUBusyFrac)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write text report: %w", err)
	}
	return nil
}

// formatDuration writes seconds the way a reader of a run summary wants
// them: seconds for short runs, hours for long ones, days past two days.
func formatDuration(s float64) string {
	switch {
	case s < 120:
		return fmt.Sprintf("%.1f s", s)
	case s < 2*3600:
		return fmt.Sprintf("%.1f min", s/60)
	case s < 2*86400:
		return fmt.Sprintf("%.1f h", s/3600)
	default:
		return fmt.Sprintf("%.2f days", s/86400)
	}
}

// orDash stands in for an empty field.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
