package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/projectrun"
)

// Settings of the client-policy run. The client's real-world periods (a
// connect period of a day, reports within a day, back-offs of minutes to
// hours) are scaled down to a run of a minute and a half; the bounds below
// are written in terms of them.
const (
	cpHosts       = 30
	cpNCPUs       = 2
	cpShareA      = 3.0
	cpShareB      = 1.0
	cpComputeTime = 2 * time.Second
	// cpFlops is the hosts' nominal speed and cpFpopsEst the jobs'
	// estimate: a task's estimated CPU time (fpops_est / host speed) is its
	// simulated run time (compute time x nominal / host speed), so the
	// client's work-buffer arithmetic is right.
	cpFlops    = 1e10
	cpFpopsEst = 2e10
	// cpConnectPeriod is T of seed 000: each host keeps T..2T of work per
	// project and asks a project for work about once per T.
	cpConnectPeriod = 15 * time.Second
	// cpReportAfter is how long a finished task may wait to be reported:
	// more than T, so reports ride on the work requests.
	cpReportAfter = 30 * time.Second
	// cpSchedPeriod is the scheduling period MV: about one task's length,
	// as in the real client (an hour, tasks of hours). Seed 000's expected
	// pay-off of giving a project a CPU is what one CPU computed in a
	// period; with a period of many tasks it dwarfs the debt one task
	// builds, and the split stays near 50/50 for that many tasks before
	// the debts turn it to 75/25.
	cpSchedPeriod = cpComputeTime
	// cpBackoffScale turns the real client's RPC back-off of 60 s .. 4 h
	// into 3 s .. 12 min, capped at cpBackoffMax.
	cpBackoffScale = 0.05
	cpBackoffMax   = 30 * time.Second
	cpBackoffMin   = time.Duration(60 * cpBackoffScale * float64(time.Second))
	// cpUnsentTarget instances are kept unsent in each project: more than
	// all hosts hold at once (30 hosts x 2T of work), so no host ever meets
	// a "no work" reply.
	cpUnsentTarget = 1200
	// Phases of the run: both projects up; project B's scheduler down;
	// both up again.
	cpPhase1 = 45 * time.Second
	cpOutage = 20 * time.Second
	cpPhase3 = 25 * time.Second
	// cpShareBound is how far the achieved CPU share of a project may be
	// from its resource share over the first phase. The client enforces
	// shares per host through short-term debt, one task choice at a time:
	// each host's split can be off by about one task per CPU (2 s of ~45 s
	// per CPU, 4%), more at the start, when the first work to arrive runs
	// whatever its project (the CPU is never left idle), and reports lag
	// computation by up to cpReportAfter in the database's figure. A client
	// that ignored shares (a 50/50 split, or first come first served) is
	// off by 0.25.
	cpShareBound = 0.1
	// cpRateSlack multiplies the RPC rate the connect period implies, for
	// the start (every host asks both projects at once) and the refills that
	// come short of 2T.
	cpRateSlack = 2
	// cpSummaryEvery is the period of the simclient's progress lines,
	// which give the tasks computed over time.
	cpSummaryEvery = 5 * time.Second
)

