package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/config"
)

// binDir holds the test programs: the child stand-in under the program
// names the tests' daemons lists use, and the supervisor command.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "supervisor-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		if err := buildTestPrograms(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		binDir = dir
		return m.Run()
	}()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func buildTestPrograms(dir string) error {
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	for pkg, out := range map[string]string{"./testdata/child": "child", "../../cmd/supervisor": "supervisor"} {
		cmd := exec.Command(gobin, "build", "-o", filepath.Join(dir, out), pkg)
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
		}
	}
	for _, name := range []string{"alpha", "beta", "gamma"} {
		if err := os.Link(filepath.Join(dir, "child"), filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// bundle is one supervisor run in this process.
type bundle struct {
	t      *testing.T
	dir    string
	config string
	paths  Paths
	sup    *Supervisor
	cancel context.CancelFunc
	errc   chan error
}

// setup writes a configuration with the given daemons list and runs a
// supervisor for it until the test ends (or stop is called).
func setup(t *testing.T, daemons string, opts Options) *bundle {
	t.Helper()
	dir := t.TempDir()
	b := &bundle{t: t, dir: dir, config: filepath.Join(dir, "project.yaml"), paths: Paths{ProjectDir: dir}}
	body := fmt.Sprintf("project-dir: %q\ndaemons:\n%s", dir, daemons)
	if err := os.WriteFile(b.config, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	specs, err := config.Daemons([]byte(body))
	if err != nil {
		t.Fatalf("config.Daemons(%q): %v", body, err)
	}
	for _, s := range specs {
		opts.Daemons = append(opts.Daemons, s.Expand()...)
	}
	opts.Config, opts.BinDir, opts.Paths = b.config, binDir, b.paths
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if b.sup, err = New(opts); err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel, b.errc = cancel, make(chan error, 1)
	go func() { b.errc <- b.sup.Run(ctx) }()
	t.Cleanup(func() { b.stop() })
	return b
}

// stop ends the run and returns Run's error; safe to call twice.
func (b *bundle) stop() error {
	b.cancel()
	select {
	case err, ok := <-b.errc:
		if ok {
			close(b.errc)
		}
		return err
	case <-time.After(time.Minute):
		b.t.Fatal("Run did not return within a minute of cancel")
		return nil
	}
}

// waitState polls the state file until cond holds.
func (b *bundle) waitState(what string, cond func(State) bool) State {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var st State
	var err error
	for time.Now().Before(deadline) {
		if st, err = ReadState(b.paths.StateFile()); err == nil && cond(st) {
			return st
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.t.Fatalf("waited 30 s for %s; last state %+v (read error %v)", what, st, err)
	return st
}

func allRunning(st State) bool {
	for _, d := range st.Daemons {
		if d.State != StateRunning {
			return false
		}
	}
	return len(st.Daemons) > 0
}

// waitFile waits up to 30 s for path to exist and hold something.
func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still empty after 30 s", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func daemonNamed(t *testing.T, st State, name string) DaemonState {
	t.Helper()
	for _, d := range st.Daemons {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("no daemon %s in state %+v", name, st)
	return DaemonState{}
}

// freeAddr returns a loopback address whose port and the n-1 following
// are free.
func freeAddr(t *testing.T, n int) string {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		ok := true
		for i := 1; i < n && ok; i++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+i))
			if err != nil {
				ok = false
				continue
			}
			l.Close()
		}
		if ok && port+n-1 <= 65535 {
			return "127.0.0.1:" + strconv.Itoa(port)
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return ""
}

// metric reads one sample of the supervisor's /metrics.
func metric(t *testing.T, listen, name, daemonName string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + listen + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	want := fmt.Sprintf("%s{daemon=%q} ", name, daemonName)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), want); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", sc.Text(), err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", strings.TrimSpace(want))
	return 0
}

func readStarts(t *testing.T, path string) []time.Time {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []time.Time
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		ns, _ := strconv.ParseInt(f[1], 10, 64)
		out = append(out, time.Unix(0, ns))
	}
	return out
}

