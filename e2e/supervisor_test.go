package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/statuspage"
	"github.com/taskserver/taskserver/internal/supervisor"
)

// TestSupervisorRestartsAndStops runs a project's real daemons under
// `supervisor start`: every replica comes up healthy, a validator replica
// killed with -9 is started again (new pid, healthy, one restart in status
// and in /metrics), and `supervisor stop` stops every process cleanly.
func TestSupervisorRestartsAndStops(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	t0 := time.Now()
	bin := buildPrograms(t)
	t.Logf("built the programs in %s", time.Since(t0).Round(time.Millisecond))
	lp := newLCProject(t, bin, lcParams{Users: 1})
	listen := portPicker(t)
	schedAddr := listen()
	validators := consecutiveAddr(t, listen, 2)
	supListen := listen()
	cfg := filepath.Join(lp.dir, "supervised.yaml")
	body := fmt.Sprintf(`db-dsn: %q
project-dir: %q
download-dir: download
upload-dir: upload
shm-path: %q
log-level: info
app: demo
url-base: "http://%s"
daemons:
  - program: feeder
    listen: %s
    args: [--sleep, 200ms]
  - program: scheduler
    listen: %s
    args: [--addr, %q, --upload-key, keys/upload_private]
  - program: transitioner
    listen: %s
  - program: validator
    replicas: 2
    listen: %s
  - program: assimilator
    listen: %s
  - program: file_deleter
    listen: %s
  - program: db_purge
    listen: %s
    args: [--min-age, 24h]
`, lp.dsn, lp.dir, lp.shm, schedAddr, listen(), listen(), schedAddr, listen(), validators, listen(), listen(), listen())
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	sup := func(args ...string) (string, int) {
		t.Helper()
		out, err := exec.Command(filepath.Join(bin, "supervisor"), append(args, "--config", cfg)...).CombinedOutput()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return string(out), 0
		case errors.As(err, &ee):
			return string(out), ee.ExitCode()
		}
		t.Fatalf("supervisor %v: %v", args, err)
		return "", 0
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			out, _ := sup("stop")
			t.Logf("cleanup: supervisor stop: %s", out)
		}
	})
	failed := func(format string, args ...any) {
		t.Helper()
		dumpLogs(t, filepath.Join(lp.dir, "log"))
		t.Fatalf(format, args...)
	}

	t1 := time.Now()
	if out, code := sup("start", "--listen", supListen, "--settle", "2s", "--wait", "45s"); code != 0 {
		failed("supervisor start: exit %d:\n%s", code, out)
	}
	t.Logf("supervisor start returned after %s", time.Since(t1).Round(time.Millisecond))
	paths := supervisor.Paths{ProjectDir: lp.dir}
	supPID, err := supervisor.Running(paths.PIDFile())
	if err != nil {
		failed("after start: %v", err)
	}
	r := waitStatus(t, sup, "every daemon healthy", func(r supervisor.Report) bool { return r.OK() })
	if len(r.Daemons) != 8 {
		failed("status lists %d daemons, want 8: %+v", len(r.Daemons), r.Daemons)
	}
	pids := []int{supPID}
	byName := map[string]supervisor.DaemonReport{}
	for _, d := range r.Daemons {
		pids = append(pids, d.PID)
		byName[d.Name] = d
		if d.Restarts != 0 {
			t.Errorf("%s restarted %d times before anything was killed (last exit %q)", d.Name, d.Restarts, d.LastExit)
		}
	}

	old := byName["validator@1"]
	if old.PID == 0 {
		failed("no validator@1 in %+v", r.Daemons)
	}
	if err := syscall.Kill(old.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 validator@1 (pid %d): %v", old.PID, err)
	}
	killed := time.Now()
	r = waitStatus(t, sup, "validator@1 restarted and healthy", func(r supervisor.Report) bool {
		for _, d := range r.Daemons {
			if d.Name == "validator@1" {
				return r.OK() && d.PID != old.PID
			}
		}
		return false
	})
	t.Logf("validator@1 back and healthy %s after kill -9", time.Since(killed).Round(time.Millisecond))
	for _, d := range r.Daemons {
		want := 0
		if d.Name == "validator@1" {
			want = 1
			pids = append(pids, d.PID)
			if d.LastExit != "signal: killed" || d.Health != "ok" {
				t.Errorf("validator@1 after kill -9: last exit %q, health %q; want signal: killed, ok", d.LastExit, d.Health)
			}
		}
		if d.Restarts != want {
			t.Errorf("status: %s restarts = %d, want %d", d.Name, d.Restarts, want)
		}
		if got := supMetric(t, supListen, "taskserver_supervisor_restarts_total", d.Name); got != float64(want) {
			t.Errorf("/metrics: restarts_total{daemon=%q} = %v, want %d", d.Name, got, want)
		}
		if got := supMetric(t, supListen, "taskserver_supervisor_daemon_up", d.Name); got != 1 {
			t.Errorf("/metrics: daemon_up{daemon=%q} = %v, want 1", d.Name, got)
		}
	}

	checkSupervisorStatusPage(t, supListen, 8)

	t2 := time.Now()
	out, code := sup("stop", "--timeout", "60s")
	stopped = true
	t.Logf("supervisor stop returned after %s", time.Since(t2).Round(time.Millisecond))
	if code != 0 || !strings.Contains(out, "stopped 8 daemons") {
		failed("supervisor stop: exit %d, output %q; want every daemon stopped cleanly", code, out)
	}
	for _, pid := range pids {
		if supervisor.Alive(pid) {
			t.Errorf("pid %d still running after stop", pid)
		}
	}
	final, err := supervisor.ReadState(paths.StateFile())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range final.Daemons {
		if d.State != supervisor.StateStopped || d.LastExitCode != 0 || d.Killed {
			t.Errorf("%s after stop: state %s, last exit %q, killed %v; want stopped, exit status 0", d.Name, d.State, d.LastExit, d.Killed)
		}
		if fi, err := os.Stat(d.Log); err != nil || fi.Size() == 0 {
			t.Errorf("%s: log %s missing or empty (%v)", d.Name, d.Log, err)
		}
	}
	if out, code := sup("status"); code == 0 || !strings.Contains(out, "not running") {
		t.Errorf("status after stop: exit %d, output %q; want not running", code, out)
	}
}

