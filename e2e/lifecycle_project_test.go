package e2e

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// lcParams are the knobs of one lifecycle run.
type lcParams struct {
	Jobs, Hosts, Users                        int
	FailFrac, VanishFrac, CheatFrac, LateFrac float64
	DelayBound, LateBy, ComputeTime           time.Duration
	MaxError, MaxTotal, MaxSuccess            int
	FpopsEst                                  float64
	Seed                                      uint64
}

// lcProject is a local project whose every program runs as a process,
// set up for the lifecycle test: a fresh database, a project directory, the
// demo app, users, keys, and an assimilator handler script that records
// what it was handed.
type lcProject struct {
	t        *testing.T
	bin      string
	dir      string
	dsn      string
	db       *sql.DB
	shm      string
	config   string
	authFile string
	ackLog   string // simclient's acknowledged results
	handled  string // the handler script's log of job names
	outDir   string // the handler script's copies of canonical outputs
	schedURL string
	daemons  []*lcProc
	sim      *lcProc
}

func newLCProject(t *testing.T, bin string, p lcParams) *lcProject {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lp := &lcProject{t: t, bin: bin, dir: t.TempDir(), dsn: storetest.NewDatabase(t)}
	var err error
	if lp.db, err = sql.Open("mysql", lp.dsn); err != nil {
		t.Fatalf("open project database: %v", err)
	}
	t.Cleanup(func() { lp.db.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	lp.shm = filepath.Join("/dev/shm", "taskserver-lc-"+hex.EncodeToString(b[:]))
	t.Cleanup(func() {
		_ = os.Remove(lp.shm)
		_ = os.Remove(lp.shm + ".lock") // the feeder's
	})
	for _, d := range []string{"download", "upload", "results", "archives", "logs", "keys", "outputs"} {
		if err := os.MkdirAll(filepath.Join(lp.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	lp.ackLog = filepath.Join(lp.dir, "acks.log")
	lp.handled = filepath.Join(lp.dir, "handled.log")
	lp.outDir = filepath.Join(lp.dir, "outputs")
	lp.seed(ctx, p)
	lp.writeHandler()
	return lp
}

// seed adds the demo platform, app and version, the users, their
// authenticators file and the upload key.
func (lp *lcProject) seed(ctx context.Context, p lcParams) {
	t := lp.t
	st, err := store.Open(ctx, lp.dsn, store.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	defer st.Close()
	now := time.Now().Unix()
	pid, err := st.PlatformInsert(ctx, row.Platform{CreateTime: now, Name: "x86_64-pc-linux-gnu", UserFriendlyName: "Linux on x86-64"})
	if err != nil {
		t.Fatalf("insert platform: %v", err)
	}
	aid, err := st.AppInsert(ctx, row.App{CreateTime: now, Name: demoapp.AppName, UserFriendlyName: "Demo", Weight: 1})
	if err != nil {
		t.Fatalf("insert app: %v", err)
	}
	if _, err := st.AppVersionInsert(ctx, row.AppVersion{CreateTime: now, AppID: aid, VersionNum: 100, PlatformID: pid}); err != nil {
		t.Fatalf("insert app version: %v", err)
	}
	var auths []string
	for i := range p.Users {
		var b [16]byte
		_, _ = rand.Read(b[:])
		auth := hex.EncodeToString(b[:])
		if _, err := st.UserInsert(ctx, row.User{CreateTime: now, EmailAddr: fmt.Sprintf("volunteer%d@example.org", i),
			Name: fmt.Sprintf("volunteer%d", i), Authenticator: auth}); err != nil {
			t.Fatalf("insert user: %v", err)
		}
		auths = append(auths, auth)
	}
	lp.authFile = filepath.Join(lp.dir, "authenticators.txt")
	if err := os.WriteFile(lp.authFile, []byte(strings.Join(auths, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := keys.Generate()
	if err != nil {
		t.Fatalf("generate upload key: %v", err)
	}
	if err := keys.WritePrivateFile(filepath.Join(lp.dir, "keys", "upload_private"), k); err != nil {
		t.Fatal(err)
	}
}

// writeHandler writes the assimilator's --handler-cmd script: it copies a
// successful job's canonical output to outputs/<job name>, then appends the
// job's name to handled.log. The line is written last, so a run that fails
// part-way (and is retried) leaves no line.
func (lp *lcProject) writeHandler() {
	script := fmt.Sprintf(`#!/bin/sh
set -e
if [ $# -gt 0 ]; then
	cp "$1" %[1]q/"$TASKSERVER_JOB_NAME".tmp
	mv %[1]q/"$TASKSERVER_JOB_NAME".tmp %[1]q/"$TASKSERVER_JOB_NAME"
fi
printf '%%s %%s\n' "$TASKSERVER_JOB_NAME" "$TASKSERVER_ERROR_MASK" >> %[2]q
`, lp.outDir, lp.handled)
	if err := os.WriteFile(filepath.Join(lp.dir, "handler.sh"), []byte(script), 0o755); err != nil {
		lp.t.Fatal(err)
	}
}

// start launches every daemon: feeder, scheduler, two transitioners
// sharing the jobs with --mod 2, validator, assimilator with the handler
// script, file deleter, db_purge (kept from purging, so every row stays
// to be checked) and the work generator making p.Jobs jobs.
func (lp *lcProject) start(ctx context.Context, p lcParams) {
	t := lp.t
	port, err := freeTCPPort()
	if err != nil {
		t.Fatal(err)
	}
	urlBase := fmt.Sprintf("http://127.0.0.1:%d", port)
	lp.schedURL = urlBase + "/scheduler"
	lp.config = filepath.Join(lp.dir, "project.yaml")
	conf := fmt.Sprintf("db-dsn: %q\nproject-dir: %q\ndownload-dir: download\nupload-dir: upload\nshm-path: %q\nlog-level: info\napp: demo\nurl-base: %q\n",
		lp.dsn, lp.dir, lp.shm, urlBase)
	if err := os.WriteFile(lp.config, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	listen := portPicker(t, fmt.Sprintf("127.0.0.1:%d", port))
	t.Cleanup(func() { lp.stopAll() })
	steps := []struct {
		name, program string
		args          []string
	}{
		{"feeder", "feeder", []string{"--listen", listen(), "--sleep", "200ms"}},
		{"scheduler", "scheduler", []string{"--addr", fmt.Sprintf("127.0.0.1:%d", port), "--listen", listen(), "--url-base", urlBase,
			"--upload-key", filepath.Join(lp.dir, "keys", "upload_private"), "--request-delay", "1s"}},
		{"transitioner.0", "transitioner", []string{"--listen", listen(), "--mod", "2", "--mod-index", "0", "--sleep", "300ms"}},
		{"transitioner.1", "transitioner", []string{"--listen", listen(), "--mod", "2", "--mod-index", "1", "--sleep", "300ms"}},
		{"validator", "validator", []string{"--listen", listen(), "--sleep", "300ms"}},
		{"assimilator", "assimilator", []string{"--listen", listen(), "--sleep", "300ms",
			"--handler-cmd", filepath.Join(lp.dir, "handler.sh")}},
		{"file_deleter", "file_deleter", []string{"--listen", listen(), "--sleep", "500ms"}},
		{"db_purge", "db_purge", []string{"--listen", listen(), "--sleep", "1s", "--archive-dir", "archives", "--min-age", "24h"}},
		{"work_generator", "work_generator", []string{"--listen", listen(), "--sleep", "300ms",
			"--unsent-target", "300", "--total-jobs", strconv.Itoa(p.Jobs),
			"--delay-bound", p.DelayBound.String(), "--min-quorum", "2", "--target-nresults", "2",
			"--max-error-results", strconv.Itoa(p.MaxError), "--max-total-results", strconv.Itoa(p.MaxTotal),
			"--max-success-results", strconv.Itoa(p.MaxSuccess), "--rsc-fpops-est", strconv.FormatFloat(p.FpopsEst, 'g', -1, 64)}},
	}
	for _, s := range steps {
		pr, err := startLCProc(filepath.Join(lp.bin, s.program), s.name, filepath.Join(lp.dir, "logs"),
			append([]string{"--config", lp.config}, s.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		lp.daemons = append(lp.daemons, pr)
		switch s.name {
		case "feeder":
			if err := waitUntil(ctx, pr, func() bool { _, err := os.Stat(lp.shm); return err == nil }); err != nil {
				lp.dumpLogs()
				t.Fatalf("feeder did not create its cache %s: %v", lp.shm, err)
			}
		case "scheduler":
			if err := waitUntil(ctx, pr, func() bool {
				c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
				if err == nil {
					c.Close()
				}
				return err == nil
			}); err != nil {
				lp.dumpLogs()
				t.Fatalf("scheduler did not listen: %v", err)
			}
		}
	}
	args := []string{"--url", lp.schedURL, "--authenticators", lp.authFile, "--hosts", strconv.Itoa(p.Hosts),
		"--fail-frac", ftoa(p.FailFrac), "--vanish-frac", ftoa(p.VanishFrac), "--cheat-frac", ftoa(p.CheatFrac),
		"--late-frac", ftoa(p.LateFrac), "--late-by", p.LateBy.String(), "--compute-time", p.ComputeTime.String(),
		"--backoff-scale", "0.01", "--backoff-max", "5s", "--seed", strconv.FormatUint(p.Seed, 10),
		"--ack-log", lp.ackLog, "--report", filepath.Join(lp.dir, "simclient-report.json"), "--summary-every", "30s"}
	lp.sim, err = startLCProc(filepath.Join(lp.bin, "simclient"), "simclient", filepath.Join(lp.dir, "logs"), args...)
	if err != nil {
		t.Fatal(err)
	}
}

// stopSim stops the simulated hosts; it reports their exit error.
func (lp *lcProject) stopSim() error {
	if lp.sim == nil {
		return nil
	}
	err := lp.sim.stop(20 * time.Second)
	lp.sim = nil
	return err
}

// stopAll stops the hosts and then the daemons, newest first; it is safe
// to call twice.
func (lp *lcProject) stopAll() error {
	errs := []error{lp.stopSim()}
	for i := len(lp.daemons) - 1; i >= 0; i-- {
		if err := lp.daemons[i].stop(20 * time.Second); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", lp.daemons[i].name, err))
		}
	}
	lp.daemons = nil
	return errors.Join(errs...)
}

// died names a program that exited while it should be running.
func (lp *lcProject) died() error {
	for _, pr := range append([]*lcProc{lp.sim}, lp.daemons...) {
		if pr != nil && !pr.running() {
			return fmt.Errorf("%s exited: %v (see its log)", pr.name, pr.err)
		}
	}
	return nil
}

func (lp *lcProject) dumpLogs() { dumpLogs(lp.t, filepath.Join(lp.dir, "logs")) }

// lcProgress is what the wait loop watches.
type lcProgress struct {
	Jobs, Unassimilated, NeedValidate, NotOver, InProgress, Unsent int
}

func (g lcProgress) String() string {
	return fmt.Sprintf("jobs %d, not assimilated %d, need_validate %d | instances not over %d (unsent %d, in progress %d)",
		g.Jobs, g.Unassimilated, g.NeedValidate, g.NotOver, g.Unsent, g.InProgress)
}

// quiet reports whether the project has nothing left to do: every job
// created, assimilated and validated, every instance over.
func (g lcProgress) quiet(jobs int) bool {
	return g.Jobs == jobs && g.Unassimilated == 0 && g.NeedValidate == 0 && g.NotOver == 0
}

func (lp *lcProject) progress(ctx context.Context) (lcProgress, error) {
	var g lcProgress
	err := lp.db.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(assimilate_state <> 2), 0), COALESCE(SUM(need_validate <> 0), 0) FROM workunit`).
		Scan(&g.Jobs, &g.Unassimilated, &g.NeedValidate)
	if err != nil {
		return g, fmt.Errorf("count jobs: %w", err)
	}
	err = lp.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(server_state <> 5), 0), COALESCE(SUM(server_state = 4), 0), COALESCE(SUM(server_state = 2), 0) FROM result`).
		Scan(&g.NotOver, &g.InProgress, &g.Unsent)
	if err != nil {
		return g, fmt.Errorf("count instances: %w", err)
	}
	return g, nil
}

// waitQuiet polls until the project is quiet, a program dies, or timeout
// passes; it logs progress every logEvery.
func (lp *lcProject) waitQuiet(ctx context.Context, jobs int, timeout, logEvery time.Duration) (lcProgress, error) {
	start := time.Now()
	lastLog := start
	for {
		g, err := lp.progress(ctx)
		if err == nil && g.quiet(jobs) {
			return g, nil
		}
		if err := lp.died(); err != nil {
			return g, err
		}
		if time.Since(start) > timeout {
			return g, fmt.Errorf("not quiet after %s: %s", timeout, g)
		}
		if time.Since(lastLog) >= logEvery {
			lastLog = time.Now()
			lp.t.Logf("%5.0fs  %s", time.Since(start).Seconds(), g)
		}
		select {
		case <-ctx.Done():
			return g, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// lcProc is one program of the project running as a child process.
type lcProc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// startLCProc launches bin with args, its output appended to logDir/name.log.
func startLCProc(bin, name, logDir string, args ...string) (*lcProc, error) {
	f, err := os.OpenFile(filepath.Join(logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &lcProc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *lcProc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM, waits up to grace, then kills; it returns the exit
// error, nil for a clean exit.
func (p *lcProc) stop(grace time.Duration) error {
	if p.running() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
		return p.err
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %s of SIGTERM", p.name, grace)
	}
}

// waitUntil polls cond until it holds, p exits, or ctx ends.
func waitUntil(ctx context.Context, p *lcProc, cond func() bool) error {
	for !cond() {
		if !p.running() {
			return fmt.Errorf("%s exited: %v", p.name, p.err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

func freeTCPPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

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