func TestRestartsWithBackoff(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	starts := filepath.Join(dir, "starts")
	b := setup(t, fmt.Sprintf("  - program: alpha\n    args: [--exit-after, 20ms, --exit-code, \"7\", --starts, %q]\n", starts),
		Options{MinBackoff: 100 * time.Millisecond, MaxBackoff: 400 * time.Millisecond, StableAfter: time.Hour})
	st := b.waitState("4 restarts", func(st State) bool { return len(st.Daemons) == 1 && st.Daemons[0].Restarts >= 4 })
	d := st.Daemons[0]
	if d.LastExit != "exit status 7" || d.LastExitCode != 7 {
		t.Errorf("last exit = %q (code %d), want exit status 7", d.LastExit, d.LastExitCode)
	}
	if got := metric(t, st.Listen, "taskserver_supervisor_restarts_total", "alpha"); got < 4 {
		t.Errorf("restarts_total = %v, want at least 4", got)
	}
	if err := b.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	at := readStarts(t, starts)
	if len(at) < 5 {
		t.Fatalf("%d starts recorded, want at least 5", len(at))
	}
	// Each gap is the process's life plus the back-off: at least the
	// back-off, which doubles from 100 ms to the 400 ms cap.
	want := []time.Duration{100, 200, 400, 400}
	for i, w := range want {
		if gap := at[i+1].Sub(at[i]); gap < w*time.Millisecond {
			t.Errorf("gap before restart %d = %s, want at least %s", i+1, gap, w*time.Millisecond)
		}
	}
	final, err := ReadState(b.paths.StateFile())
	if err != nil {
		t.Fatal(err)
	}
	if final.StoppedAt == nil || final.Daemons[0].State != StateStopped {
		t.Errorf("final state: stopped_at %v, alpha %s; want stopped", final.StoppedAt, final.Daemons[0].State)
	}
}

func TestKilledDaemonIsRestartedAndAllStopCleanly(t *testing.T) {
	t.Parallel()
	listen := freeAddr(t, 2)
	b := setup(t, fmt.Sprintf("  - program: alpha\n  - program: beta\n    replicas: 2\n    listen: %s\n", listen),
		Options{MinBackoff: 100 * time.Millisecond})
	st := b.waitState("all running", allRunning)
	old := daemonNamed(t, st, "beta@1")
	if err := syscall.Kill(old.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 beta@1 (pid %d): %v", old.PID, err)
	}
	st = b.waitState("beta@1 restarted", func(st State) bool {
		d := daemonNamed(t, st, "beta@1")
		return d.State == StateRunning && d.PID != old.PID
	})
	d := daemonNamed(t, st, "beta@1")
	if d.Restarts != 1 || d.LastExit != "signal: killed" {
		t.Errorf("beta@1 after kill -9: restarts %d, last exit %q; want 1, signal: killed", d.Restarts, d.LastExit)
	}
	if got := metric(t, st.Listen, "taskserver_supervisor_restarts_total", "beta@1"); got != 1 {
		t.Errorf("restarts_total{beta@1} = %v, want 1", got)
	}
	if got := metric(t, st.Listen, "taskserver_supervisor_restarts_total", "beta@0"); got != 0 {
		t.Errorf("restarts_total{beta@0} = %v, want 0", got)
	}
	if got := metric(t, st.Listen, "taskserver_supervisor_daemon_up", "beta@1"); got != 1 {
		t.Errorf("daemon_up{beta@1} = %v, want 1", got)
	}
	// Its port serves /healthz again under the new process (polled: the
	// state says running once the process exists, before it listens).
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := Status(context.Background(), b.paths)
		if err != nil {
			t.Fatalf("Status: %v", err)
		}
		if r.OK() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Status not OK 30 s after the restart: %+v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var pids []int
	for _, d := range st.Daemons {
		pids = append(pids, d.PID)
	}
	if err := b.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, pid := range pids {
		if Alive(pid) {
			t.Errorf("pid %d still alive after the supervisor stopped", pid)
		}
	}
	final, err := ReadState(b.paths.StateFile())
	if err != nil {
		t.Fatal(err)
	}
	if bad := Unclean(final); len(bad) > 0 {
		t.Errorf("unclean stops: %v", bad)
	}
	if _, err := os.Stat(b.paths.PIDFile()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pid file left behind: %v", err)
	}
}