// waitStatus polls `supervisor status --json` until cond holds (60 s).
func waitStatus(t *testing.T, sup func(...string) (string, int), what string, cond func(supervisor.Report) bool) supervisor.Report {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, code := sup("status", "--json")
		var r supervisor.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("supervisor status --json (exit %d): %v\n%s", code, err, out)
		}
		if cond(r) {
			if code != 0 {
				t.Errorf("status exit %d although every daemon runs and is healthy", code)
			}
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 60 s for %s; status exit %d:\n%s", what, code, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// consecutiveAddr returns a loopback address whose port and the n-1 after
// it are free and not handed out by pick: a daemon with n replicas listens
// on port+i.
func consecutiveAddr(t *testing.T, pick func() string, n int) string {
	t.Helper()
	for range 100 {
		a := pick()
		host, port, _ := net.SplitHostPort(a)
		p, _ := strconv.Atoi(port)
		ok := p+n-1 <= 65535
		for i := 1; i < n && ok; i++ {
			ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p+i)))
			if err != nil {
				ok = false
				break
			}
			ln.Close()
		}
		if ok {
			return a
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return ""
}

// supMetric reads one sample of the supervisor's /metrics.
func supMetric(t *testing.T, listen, name, daemonName string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + listen + "/metrics")
	if err != nil {
		t.Fatalf("GET supervisor /metrics: %v", err)
	}
	defer resp.Body.Close()
	prefix := fmt.Sprintf("%s{daemon=%q} ", name, daemonName)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", sc.Text(), err)
			}
			return f
		}
	}
	t.Fatalf("supervisor /metrics has no %s", strings.TrimSpace(prefix))
	return 0
}

// checkSupervisorStatusPage reads the status page the supervisor serves on
// its listener (as JSON and as HTML) and checks it lists every daemon up.
// The page opens the database in the background, so it may answer 503 at
// first.
func checkSupervisorStatusPage(t *testing.T, addr string, daemons int) {
	t.Helper()
	var st statuspage.Status
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/status.json")
		if err == nil {
			if resp.StatusCode == http.StatusOK {
				err = json.NewDecoder(resp.Body).Decode(&st)
				resp.Body.Close()
				if err != nil {
					t.Fatalf("supervisor /status.json: %v", err)
				}
				break
			}
			resp.Body.Close()
			err = errors.New(resp.Status)
		}
		if time.Now().After(deadline) {
			t.Fatalf("supervisor /status.json: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(st.Daemons) != daemons {
		t.Errorf("supervisor status page lists %d daemons, want %d", len(st.Daemons), daemons)
	}
	for _, d := range st.Daemons {
		if d.State != statuspage.StateUp {
			t.Errorf("supervisor status page: %s is %q, want %q", d.Name, d.State, statuspage.StateUp)
		}
	}
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/html") {
		t.Errorf("supervisor /: %s, %s; want 200 text/html", resp.Status, ct)
	}
}

// freeTCPPort returns a loopback port that was free a moment ago. The
// supervisor's daemon list names fixed addresses, so its test still picks
// them this way.
func freeTCPPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// portPicker returns a function giving a free loopback address on each
// call, never one of taken nor one it gave before: the kernel may hand out
// a port it just got back, and two daemons must not get the same one.
func portPicker(t *testing.T, taken ...string) func() string {
	used := map[string]bool{}
	for _, a := range taken {
		used[a] = true
	}
	return func() string {
		for {
			n, err := freeTCPPort()
			if err != nil {
				t.Fatal(err)
			}
			if a := "127.0.0.1:" + strconv.Itoa(n); !used[a] {
				used[a] = true
				return a
			}
		}
	}
}