// TestClientPoliciesLive runs the client policies (seeds 000, 001, 002)
// against live servers: two complete local projects, A and B, every daemon
// a process with its own database, and one simclient whose hosts attach to
// both with resource shares 3 and 1, EDF strategy. After a first phase with
// both up, project B's scheduler is stopped for cpOutage and started again.
// The test then checks, from the simclient's report directory and from both
// databases:
//   - both projects got results reported, validated and assimilated;
//   - the achieved CPU share of A is within cpShareBound of 0.75 over the
//     first phase (report series and database) and over the whole run;
//   - every result the client says the server acknowledged is in its
//     project's database, over;
//   - the hosts' RPC rate stays under what the connect period implies, as
//     the client counted it and as the schedulers counted it;
//   - during B's outage the CPUs kept computing at the rate before it (B's
//     queued tasks, then A's: a task that cannot upload to B must not hold
//     a CPU) and A kept reporting; the hosts backed off from B (failed RPCs
//     bounded by the exponential back-off); B's reconnect burst after the
//     restart is bounded and B is served again.
//
// CLIENTPOLICY_SEED repeats the hosts' speeds and jitter.
func TestClientPoliciesLive(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	if os.Getenv("TEST_MYSQL_DSN") == "" {
		t.Skip("TEST_MYSQL_DSN is not set (TEST_MYSQL_DSN=$(scripts/db-up.sh))")
	}
	seed := uint64(envInt(t, "CLIENTPOLICY_SEED", 5))
	bin := buildPrograms(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	setup := time.Now()
	a := newCPProject(t, bin, "A", cpShareA, cpHosts)
	b := newCPProject(t, bin, "B", cpShareB, cpHosts)
	for _, p := range []*cpProject{a, b} {
		p.start(ctx, cpUnsentTarget, cpFpopsEst)
	}
	for _, p := range []*cpProject{a, b} {
		if err := p.waitBacklog(ctx, cpUnsentTarget*3/4, 60*time.Second); err != nil {
			p.dumpLogs()
			t.Fatal(err)
		}
		if err := p.waitCached(ctx, cpUnsentTarget*3/4, 30*time.Second); err != nil {
			p.dumpLogs()
			t.Fatal(err)
		}
	}
	t.Logf("two projects up with %d unsent instances each in %.1fs", cpUnsentTarget*3/4, time.Since(setup).Seconds())

	run := &cpRun{t: t, a: a, b: b, dir: t.TempDir(), seed: seed}
	run.startClient()
	run.watch(ctx, cpPhase1)
	run.outage(ctx, cpOutage)
	run.watch(ctx, cpPhase3)
	if err := run.stopClient(); err != nil {
		t.Errorf("simclient: %v", err)
	}
	for _, p := range []*cpProject{a, b} {
		if err := p.stopAll(); err != nil {
			t.Errorf("project %s: stopping the daemons: %v", p.name, err)
		}
	}
	run.check(ctx)
	if t.Failed() {
		a.dumpLogs()
		b.dumpLogs()
		dumpLogs(t, run.dir)
	}
}

// cpRun is one run of the client-policy test: the simclient attached to
// both projects, the timeline of the run and the schedulers' RPC counts.
type cpRun struct {
	t    *testing.T
	a, b *cpProject
	dir  string // the simclient's log, ack log and report directory
	seed uint64
	sim  *projectrun.Proc

	start                   time.Time // when the simclient started
	outageFrom, outageUntil time.Time // project B's scheduler down (until: listening again)
	stop                    time.Time // when the simclient was asked to stop
	rpcA, rpcB              rpcCounter
	noWork                  map[string]map[string]float64 // project -> reason -> count, last read
}

func (r *cpRun) ackLog() string    { return filepath.Join(r.dir, "acks.log") }
func (r *cpRun) reportDir() string { return filepath.Join(r.dir, "report") }

// startClient starts one simclient whose hosts attach to both projects.
func (r *cpRun) startClient() {
	args := []string{
		"--project", r.a.schedURL + "," + ftoa(r.a.share) + "," + r.a.authFile,
		"--project", r.b.schedURL + "," + ftoa(r.b.share) + "," + r.b.authFile,
		"--hosts", strconv.Itoa(cpHosts), "--ncpus", strconv.Itoa(cpNCPUs), "--flops", ftoa(cpFlops),
		"--compute-time", cpComputeTime.String(), "--strategy", "edf",
		"--connect-period", cpConnectPeriod.String(), "--sched-period", cpSchedPeriod.String(),
		"--report-after", cpReportAfter.String(),
		"--backoff-scale", ftoa(cpBackoffScale), "--backoff-max", cpBackoffMax.String(),
		"--seed", strconv.FormatUint(r.seed, 10), "--ack-log", r.ackLog(),
		"--report", filepath.Join(r.dir, "simclient-stats.json"), "--report-dir", r.reportDir(),
		"--summary-every", cpSummaryEvery.String(),
	}
	var err error
	r.start = time.Now()
	if r.sim, err = projectrun.Start(projectrun.Spec{Name: "simclient", Bin: filepath.Join(r.a.bin, "simclient"), LogDir: r.dir, Args: args}); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = r.stopClient() })
}

// stopClient stops the simclient (it writes its reports as it exits); it
// is safe to call twice.
func (r *cpRun) stopClient() error {
	if r.sim == nil {
		return nil
	}
	r.stop = time.Now()
	err := r.sim.Stop(20 * time.Second)
	r.sim = nil
	return err
}

// watch reads both schedulers' counters every second for d, and fails the
// test if a program dies.
func (r *cpRun) watch(ctx context.Context, d time.Duration) {
	until := time.Now().Add(d)
	for {
		r.sample(ctx)
		for _, p := range []*cpProject{r.a, r.b} {
			if err := p.died(); err != nil {
				p.dumpLogs()
				r.t.Fatalf("project %s: %v", p.name, err)
			}
		}
		if !r.sim.Running() {
			dumpLogs(r.t, r.dir)
			r.t.Fatalf("simclient exited: %v (see its log)", r.sim.Err())
		}
		left := time.Until(until)
		if left <= 0 {
			return
		}
		select {
		case <-ctx.Done():
			r.t.Fatalf("run: %v", ctx.Err())
		case <-time.After(min(left, time.Second)):
		}
	}
}

// sample reads the counters of every scheduler that is up.
func (r *cpRun) sample(ctx context.Context) {
	at := time.Since(r.start)
	if r.noWork == nil {
		r.noWork = map[string]map[string]float64{}
	}
	for _, x := range []struct {
		p *cpProject
		c *rpcCounter
	}{{r.a, &r.rpcA}, {r.b, &r.rpcB}} {
		if x.p.sched == nil {
			continue
		}
		n, noWork, err := x.p.schedulerMetrics(ctx)
		if err != nil {
			r.t.Logf("project %s: reading the scheduler's metrics: %v", x.p.name, err)
			continue
		}
		x.c.observe(at, n)
		r.noWork[x.p.name] = noWork
	}
}

// outage stops project B's scheduler for d and starts it again.
func (r *cpRun) outage(ctx context.Context, d time.Duration) {
	r.sample(ctx)
	r.outageFrom = time.Now()
	if err := r.b.stopScheduler(); err != nil {
		r.t.Errorf("project B: stopping the scheduler: %v", err)
	}
	r.rpcB.restarted()
	r.watch(ctx, d-time.Since(r.outageFrom))
	if err := r.b.startScheduler(ctx); err != nil {
		r.b.dumpLogs()
		r.t.Fatalf("project B: restarting the scheduler: %v", err)
	}
	r.outageUntil = time.Now()
	r.t.Logf("project B's scheduler down from %.1fs to %.1fs of the run",
		r.outageFrom.Sub(r.start).Seconds(), r.outageUntil.Sub(r.start).Seconds())
}