// A daemon that runs but whose /healthz fails (a loop daemon after three
// failed passes) shows in status with its /healthz reason, makes the
// report not OK (`supervisor status` exits 1), and shows ok again once its
// /healthz recovers.
func TestStatusShowsADaemonWhoseHealthzFails(t *testing.T) {
	t.Parallel()
	listen := freeAddr(t, 1)
	sick := filepath.Join(t.TempDir(), "healthz")
	b := setup(t, fmt.Sprintf("  - program: alpha\n  - program: beta\n    listen: %s\n    args: [--healthz-file, %q]\n", listen, sick),
		Options{})
	b.waitState("all running", allRunning)
	waitStatus := func(what string, cond func(Report) bool) Report {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			r, err := Status(context.Background(), b.paths)
			if err != nil {
				t.Fatalf("Status: %v", err)
			}
			if cond(r) {
				return r
			}
			if time.Now().After(deadline) {
				t.Fatalf("Status not %s after 30 s: %+v", what, r)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitStatus("OK", Report.OK)

	const why = "3 consecutive passes failed, last: list due workunits: context deadline exceeded"
	if err := os.WriteFile(sick, []byte(why+"\nsecond line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Status(context.Background(), b.paths)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if r.OK() {
		t.Errorf("Status().OK() = true with beta's /healthz failing, want false: %+v", r)
	}
	beta := r.Daemons[1]
	if beta.State != StateRunning || beta.Health != "503 "+why {
		t.Errorf("beta in status: state %q health %q, want running and %q", beta.State, beta.Health, "503 "+why)
	}
	var table strings.Builder
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "503 "+why) || strings.Contains(table.String(), "second line") {
		t.Errorf("status table lacks beta's /healthz reason, or spans more than its first line:\n%s", table.String())
	}

	if err := os.Remove(sick); err != nil {
		t.Fatal(err)
	}
	r = waitStatus("OK again", Report.OK)
	if got := r.Daemons[1].Health; got != "ok" {
		t.Errorf("beta's health after recovery = %q, want ok", got)
	}
}

func TestStopKillsAStubbornDaemonInReverseOrder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	alphaStarts, betaStarts := filepath.Join(dir, "alpha-starts"), filepath.Join(dir, "beta-starts")
	b := setup(t, fmt.Sprintf("  - program: alpha\n    args: [--starts, %q]\n  - program: beta\n    args: [--ignore-term, --starts, %q]\n", alphaStarts, betaStarts),
		Options{Grace: 300 * time.Millisecond})
	st := b.waitState("all running", allRunning)
	beta := daemonNamed(t, st, "beta")
	// "running" means forked; a child that has not yet set its signal
	// handling would die of SIGTERM whatever it was told, so wait for both
	// to record their start (which they do after setting it).
	waitFile(t, alphaStarts)
	waitFile(t, betaStarts)
	if err := b.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if Alive(beta.PID) {
		t.Errorf("beta (pid %d) alive after stop", beta.PID)
	}
	final, err := ReadState(b.paths.StateFile())
	if err != nil {
		t.Fatal(err)
	}
	a, bt := daemonNamed(t, final, "alpha"), daemonNamed(t, final, "beta")
	if !bt.Killed || bt.LastExit != "signal: killed" {
		t.Errorf("beta ignoring SIGTERM: killed %v, last exit %q; want killed", bt.Killed, bt.LastExit)
	}
	if a.Killed || a.LastExitCode != 0 {
		t.Errorf("alpha: killed %v, last exit %q; want a clean exit", a.Killed, a.LastExit)
	}
	if a.LastExitAt == nil || bt.LastExitAt == nil || a.LastExitAt.Before(*bt.LastExitAt) {
		t.Errorf("alpha stopped at %v, before beta at %v: want reverse start order", a.LastExitAt, bt.LastExitAt)
	}
	if got := Unclean(final); len(got) != 1 || !strings.HasPrefix(got[0], "beta:") {
		t.Errorf("Unclean = %v, want beta only", got)
	}
}

func TestSecondRunRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, "  - program: alpha\n", Options{})
	b.waitState("running", allRunning)
	s2, err := New(Options{Config: b.config, Daemons: []config.Replica{{Name: "gamma", Program: "gamma"}},
		BinDir: binDir, Paths: b.paths})
	if err != nil {
		t.Fatal(err)
	}
	err = s2.Run(context.Background())
	var re *RunningError
	if !errors.As(err, &re) || re.PID != os.Getpid() {
		t.Fatalf("second Run = %v, want RunningError with pid %d", err, os.Getpid())
	}
	if st, _ := ReadState(b.paths.StateFile()); len(st.Daemons) != 1 || st.Daemons[0].Name != "alpha" {
		t.Errorf("second Run touched the state file: %+v", st)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	_, err := New(Options{Config: "x.yaml", BinDir: binDir, Paths: Paths{ProjectDir: t.TempDir()},
		Daemons: []config.Replica{{Name: "nosuch", Program: "nosuch"}}})
	if err == nil || !strings.Contains(err.Error(), "daemon nosuch") {
		t.Errorf("New with a missing binary = %v, want an error naming the daemon", err)
	}
	if _, err := New(Options{Config: "x.yaml", BinDir: binDir, Paths: Paths{ProjectDir: t.TempDir()}}); err == nil ||
		!strings.Contains(err.Error(), "empty") {
		t.Errorf("New with no daemons = %v, want an error", err)
	}
}

