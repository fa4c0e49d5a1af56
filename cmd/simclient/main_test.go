package main

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/simreport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// noWorkScheduler is a scheduler that registers every host and has no
// work; it counts the requests it answered.
func noWorkScheduler(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := protocol.ParseSchedulerRequest(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n.Add(1)
		reply := protocol.SchedulerReply{HostID: req.HostID}
		if reply.HostID == 0 {
			reply.HostID = 1 + n.Load()
		}
		_ = protocol.WriteSchedulerReply(w, &reply)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func writeKeys(t *testing.T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("key_"+name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// fastRun are the flags of a short live run with the real policy scaled
// to milliseconds.
var fastRun = []string{"--hosts", "2", "--duration", "400ms", "--compute-time", "20ms",
	"--backoff-scale", "0.0003", "--backoff-max", "100ms", "--summary-every", "0", "--log-level", "error"}

// The tests that run the CLI app are not parallel: urfave/cli writes
// package-level flag state (the help flag) on every run.

func TestLiveRunWithTwoProjectsWritesBothReports(t *testing.T) {
	a, na := noWorkScheduler(t)
	b, nb := noWorkScheduler(t)
	dir := t.TempDir()
	statsFile, reportDir := filepath.Join(dir, "stats.json"), filepath.Join(dir, "report")
	args := append([]string{program,
		"--project", a.URL + "/scheduler,3," + writeKeys(t, dir, "a"),
		"--project", b.URL + "/scheduler,1," + writeKeys(t, dir, "b"),
		"--strategy", "debt", "--report", statsFile, "--report-dir", reportDir}, fastRun...)
	if err := run(context.Background(), args); err != nil {
		t.Fatalf("simclient %v = %v, want nil", args[1:], err)
	}
	if na.Load() == 0 || nb.Load() == 0 {
		t.Errorf("schedulers answered %d and %d requests, want both contacted", na.Load(), nb.Load())
	}

	rep, err := simreport.ReadFile(filepath.Join(reportDir, simreport.JSONFile))
	if err != nil {
		t.Fatalf("read the run report: %v", err)
	}
	if rep.Clock != "real" || rep.Strategy != "debt" || rep.Hosts != 2 || len(rep.Projects) != 2 ||
		math.Abs(rep.Projects[0].ResourceShare-0.75) > 1e-9 || math.Abs(rep.Projects[1].ResourceShare-0.25) > 1e-9 {
		t.Errorf("report clock %q strategy %q hosts %d projects %+v; want real, debt, 2 hosts, shares 0.75 and 0.25",
			rep.Clock, rep.Strategy, rep.Hosts, rep.Projects)
	}
	// An RPC under way when the run stops is answered but not counted.
	if answered := na.Load() + nb.Load(); rep.Totals.RPCs > answered || rep.Totals.RPCs < answered-2 || rep.Totals.NoWorkReplies == 0 {
		t.Errorf("report rpcs %d no_work_replies %d; want the %d the schedulers answered (less one per host at most), some without work",
			rep.Totals.RPCs, rep.Totals.NoWorkReplies, answered)
	}
	for _, name := range []string{simreport.TextFile, simreport.SVGFile} {
		if st, err := os.Stat(filepath.Join(reportDir, name)); err != nil || st.Size() == 0 {
			t.Errorf("report dir lacks a non-empty %s: %v", name, err)
		}
	}

	b2, err := os.ReadFile(statsFile)
	if err != nil {
		t.Fatal(err)
	}
	var stats map[string]any
	if err := json.Unmarshal(b2, &stats); err != nil {
		t.Fatalf("--report %s is not JSON: %v", b2, err)
	}
	for _, k := range []string{"hosts", "rpcs", "rpc_errors", "results_received", "results_acked", "hosts_by_kind", "by_kind"} {
		if _, ok := stats[k]; !ok {
			t.Errorf("--report lacks %q: %s", k, b2)
		}
	}
}

// The old single-project flags still work: --url and --authenticators are
// one project with share 100.
func TestLiveRunWithURLAndAuthenticators(t *testing.T) {
	s, n := noWorkScheduler(t)
	dir := t.TempDir()
	reportDir := filepath.Join(dir, "report")
	args := append([]string{program, "--url", s.URL + "/scheduler", "--authenticators", writeKeys(t, dir, "k"),
		"--report-dir", reportDir}, fastRun...)
	if err := run(context.Background(), args); err != nil {
		t.Fatalf("simclient %v = %v, want nil", args[1:], err)
	}
	rep, err := simreport.ReadFile(filepath.Join(reportDir, simreport.JSONFile))
	if err != nil {
		t.Fatalf("read the run report: %v", err)
	}
	if n.Load() == 0 || len(rep.Projects) != 1 || rep.Projects[0].ResourceShare != 1 || rep.Strategy != "edf" {
		t.Errorf("%d requests, report projects %+v strategy %q; want some, one project with all the share, edf",
			n.Load(), rep.Projects, rep.Strategy)
	}
}

func TestFlagErrors(t *testing.T) {
	dir := t.TempDir()
	keys := writeKeys(t, dir, "k")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown clock", []string{"--clock", "sundial", "--authenticators", keys}, "--clock"},
		{"no authenticators", []string{"--hosts", "1"}, "--authenticators is required"},
		{"project without share", []string{"--project", "http://x/scheduler," + keys}, "URL,SHARE,AUTHFILE"},
		{"project with a zero share", []string{"--project", "http://x/scheduler,0," + keys}, "share"},
		{"project without keys file", []string{"--project", "http://x/scheduler,1," + filepath.Join(dir, "none")}, "authenticators file"},
		{"unknown strategy", []string{"--strategy", "lottery", "--authenticators", keys}, "--strategy"},
		{"unknown runtime statistic", []string{"--runtime-stat", "mode", "--authenticators", keys}, "--runtime-stat"},
		{"on-frac zero", []string{"--on-frac", "0", "--authenticators", keys}, "--on-frac"},
		{"simulated without scenario", []string{"--clock", "simulated"}, "scenario"},
	} {
		err := run(context.Background(), append([]string{program, "--log-level", "error"}, tc.args...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: simclient %v = %v, want an error mentioning %q", tc.name, tc.args, err, tc.want)
		}
	}
}
