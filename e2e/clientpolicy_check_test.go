package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/taskserver/taskserver/internal/state"
)

// cpReport is the part of the simclient's report.json the test reads,
// decoded by the keys of the design contract (not by simreport's own type,
// so a renamed key fails here as it would for any reader of the file).
type cpReport struct {
	Clock           string  `json:"clock"`
	Strategy        string  `json:"strategy"`
	Hosts           int     `json:"hosts"`
	CPUs            int     `json:"cpus"`
	DurationSeconds float64 `json:"duration_seconds"`
	IntervalSeconds float64 `json:"interval_seconds"`
	Projects        []struct {
		Name            string  `json:"name"`
		ResourceShare   float64 `json:"resource_share"`
		AchievedShare   float64 `json:"achieved_share"`
		CPUSeconds      float64 `json:"cpu_seconds"`
		RPCs            int64   `json:"rpcs"`
		RPCFailures     int64   `json:"rpc_failures"`
		TasksFetched    int64   `json:"tasks_fetched"`
		TasksReported   int64   `json:"tasks_reported"`
		DeadlinesMissed int64   `json:"deadlines_missed"`
		NoWorkReplies   int64   `json:"no_work_replies"`
	} `json:"projects"`
	Totals struct {
		CPUUtilisation   float64 `json:"cpu_utilisation"`
		CPUSeconds       float64 `json:"cpu_seconds"`
		RPCs             int64   `json:"rpcs"`
		RPCFailures      int64   `json:"rpc_failures"`
		MaxRPCsPerMinute float64 `json:"max_rpcs_per_minute"`
		TasksReported    int64   `json:"tasks_reported"`
		DeadlinesMissed  int64   `json:"deadlines_missed"`
		MaxShareError    float64 `json:"max_share_error"`
	} `json:"totals"`
	Series []struct {
		Time       float64   `json:"time"`
		Shares     []float64 `json:"shares"`
		Cumulative []float64 `json:"cumulative"`
	} `json:"series"`
}

// cpDB is what one project's database says about the run.
type cpDB struct {
	Reported, Success, Assimilated, Handled int
	// CPU is the CPU time of the reported results; CPUPhase1 of those
	// reported before B's outage.
	CPU, CPUPhase1 float64
	// Before, During and After count results reported in the window of the
	// outage's length before it, during the outage, and after it.
	Before, During, After int
	// States is every result's server state by name.
	States map[string]state.ServerState
}

func (r *cpRun) readDB(ctx context.Context, p *cpProject) (cpDB, error) {
	d := cpDB{States: map[string]state.ServerState{}}
	from, until := r.outageFrom.Unix(), r.outageUntil.Unix()
	before := from - (until - from)
	err := p.db.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(outcome = ?), 0), COALESCE(SUM(cpu_time), 0),
		COALESCE(SUM(CASE WHEN received_time < ? THEN cpu_time ELSE 0 END), 0),
		COALESCE(SUM(received_time >= ? AND received_time < ?), 0), COALESCE(SUM(received_time >= ? AND received_time < ?), 0),
		COALESCE(SUM(received_time >= ?), 0)
		FROM result WHERE received_time > 0`, state.OutcomeSuccess, from, before, from, from, until, until).
		Scan(&d.Reported, &d.Success, &d.CPU, &d.CPUPhase1, &d.Before, &d.During, &d.After)
	if err != nil {
		return d, fmt.Errorf("project %s: count reported results: %w", p.name, err)
	}
	if err := p.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM workunit WHERE assimilate_state = ?`, state.AssimilateDone).
		Scan(&d.Assimilated); err != nil {
		return d, fmt.Errorf("project %s: count assimilated jobs: %w", p.name, err)
	}
	rows, err := p.db.QueryContext(ctx, `SELECT name, server_state FROM result`)
	if err != nil {
		return d, fmt.Errorf("project %s: read results: %w", p.name, err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var s state.ServerState
		if err := rows.Scan(&name, &s); err != nil {
			return d, err
		}
		d.States[name] = s
	}
	if err := rows.Err(); err != nil {
		return d, err
	}
	err = readLines(p.handled, func(string) error { d.Handled++; return nil })
	return d, err
}

