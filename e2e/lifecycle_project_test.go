package e2e

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/projectrun"
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
	daemons  []*projectrun.Proc
	sim      *projectrun.Proc
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
	if _, err := projectrun.SeedDemoApp(ctx, st); err != nil {
		t.Fatalf("insert the demo app: %v", err)
	}
	auths, err := projectrun.SeedUsers(ctx, st, p.Users, "volunteer")
	if err != nil {
		t.Fatalf("insert users: %v", err)
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
// successful job's first canonical output ("out") to
// outputs/<job name>/out, the copy handler's layout, then appends the job's
// name to handled.log. The line is written last, so a run that fails
// part-way (and is retried) leaves no line.
func (lp *lcProject) writeHandler() {
	script := fmt.Sprintf(`#!/bin/sh
set -e
if [ $# -gt 0 ]; then
	mkdir -p %[1]q/"$TASKSERVER_JOB_NAME"
	cp "$1" %[1]q/"$TASKSERVER_JOB_NAME"/out.tmp
	mv %[1]q/"$TASKSERVER_JOB_NAME"/out.tmp %[1]q/"$TASKSERVER_JOB_NAME"/out
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
// to be checked), db_dump, a trickle handler and the work generator making p.Jobs
// jobs.
func (lp *lcProject) start(ctx context.Context, p lcParams) {
	t := lp.t
	lp.writeConfig()
	t.Cleanup(func() { lp.stopAll() })
	steps := []struct {
		name, program string
		args          []string
	}{
		{"feeder", "feeder", []string{"--listen", anyPort, "--sleep", "200ms"}},
		{"scheduler", "scheduler", []string{"--addr", anyPort, "--listen", anyPort, "--url-base", "",
			"--upload-key", filepath.Join(lp.dir, "keys", "upload_private"), "--request-delay", "1s"}},
		{"transitioner.0", "transitioner", []string{"--listen", anyPort, "--mod", "2", "--mod-index", "0", "--sleep", "300ms"}},
		{"transitioner.1", "transitioner", []string{"--listen", anyPort, "--mod", "2", "--mod-index", "1", "--sleep", "300ms"}},
		{"validator", "validator", []string{"--listen", anyPort, "--sleep", "300ms"}},
		{"assimilator", "assimilator", []string{"--listen", anyPort, "--sleep", "300ms",
			"--handler-cmd", filepath.Join(lp.dir, "handler.sh")}},
		{"file_deleter", "file_deleter", []string{"--listen", anyPort, "--sleep", "500ms"}},
		{"db_purge", "db_purge", []string{"--listen", anyPort, "--sleep", "1s", "--archive-dir", "archives", "--min-age", "24h"}},
		{"db_dump", "db_dump", []string{"--listen", anyPort, "--interval", "1h"}},
		{"trickle_handler", "trickle_handler", []string{"--listen", anyPort, "--sleep", "500ms", "--extend-deadline", p.DelayBound.String()}},
		{"work_generator", "work_generator", []string{"--listen", anyPort, "--sleep", "300ms",
			"--unsent-target", "300", "--total-jobs", strconv.Itoa(p.Jobs),
			"--delay-bound", p.DelayBound.String(), "--min-quorum", "2", "--target-nresults", "2",
			"--max-error-results", strconv.Itoa(p.MaxError), "--max-total-results", strconv.Itoa(p.MaxTotal),
			"--max-success-results", strconv.Itoa(p.MaxSuccess), "--rsc-fpops-est", strconv.FormatFloat(p.FpopsEst, 'g', -1, 64)}},
	}
	for _, s := range steps {
		pr := lp.startDaemon(ctx, s.name, s.program, s.args...)
		if s.name == "scheduler" {
			lp.schedulerListens(ctx, pr)
		}
	}
	args := []string{"--url", lp.schedURL, "--authenticators", lp.authFile, "--hosts", strconv.Itoa(p.Hosts),
		"--fail-frac", ftoa(p.FailFrac), "--vanish-frac", ftoa(p.VanishFrac), "--cheat-frac", ftoa(p.CheatFrac),
		"--late-frac", ftoa(p.LateFrac), "--late-by", p.LateBy.String(), "--compute-time", p.ComputeTime.String(),
		"--backoff-scale", "0.01", "--backoff-max", "5s", "--seed", strconv.FormatUint(p.Seed, 10),
		"--ack-log", lp.ackLog, "--report", filepath.Join(lp.dir, "simclient-report.json"), "--summary-every", "30s"}
	var err error
	lp.sim, err = projectrun.Start(projectrun.Spec{Name: "simclient", Bin: filepath.Join(lp.bin, "simclient"), LogDir: filepath.Join(lp.dir, "logs"), Args: args})
	if err != nil {
		t.Fatal(err)
	}
}

// anyPort has a daemon listen on a port of the kernel's choice, which it
// reports (--addr-file): no two daemons can be handed one port.
const anyPort = "127.0.0.1:0"

// writeConfig writes the project file the daemons and taskctl read. It
// names no url-base: the scheduler, on port 0, makes it of its address.
func (lp *lcProject) writeConfig() {
	lp.config = filepath.Join(lp.dir, "project.yaml")
	conf := fmt.Sprintf("db-dsn: %q\nproject-dir: %q\ndownload-dir: download\nupload-dir: upload\nshm-path: %q\nlog-level: info\napp: demo\n",
		lp.dsn, lp.dir, lp.shm)
	if err := os.WriteFile(lp.config, []byte(conf), 0o600); err != nil {
		lp.t.Fatal(err)
	}
}

// startDaemon starts a daemon of the project with the project file and
// args; for the feeder, it waits for its cache.
func (lp *lcProject) startDaemon(ctx context.Context, name, program string, args ...string) *projectrun.Proc {
	t := lp.t
	pr, err := projectrun.Start(projectrun.Spec{Name: name, Bin: filepath.Join(lp.bin, program), LogDir: filepath.Join(lp.dir, "logs"),
		Args: append([]string{"--config", lp.config}, args...), ReportsAddrs: true})
	if err != nil {
		t.Fatal(err)
	}
	lp.daemons = append(lp.daemons, pr)
	if program == "feeder" {
		if err := pr.WaitFile(ctx, lp.shm); err != nil {
			lp.dumpLogs()
			t.Fatalf("feeder did not create its cache %s: %v", lp.shm, err)
		}
	}
	return pr
}

// schedulerListens waits for the scheduler to report its public address
// and sets the scheduler URL from it.
func (lp *lcProject) schedulerListens(ctx context.Context, sched *projectrun.Proc) string {
	addr, err := sched.WaitAddr(ctx, "addr")
	if err != nil {
		lp.dumpLogs()
		lp.t.Fatalf("scheduler did not listen: %v", err)
	}
	lp.schedURL = "http://" + addr + "/scheduler"
	return addr
}

// stopSim stops the simulated hosts; it reports their exit error.
func (lp *lcProject) stopSim() error {
	if lp.sim == nil {
		return nil
	}
	err := lp.sim.Stop(20 * time.Second)
	lp.sim = nil
	return err
}

// stopAll stops the hosts and then the daemons, newest first; it is safe
// to call twice.
func (lp *lcProject) stopAll() error {
	errs := []error{lp.stopSim()}
	for i := len(lp.daemons) - 1; i >= 0; i-- {
		errs = append(errs, lp.daemons[i].Stop(20*time.Second))
	}
	lp.daemons = nil
	return errors.Join(errs...)
}

// died names a program that exited while it should be running.
func (lp *lcProject) died() error {
	for _, pr := range append([]*projectrun.Proc{lp.sim}, lp.daemons...) {
		if pr != nil && !pr.Running() {
			return fmt.Errorf("%s exited: %v (see its log)", pr.Name(), pr.Err())
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
	c, err := projectrun.CountLive(ctx, lp.db)
	return lcProgress{Jobs: c.Jobs, Unassimilated: c.Unassimilated, NeedValidate: c.NeedValidate,
		NotOver: c.NotOver(), InProgress: c.InProgress, Unsent: c.Unsent}, err
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

// waitUntil polls cond until it holds, p exits, or ctx ends.
func waitUntil(ctx context.Context, p *projectrun.Proc, cond func() bool) error {
	for !cond() {
		if !p.Running() {
			return fmt.Errorf("%s exited: %v", p.Name(), p.Err())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