// supervisorCmd runs the supervisor command and returns its output and
// exit code.
func supervisorCmd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "supervisor"), args...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	default:
		t.Fatalf("supervisor %v: %v", args, err)
		return "", -1
	}
}

func TestCommandStartStatusStop(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	listen := freeAddr(t, 1)
	cfg := filepath.Join(dir, "project.yaml")
	body := fmt.Sprintf("project-dir: %q\ndaemons:\n  - program: alpha\n  - program: beta\n    replicas: 2\n    listen: %s\n", dir, listen)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	paths := Paths{ProjectDir: dir}
	t.Cleanup(func() { supervisorCmd(t, "stop", "--config", cfg) })

	if out, code := supervisorCmd(t, "status", "--config", cfg); code == 0 || !strings.Contains(out, "not running") {
		t.Errorf("status before start: exit %d, output %q; want non-zero, not running", code, out)
	}
	out, code := supervisorCmd(t, "start", "--config", cfg, "--bin-dir", binDir, "--listen", "127.0.0.1:0", "--settle", "300ms", "--wait", "30s")
	if code != 0 || !strings.Contains(out, "3 daemons running") {
		t.Fatalf("start: exit %d, output:\n%s", code, out)
	}
	pid, err := Running(paths.PIDFile())
	if err != nil {
		t.Fatalf("after start: %v", err)
	}
	if out, code := supervisorCmd(t, "start", "--config", cfg, "--bin-dir", binDir, "--listen", "127.0.0.1:0"); code == 0 || !strings.Contains(out, "already running") {
		t.Errorf("second start: exit %d, output %q; want refused, already running", code, out)
	}
	out, code = supervisorCmd(t, "status", "--config", cfg)
	if code != 0 {
		t.Errorf("status: exit %d, output:\n%s", code, out)
	}
	for _, want := range []string{"alpha", "beta@0", "beta@1", "running", "ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("status table lacks %q:\n%s", want, out)
		}
	}
	st, err := ReadState(paths.StateFile())
	if err != nil {
		t.Fatal(err)
	}
	// A daemon gone for good (kill -9 then the supervisor's back-off) is
	// seen by status as not running until it is back; here kill alpha and
	// check status --json reports the restart once it is.
	alpha := daemonNamed(t, st, "alpha")
	if err := syscall.Kill(alpha.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var r Report
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, code = supervisorCmd(t, "status", "--config", cfg, "--json")
		r = Report{}
		if err := jsonDecode(out, &r); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		if code == 0 && r.Daemons[0].Restarts == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alpha not back after kill -9; status exit %d:\n%s", code, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r.PID != pid || !r.Running || r.Daemons[0].PID == alpha.PID || r.Daemons[2].Health != "ok" {
		t.Errorf("status --json after restart: %+v", r)
	}

	st, _ = ReadState(paths.StateFile())
	out, code = supervisorCmd(t, "stop", "--config", cfg)
	if code != 0 || !strings.Contains(out, "stopped 3 daemons") {
		t.Errorf("stop: exit %d, output %q", code, out)
	}
	for _, p := range append([]int{pid}, st.Daemons[0].PID, st.Daemons[1].PID, st.Daemons[2].PID) {
		if Alive(p) {
			t.Errorf("pid %d alive after stop", p)
		}
	}
	if out, code := supervisorCmd(t, "stop", "--config", cfg); code == 0 || !strings.Contains(out, "no supervisor") {
		t.Errorf("second stop: exit %d, output %q; want an error", code, out)
	}
}

func TestCommandStartReportsFailingDaemon(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "project.yaml")
	body := fmt.Sprintf("project-dir: %q\ndaemons:\n  - program: alpha\n  - program: gamma\n    args: [--exit-after, 10ms]\n", dir)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { supervisorCmd(t, "stop", "--config", cfg) })
	out, code := supervisorCmd(t, "start", "--config", cfg, "--bin-dir", binDir, "--listen", "", "--wait", "2s", "--backoff-min", "100ms")
	if code == 0 || !strings.Contains(out, "gamma") || strings.Contains(out, "alpha restarting") {
		t.Errorf("start with a failing daemon: exit %d, output:\n%s\nwant non-zero naming gamma only", code, out)
	}
	if out, code := supervisorCmd(t, "stop", "--config", cfg); code == 0 || !strings.Contains(out, "gamma: exit status 1") {
		t.Errorf("stop: exit %d, output %q; want gamma's exit reported", code, out)
	}
}

func jsonDecode(s string, v any) error {
	dec := json.NewDecoder(strings.NewReader(s))
	return dec.Decode(v)
}