// cpProgress is one of the simclient's progress lines: tasks computed so
// far, at a time since it started.
type cpProgress struct {
	at       time.Duration
	computed int64
}

// readProgress reads the simclient's progress lines (log/slog text:
// msg=progress ... computed=N ... elapsed=D).
func readProgress(path string) ([]cpProgress, error) {
	var out []cpProgress
	err := readLines(path, func(line string) error {
		if !strings.Contains(line, "msg=progress") {
			return nil
		}
		var p cpProgress
		var okC, okE bool
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "computed":
				n, err := strconv.ParseInt(v, 10, 64)
				p.computed, okC = n, err == nil
			case "elapsed":
				d, err := time.ParseDuration(v)
				p.at, okE = d, err == nil
			}
		}
		if !okC || !okE {
			return fmt.Errorf("progress line %q: want computed= and elapsed=", line)
		}
		out = append(out, p)
		return nil
	})
	return out, err
}

// computedRate is the tasks computed per second between the progress lines
// nearest to from and to.
func computedRate(ps []cpProgress, from, to time.Duration) float64 {
	nearest := func(at time.Duration) (cpProgress, bool) {
		var best cpProgress
		found := false
		for _, p := range ps {
			if !found || (p.at-at).Abs() < (best.at-at).Abs() {
				best, found = p, true
			}
		}
		return best, found
	}
	a, okA := nearest(from)
	b, okB := nearest(to)
	if !okA || !okB || b.at <= a.at {
		return 0
	}
	return float64(b.computed-a.computed) / (b.at - a.at).Seconds()
}

