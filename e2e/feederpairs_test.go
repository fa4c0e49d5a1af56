package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/projectrun"
)

// TestFeederPairsDoNotFight runs two feeder/scheduler pairs on one database,
// each feeder with its own cache file and each scheduler on its own cache,
// with simulated hosts spread over both scheduler URLs, and reads the claim
// results off both schedulers' /metrics: the share of claims lost to the
// other pair, conflict / (ok + conflict).
//
// Unpartitioned, both feeders cache the same unsent instances and the
// schedulers race for them: that run must lose a clear share (at least
// 10%), which shows the load is contended enough for the partitioned run to
// mean something. With --mod 2 on the feeders each caches its own half
// (store.Partition) and the pairs must lose under 5%.
func TestFeederPairsDoNotFight(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	bin := buildPrograms(t)
	for _, tc := range []struct {
		name        string
		partitioned bool
		check       func(loss float64) bool
		want        string
	}{
		{"unpartitioned", false, func(l float64) bool { return l >= 0.10 }, ">= 10% (the pairs must contend, or the partitioned run proves nothing)"},
		{"mod2", true, func(l float64) bool { return l < 0.05 }, "< 5%"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, conflict := runFeederPairs(t, bin, tc.partitioned)
			loss := conflict / (ok + conflict)
			t.Logf("feeders %s: claims ok %.0f, conflict %.0f: %.1f%% lost to the other pair", tc.name, ok, conflict, 100*loss)
			if ok < 300 {
				t.Fatalf("only %.0f claims succeeded: too little load to measure", ok)
			}
			if !tc.check(loss) {
				t.Errorf("claim loss %.1f%% (ok %.0f, conflict %.0f), want %s", 100*loss, ok, conflict, tc.want)
			}
		})
	}
}

// runFeederPairs sets up a project with a backlog of unsent instances, two
// feeder/scheduler pairs (the feeders with --mod 2 when partitioned) and
// simulated hosts on each scheduler, lets them work, and returns the claims
// both schedulers made, by result ok and conflict.
func runFeederPairs(t *testing.T, bin string, partitioned bool) (ok, conflict float64) {
	const (
		pairs        = 2
		hostsPerPair = 30
		backlog      = 3000 // unsent instances before the hosts start
		load         = 15 * time.Second
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lp := newLCProject(t, bin, lcParams{Users: 20})
	lp.writeConfig()
	t.Cleanup(func() { lp.stopAll() })

	// The backlog: 1,500 jobs of two instances, made by the work generator
	// and the transitioner before any host asks.
	lp.startDaemon(ctx, "work_generator", "work_generator", "--listen", anyPort, "--sleep", "200ms",
		"--unsent-target", strconv.Itoa(2*backlog), "--total-jobs", strconv.Itoa(backlog/2),
		"--delay-bound", "1h", "--min-quorum", "2", "--target-nresults", "2", "--rsc-fpops-est", "1e10")
	lp.startDaemon(ctx, "transitioner", "transitioner", "--listen", anyPort, "--sleep", "200ms")
	if err := waitUnsent(ctx, lp, backlog, time.Minute); err != nil {
		lp.dumpLogs()
		t.Fatal(err)
	}

	var scheds []*projectrun.Proc
	for i := range pairs {
		shm := fmt.Sprintf("%s-%d", lp.shm, i)
		t.Cleanup(func() {
			_ = os.Remove(shm)
			_ = os.Remove(shm + ".lock")
		})
		args := []string{"--listen", anyPort, "--sleep", "200ms", "--shm-path", shm, "--slots", "300"}
		if partitioned {
			args = append(args, "--mod", strconv.Itoa(pairs), "--mod-index", strconv.Itoa(i))
		}
		// Not lp.startDaemon: that waits for the project's one cache file.
		feeder, err := projectrun.Start(projectrun.Spec{Name: fmt.Sprintf("feeder.%d", i), Bin: filepath.Join(bin, "feeder"),
			LogDir: filepath.Join(lp.dir, "logs"), Args: append([]string{"--config", lp.config}, args...), ReportsAddrs: true})
		if err != nil {
			t.Fatal(err)
		}
		lp.daemons = append(lp.daemons, feeder)
		if err := feeder.WaitFile(ctx, shm); err != nil {
			lp.dumpLogs()
			t.Fatalf("feeder.%d did not create its cache %s: %v", i, shm, err)
		}
		scheds = append(scheds, lp.startDaemon(ctx, fmt.Sprintf("scheduler.%d", i), "scheduler", "--shm-path", shm,
			"--addr", anyPort, "--listen", anyPort, "--url-base", "",
			"--upload-key", filepath.Join(lp.dir, "keys", "upload_private"), "--request-delay", "1s"))
	}
	for i, s := range scheds {
		addr, err := s.WaitAddr(ctx, "addr")
		if err != nil {
			lp.dumpLogs()
			t.Fatalf("scheduler.%d did not listen: %v", i, err)
		}
		// The hosts of pair i know only scheduler i.
		sim, err := projectrun.Start(projectrun.Spec{Name: fmt.Sprintf("simclient.%d", i), Bin: filepath.Join(bin, "simclient"),
			LogDir: filepath.Join(lp.dir, "logs"), Args: []string{"--url", "http://" + addr + "/scheduler",
				"--authenticators", lp.authFile, "--hosts", strconv.Itoa(hostsPerPair), "--compute-time", "200ms",
				"--backoff-scale", "0.01", "--backoff-max", "2s", "--seed", strconv.Itoa(i + 1)}})
		if err != nil {
			t.Fatal(err)
		}
		lp.daemons = append(lp.daemons, sim)
	}

	// Let the hosts work for the load period, or until every instance of
	// the backlog was sent: from then on nothing is left to claim.
	hc := &http.Client{Timeout: 5 * time.Second}
	var metrics []string
	for i, s := range scheds {
		listen, err := s.WaitAddr(ctx, "listen")
		if err != nil {
			t.Fatalf("scheduler.%d metrics address: %v", i, err)
		}
		metrics = append(metrics, "http://"+listen+"/metrics")
	}
	claims := func() (ok, conflict float64, per []string) {
		for i, url := range metrics {
			m, err := scrapeMetrics(ctx, hc, url)
			if err != nil {
				t.Fatalf("scheduler.%d /metrics: %v", i, err)
			}
			o, c := m[`taskserver_scheduler_cache_claims_total{result="ok"}`], m[`taskserver_scheduler_cache_claims_total{result="conflict"}`]
			per = append(per, fmt.Sprintf("scheduler.%d ok %.0f conflict %.0f", i, o, c))
			ok += o
			conflict += c
		}
		return ok, conflict, per
	}
	end := time.Now().Add(load)
	for {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(time.Second):
		}
		if err := lp.died(); err != nil {
			lp.dumpLogs()
			t.Fatal(err)
		}
		var per []string
		ok, conflict, per = claims()
		if ok >= backlog || time.Now().After(end) {
			t.Logf("claims: %v", per)
			break
		}
	}
	return ok, conflict
}

// waitUnsent waits until the project has at least n unsent instances.
func waitUnsent(ctx context.Context, lp *lcProject, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		g, err := lp.progress(ctx)
		if err == nil && g.Unsent >= n {
			return nil
		}
		if err := lp.died(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d unsent instances after %s, want %d (%v)", g.Unsent, timeout, n, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
