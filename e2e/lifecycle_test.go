package e2e

import (
	"context"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestLifecycleRandomized runs a few thousand jobs (LIFECYCLE_JOBS, default
// 2,000) through the whole task server, every daemon a process, against a
// host population of which some fail every task, vanish with their work,
// cheat, or come back after the deadline. Short deadlines make timeouts,
// replacements and late reports part of the run. Once every job is
// assimilated and every instance over, it checks the lifecycle's promises
// on the database and the files:
//   - every job is handed to the assimilator's handler exactly once;
//   - a successful job's output is the correct one, from an honest host;
//   - a failed job's error_mask is what its instance history calls for;
//   - no user got two instances of one job;
//   - credit goes only to valid results, each the job's credit under the
//     app's policy, and adds up the same in results, users and hosts;
//   - every result a host reported and the server acknowledged is over
//     with the outcome the host reported.
//
// LIFECYCLE_SEED reproduces a run's host population and timing choices.
func TestLifecycleRandomized(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	p := lcParams{
		Jobs:        envInt(t, "LIFECYCLE_JOBS", 2000),
		Hosts:       80,
		Users:       20,
		FailFrac:    0.08,
		VanishFrac:  0.04,
		CheatFrac:   0.08,
		LateFrac:    0.08,
		DelayBound:  10 * time.Second,
		LateBy:      2 * time.Second,
		ComputeTime: 100 * time.Millisecond,
		MaxError:    2,
		MaxTotal:    6,
		MaxSuccess:  3,
		FpopsEst:    1e10,
		Seed:        uint64(envInt(t, "LIFECYCLE_SEED", int(rand.Uint32()))),
	}
	t.Logf("lifecycle run: %d jobs, %d hosts (fail %g, vanish %g, cheat %g, late %g), seed %d (LIFECYCLE_SEED to repeat)",
		p.Jobs, p.Hosts, p.FailFrac, p.VanishFrac, p.CheatFrac, p.LateFrac, p.Seed)
	bin := buildPrograms(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	lp := newLCProject(t, bin, p)
	start := time.Now()
	lp.start(ctx, p)

	// Done means every job assimilated and validated, and every instance
	// over: the late hosts' reports have come in or timed out.
	timeout := time.Duration(envInt(t, "LIFECYCLE_TIMEOUT_SECONDS", 300)) * time.Second
	g, err := lp.waitQuiet(ctx, p.Jobs, timeout, 15*time.Second)
	if err != nil {
		lp.reportStuck(ctx)
		lp.dumpLogs()
		t.Fatalf("waiting for every job to be assimilated and every instance over: %v", err)
	}
	t.Logf("%5.0fs  quiet: %s", time.Since(start).Seconds(), g)
	// The hosts may still hold results past their deadlines; stop them and
	// let the daemons settle what they reported meanwhile.
	if err := lp.stopSim(); err != nil {
		t.Errorf("simclient: %v", err)
	}
	if _, err := lp.waitQuiet(ctx, p.Jobs, 60*time.Second, 15*time.Second); err != nil {
		lp.reportStuck(ctx)
		lp.dumpLogs()
		t.Fatalf("settling after the hosts stopped: %v", err)
	}
	if err := lp.stopAll(); err != nil {
		t.Errorf("stopping the daemons: %v", err)
	}
	// Informational: output files nobody will delete (late uploads after
	// their job's files were deleted, or deletions still pending).
	if n, err := countRegular(filepath.Join(lp.dir, "upload")); err == nil {
		t.Logf("files left in upload/: %d", n)
	}

	d, err := lp.collect(ctx)
	if err != nil {
		t.Fatalf("reading the final state: %v", err)
	}
	s := d.check(p.Jobs)
	t.Logf("lifecycle summary (%.0fs): %s", time.Since(start).Seconds(), s)
	for _, b := range s.Broken(5) {
		t.Errorf("%s", b)
	}
	// The run must have exercised what it claims to check.
	if s.Invalid == 0 || s.CheaterOutput == 0 {
		t.Errorf("cheaters returned %d outputs and %d results were invalid: want both > 0", s.CheaterOutput, s.Invalid)
	}
	if s.LateAcked == 0 {
		t.Errorf("no late report was acknowledged although %g of the hosts are late", p.LateFrac)
	}
	if s.Success < p.Jobs*8/10 {
		t.Errorf("%d of %d jobs succeeded: far fewer than the failing hosts explain", s.Success, p.Jobs)
	}
	if t.Failed() {
		lp.dumpLogs()
	}
}

// reportStuck logs a few unfinished jobs with their instances.
func (lp *lcProject) reportStuck(ctx context.Context) {
	d, err := lp.collect(ctx)
	if err != nil {
		lp.t.Logf("reading the state of unfinished jobs: %v", err)
		return
	}
	n := 0
	for _, j := range d.Jobs {
		done := j.AssimilateState == 2 && !j.NeedValidate
		for _, r := range d.Results[j.ID] {
			done = done && r.ServerState == 5
		}
		if done {
			continue
		}
		if n++; n > 10 {
			lp.t.Logf("... and more unfinished jobs")
			return
		}
		lp.t.Logf("unfinished: %s", d.history(j))
	}
}

// countRegular counts the regular files below dir.
func countRegular(dir string) (int, error) {
	n := 0
	err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			n++
		}
		return err
	})
	return n, err
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