func readCPReport(path string) (cpReport, error) {
	var rep cpReport
	b, err := os.ReadFile(path)
	if err != nil {
		return rep, fmt.Errorf("read the simclient's report: %w", err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return rep, fmt.Errorf("decode %s: %w", path, err)
	}
	return rep, nil
}

// impliedRPCsPerHostMinute is the most RPCs a host makes to one project per
// minute in steady state under the policy: a work request when its buffer
// falls from 2T to T (about once per T), and a report-only session at most
// once per report-after (reports otherwise ride on work requests).
func impliedRPCsPerHostMinute() float64 {
	return 60/cpConnectPeriod.Seconds() + 60/cpReportAfter.Seconds()
}

// maxOutageFailures is the most consecutive failed RPCs one host can make
// to a project that is down for d under the randomised exponential
// back-off: after the n-th failure it waits at least half of
// min(lo x 2^(n-1), hi).
func maxOutageFailures(d, lo, hi time.Duration) int {
	n, waited := 1, time.Duration(0)
	for {
		gap := min(lo<<(n-1), hi) / 2
		if waited+gap > d {
			return n
		}
		waited += gap
		n++
	}
}

// check reads what the run left and checks the policies' promises.
func (r *cpRun) check(ctx context.Context) {
	t := r.t
	rep, err := readCPReport(filepath.Join(r.reportDir(), "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	dbA, err := r.readDB(ctx, r.a)
	if err != nil {
		t.Fatal(err)
	}
	dbB, err := r.readDB(ctx, r.b)
	if err != nil {
		t.Fatal(err)
	}
	minutes := rep.DurationSeconds / 60
	if !(minutes > 0) {
		minutes = r.stop.Sub(r.start).Minutes()
	}
	t.Logf("report: clock %s, strategy %s, %d hosts, %d CPUs, %.1f s, CPU utilisation %.3f, RPCs %d (failed %d), peak %.0f RPCs/min, deadlines missed %d",
		rep.Clock, rep.Strategy, rep.Hosts, rep.CPUs, rep.DurationSeconds, rep.Totals.CPUUtilisation,
		rep.Totals.RPCs, rep.Totals.RPCFailures, rep.Totals.MaxRPCsPerMinute, rep.Totals.DeadlinesMissed)
	for _, p := range rep.Projects {
		t.Logf("report: project %s: resource share %.3f, achieved %.3f, CPU %.0f s, RPCs %d (failed %d), fetched %d, reported %d, no-work replies %d",
			p.Name, p.ResourceShare, p.AchievedShare, p.CPUSeconds, p.RPCs, p.RPCFailures, p.TasksFetched, p.TasksReported, p.NoWorkReplies)
	}
	for _, s := range rep.Series {
		t.Logf("report: series t=%5.0fs shares %.3v cumulative %.3v", s.Time, s.Shares, s.Cumulative)
	}
	for _, x := range []struct {
		name string
		d    cpDB
	}{{"A", dbA}, {"B", dbB}} {
		t.Logf("database %s: %d results reported (%d success, %.0f CPU s), %d jobs assimilated, %d handled; reported %d / %d / %d in the windows before / during / after the outage; no-work replies by reason %v",
			x.name, x.d.Reported, x.d.Success, x.d.CPU, x.d.Assimilated, x.d.Handled, x.d.Before, x.d.During, x.d.After, r.noWork[x.name])
	}

	// The report is the live run's, of the hosts and projects started.
	if rep.Clock != "real" || rep.Strategy != "edf" || rep.Hosts != cpHosts || rep.CPUs != cpHosts*cpNCPUs {
		t.Errorf("report: clock %q, strategy %q, %d hosts, %d CPUs; want real, edf, %d, %d",
			rep.Clock, rep.Strategy, rep.Hosts, rep.CPUs, cpHosts, cpHosts*cpNCPUs)
	}
	if len(rep.Projects) != 2 {
		t.Fatalf("report: %d projects, want 2 (A and B, in --project order)", len(rep.Projects))
	}
	wantA := cpShareA / (cpShareA + cpShareB)
	if math.Abs(rep.Projects[0].ResourceShare-wantA) > 1e-3 || math.Abs(rep.Projects[1].ResourceShare-(1-wantA)) > 1e-3 {
		t.Errorf("report: resource shares %.4f / %.4f, want %.4f / %.4f",
			rep.Projects[0].ResourceShare, rep.Projects[1].ResourceShare, wantA, 1-wantA)
	}

	// Both projects were served: results reported, validated, assimilated.
	for _, x := range []struct {
		name string
		d    cpDB
		rp   int64
	}{{"A", dbA, rep.Projects[0].TasksReported}, {"B", dbB, rep.Projects[1].TasksReported}} {
		if x.d.Success == 0 || x.d.Assimilated == 0 || x.d.Handled == 0 || x.rp == 0 {
			t.Errorf("project %s: %d successful results, %d jobs assimilated, %d handled, %d reported by the client: want all > 0",
				x.name, x.d.Success, x.d.Assimilated, x.d.Handled, x.rp)
		}
	}
	if rep.Totals.DeadlinesMissed != 0 {
		t.Errorf("report: %d deadlines missed, want 0: every deadline is 3 h after the task was sent", rep.Totals.DeadlinesMissed)
	}
	// Goal 1 of the CPU scheduler: keep the CPUs busy. Work is always
	// available, so CPUs idle only while the first work arrives and if a
	// host let its buffer run dry.
	if rep.Totals.CPUUtilisation < 0.75 {
		t.Errorf("report: CPU utilisation %.3f, want >= 0.75", rep.Totals.CPUUtilisation)
	}

	r.checkShares(rep, dbA, dbB)
	r.checkAcks(dbA, dbB)
	r.checkRates(rep, minutes)
	r.checkOutage(rep, dbA, dbB)
}

// checkShares compares the achieved CPU share of A with its resource share:
// over the first phase from the report's series and from the databases
// (CPU time of the results reported before the outage), and over the whole
// run from the report, where B's outage may cost B some of its share (it
// builds no short-term debt while it has no work), hence the same bound.
func (r *cpRun) checkShares(rep cpReport, dbA, dbB cpDB) {
	t := r.t
	want := cpShareA / (cpShareA + cpShareB)
	phase1 := r.outageFrom.Sub(r.start).Seconds()
	last := -1 // the last sample within the first phase
	for i, s := range rep.Series {
		if s.Time <= phase1 && len(s.Cumulative) == 2 {
			last = i
		}
	}
	if last >= 0 {
		s := rep.Series[last]
		got := s.Cumulative[0]
		t.Logf("share of A over the first %.0f s (report series): %.3f, want %.3f ± %.2f", s.Time, got, want, cpShareBound)
		if math.Abs(got-want) > cpShareBound {
			t.Errorf("share of A over the first %.0f s (report series) = %.3f, want %.3f ± %.2f", s.Time, got, want, cpShareBound)
		}
	} else {
		t.Logf("the report's series (interval %.0f s) has no sample within the first phase (%.0f s): phase-1 share from the databases only",
			rep.IntervalSeconds, phase1)
	}
	if sum := dbA.CPUPhase1 + dbB.CPUPhase1; sum > 0 {
		got := dbA.CPUPhase1 / sum
		t.Logf("share of A over the first phase (databases, CPU time of results reported before the outage): %.3f (%.0f / %.0f CPU s), want %.3f ± %.2f",
			got, dbA.CPUPhase1, sum, want, cpShareBound)
		if math.Abs(got-want) > cpShareBound {
			t.Errorf("share of A over the first phase (databases) = %.3f, want %.3f ± %.2f", got, want, cpShareBound)
		}
	} else {
		t.Errorf("no result was reported with CPU time before the outage")
	}
	got := rep.Projects[0].AchievedShare
	t.Logf("share of A over the whole run (report): %.3f, want %.3f ± %.2f", got, want, cpShareBound)
	if math.Abs(got-want) > cpShareBound || math.Abs(rep.Projects[0].AchievedShare+rep.Projects[1].AchievedShare-1) > 1e-6 {
		t.Errorf("achieved shares over the run %.3f / %.3f, want %.3f ± %.2f, summing to 1",
			got, rep.Projects[1].AchievedShare, want, cpShareBound)
	}
}

// checkAcks checks that no result the client reported is lost: every
// result the server acknowledged (the client's ack log) is in its
// project's database, over.
func (r *cpRun) checkAcks(dbA, dbB cpDB) {
	t := r.t
	var acked [2]int
	var bad []string
	err := readLines(r.ackLog(), func(line string) error {
		f := strings.Fields(line)
		if len(f) != 4 {
			return fmt.Errorf("ack log line %q: want 4 fields", line)
		}
		name := f[0]
		var states map[string]state.ServerState
		switch {
		case strings.HasPrefix(name, r.a.prefix+"_"):
			states = dbA.States
			acked[0]++
		case strings.HasPrefix(name, r.b.prefix+"_"):
			states = dbB.States
			acked[1]++
		default:
			bad = append(bad, name+": of neither project")
			return nil
		}
		if s, ok := states[name]; !ok {
			bad = append(bad, name+": not in the database")
		} else if s != state.ServerOver {
			bad = append(bad, fmt.Sprintf("%s: server state %s, want over", name, s))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("acknowledged results: A %d, B %d; lost or not over: %d", acked[0], acked[1], len(bad))
	if acked[0] == 0 || acked[1] == 0 {
		t.Errorf("acknowledged results: A %d, B %d; want both > 0", acked[0], acked[1])
	}
	for i, b := range bad {
		if i == 5 {
			t.Errorf("... and %d more acknowledged results lost", len(bad)-5)
			break
		}
		t.Errorf("acknowledged result %s", b)
	}
}

// checkRates checks that the hosts contact the schedulers about as often
// as the connect period implies, as the client counted its RPCs and as the
// schedulers counted them. A client that asked whenever its buffer was
// below 2T, or that ignored the connect period and asked at every
// request_delay (1 s), would make 60 to 120 RPCs per host per minute.
func (r *cpRun) checkRates(rep cpReport, minutes float64) {
	t := r.t
	perProject := impliedRPCsPerHostMinute()
	bound := cpRateSlack * 2 * perProject // two projects
	mean := float64(rep.Totals.RPCs) / cpHosts / minutes
	peak := rep.Totals.MaxRPCsPerMinute / cpHosts
	t.Logf("RPCs per host per minute (client): mean %.2f, peak minute %.2f; the connect period implies %.1f, bound %.1f",
		mean, peak, 2*perProject, bound)
	if mean > bound || peak > bound {
		t.Errorf("RPCs per host per minute (client): mean %.2f, peak %.2f, want <= %.1f (%.0f x %.1f implied by T=%s, report-after=%s, 2 projects)",
			mean, peak, bound, float64(cpRateSlack), 2*perProject, cpConnectPeriod, cpReportAfter)
	}
	server := r.rpcA.total() + r.rpcB.total()
	served := float64(rep.Totals.RPCs - rep.Totals.RPCFailures)
	t.Logf("RPCs the schedulers handled: A %.0f, B %.0f (client: %d sent, %d failed); peak per host per minute: A %.2f, B %.2f",
		r.rpcA.total(), r.rpcB.total(), rep.Totals.RPCs, rep.Totals.RPCFailures,
		r.rpcA.peak(time.Minute, 0)/cpHosts, r.rpcB.peak(time.Minute, 0)/cpHosts)
	if server/cpHosts/minutes > bound {
		t.Errorf("RPCs per host per minute (schedulers): %.2f, want <= %.1f", server/cpHosts/minutes, bound)
	}
	for _, x := range []struct {
		name string
		c    *rpcCounter
	}{{"A", &r.rpcA}, {"B", &r.rpcB}} {
		if pk := x.c.peak(time.Minute, 0) / cpHosts; pk > cpRateSlack*perProject {
			t.Errorf("project %s: peak RPCs per host in a minute (scheduler) %.2f, want <= %.1f", x.name, pk, cpRateSlack*perProject)
		}
	}
	// The client's count and the servers' agree, up to RPCs in flight when
	// a scheduler or the client stopped.
	if math.Abs(server-served) > 0.05*served+cpHosts {
		t.Errorf("the schedulers handled %.0f RPCs, the client says %.0f succeeded", server, served)
	}
}

// checkOutage checks the run through B's outage: A went on working, the
// hosts backed off from B, B's reconnect burst was bounded and B was served
// again.
func (r *cpRun) checkOutage(rep cpReport, dbA, dbB cpDB) {
	t := r.t
	down := r.outageUntil.Sub(r.outageFrom)
	maxFail := maxOutageFailures(down, cpBackoffMin, cpBackoffMax)
	failB := rep.Projects[1].RPCFailures
	t.Logf("outage of B (%.1f s): %d failed RPCs to B (%.2f per host; back-off allows at most %d), %d to A",
		down.Seconds(), failB, float64(failB)/cpHosts, maxFail, rep.Projects[0].RPCFailures)
	if failB > int64(maxFail*cpHosts) {
		t.Errorf("%d failed RPCs to B during its %.1f s outage, want <= %d per host (randomised exponential back-off from %s)",
			failB, down.Seconds(), maxFail, cpBackoffMin)
	}
	// The CPUs go on: while B is down the hosts run B's queued tasks, then
	// A's; a task whose output cannot be uploaded to B must not hold a CPU.
	ps, err := readProgress(filepath.Join(r.dir, "simclient.log"))
	if err != nil {
		t.Errorf("reading the simclient's progress lines: %v", err)
	}
	from, until := r.outageFrom.Sub(r.start), r.outageUntil.Sub(r.start)
	before := computedRate(ps, from-(until-from), from)
	during := computedRate(ps, from, until)
	after := computedRate(ps, until, r.stop.Sub(r.start))
	t.Logf("tasks computed per second (simclient progress every %s): %.1f before B's outage, %.1f during, %.1f after",
		cpSummaryEvery, before, during, after)
	if during < 0.9*before {
		t.Errorf("tasks computed per second fell from %.1f to %.1f while B was down: CPUs idled although A had work", before, during)
	}
	// A goes on: while B is down the hosts run A's tasks, and report them.
	if 2*dbA.During < dbA.Before {
		t.Errorf("project A: %d results reported during B's outage, %d in as long before it: A did not keep working",
			dbA.During, dbA.Before)
	}
	if dbB.After == 0 {
		t.Errorf("project B: no result reported after its scheduler came back")
	}
	// The burst: each host's first contact after its back-off ends, spread
	// by the back-off's jitter, and perhaps one more to fill its buffer.
	restart := r.outageUntil.Sub(r.start)
	burst := 0.0
	for _, s := range r.rpcB.samples {
		if s.at >= restart && s.at <= restart+10*time.Second {
			burst = max(burst, s.total-r.rpcB.base)
		}
	}
	t.Logf("project B's reconnect: %.0f RPCs in the first 10 s after the restart (%.2f per host), peak minute after it %.2f per host",
		burst, burst/cpHosts, r.rpcB.peak(time.Minute, restart)/cpHosts)
	if burst > 2*cpHosts {
		t.Errorf("project B: %.0f RPCs in the 10 s after its restart, want <= %d (2 per host)", burst, 2*cpHosts)
	}
}
