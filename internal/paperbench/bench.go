package paperbench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/taskserver/taskserver/db/schema"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/procstat"
	"github.com/taskserver/taskserver/internal/projectrun"
)

// The phases, in the order a job lives through them.
const (
	PhaseCreation     = "creation"
	PhaseDispatch     = "dispatch"
	PhaseValidation   = "validation"
	PhaseAssimilation = "assimilation"
	PhaseFileDeletion = "file_deletion"
	PhasePurge        = "purge"
)

// PhaseNames lists the phases in order.
var PhaseNames = []string{PhaseCreation, PhaseDispatch, PhaseValidation, PhaseAssimilation, PhaseFileDeletion, PhasePurge}

// Options configures a benchmark run.
type Options struct {
	// BinDir holds the built programs.
	BinDir string
	// Jobs is the number of jobs; each has two instances.
	Jobs int
	// DSN names an existing server (no database name); empty starts a
	// private MariaDB for the run.
	DSN string
	// ProjectDir is the project directory; empty makes a temporary one,
	// removed after a successful run.
	ProjectDir string
	// Phases is how many phases to run, from creation on; 0 means all six.
	Phases int
	// PhaseTimeout bounds each phase; 0 means 30 minutes.
	PhaseTimeout time.Duration
	// Conns is the load generator's concurrent connections; 0 means 64.
	Conns int
	// HostsPerConn is the simulated hosts each connection serves in turn;
	// 0 means 2.
	HostsPerConn int
	// DBLogFileSize is the private server's innodb_log_file_size; empty
	// keeps MariaDB's default (96 MiB).
	DBLogFileSize string
	// Out receives progress lines.
	Out io.Writer
}

// benchDatabase is the database the benchmark makes on the server.
const benchDatabase = "taskserver_bench"

func (o *Options) defaults() error {
	if o.Jobs < 1 {
		return fmt.Errorf("jobs %d: want at least 1", o.Jobs)
	}
	if o.Phases <= 0 || o.Phases > len(PhaseNames) {
		o.Phases = len(PhaseNames)
	}
	if o.PhaseTimeout <= 0 {
		o.PhaseTimeout = 30 * time.Minute
	}
	if o.Conns <= 0 {
		o.Conns = 64
	}
	if o.HostsPerConn <= 0 {
		o.HostsPerConn = 2
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	return nil
}

// anyPort has every program listen on a port of the kernel's choice, which
// it reports (--addr-file).
const anyPort = "127.0.0.1:0"

// bench is one run's state.
type bench struct {
	opts    Options
	proj    *project
	db      *sql.DB // completion checks only
	dbPID   int
	urlBase string // the scheduler's, once it runs
	http    *http.Client
}

// Run sets up the database and project, runs the phases and returns the
// report. The report is returned (partly filled) also with an error, which
// is set when a phase failed or something was lost.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	r := &Report{Jobs: o.Jobs, Instances: 2 * o.Jobs, CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
		GitVersion: daemon.Version, Started: time.Now().UTC().Format(time.RFC3339), Reference: IssueReference}
	tmp, err := os.MkdirTemp("", "paperbench-")
	if err != nil {
		return nil, err
	}
	keepTmp := false
	defer func() {
		if !keepTmp {
			_ = os.RemoveAll(tmp)
		}
	}()

	serverDSN := o.DSN
	b := &bench{opts: o, http: &http.Client{Timeout: 5 * time.Second}}
	if serverDSN == "" {
		fmt.Fprintf(o.Out, "starting a private MariaDB in %s\n", filepath.Join(tmp, "db"))
		pdb, err := startPrivateDB(ctx, filepath.Join(tmp, "db"), o.DBLogFileSize)
		if err != nil {
			return nil, err
		}
		defer pdb.stop()
		serverDSN, b.dbPID = pdb.dsn, pdb.pid()
	}
	admin, err := sql.Open("mysql", serverDSN)
	if err != nil {
		return nil, fmt.Errorf("open database server: %w", err)
	}
	defer admin.Close()
	if err := admin.QueryRowContext(ctx, "SELECT VERSION(), @@innodb_log_file_size").Scan(&r.DBVersion, &r.DBLogFileBytes); err != nil {
		return nil, fmt.Errorf("database server version: %w", err)
	}
	if b.dbPID == 0 {
		if b.dbPID, err = procstat.DBServerPID(ctx, admin); err != nil {
			return nil, err
		}
	}
	if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+benchDatabase); err != nil {
		return nil, fmt.Errorf("drop database %s: %w", benchDatabase, err)
	}
	if _, err := admin.ExecContext(ctx, schema.CreateDatabase(benchDatabase)); err != nil {
		return nil, fmt.Errorf("create database %s: %w", benchDatabase, err)
	}
	defer func() { _, _ = admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+benchDatabase) }()
	dsn, err := withDatabase(serverDSN, benchDatabase)
	if err != nil {
		return nil, err
	}
	if b.db, err = sql.Open("mysql", dsn); err != nil {
		return nil, err
	}
	b.db.SetMaxOpenConns(2)
	defer b.db.Close()

	dir := o.ProjectDir
	if dir == "" {
		dir = filepath.Join(tmp, "project")
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	users := o.Conns * o.HostsPerConn
	if b.proj, err = setupProject(ctx, dir, dsn, users); err != nil {
		return nil, fmt.Errorf("set up project: %w", err)
	}
	defer b.proj.removeShm()
	fmt.Fprintf(o.Out, "project %s, database %s on %s (pid %d), %d jobs\n", dir, benchDatabase, r.DBVersion, b.dbPID, o.Jobs)

	var runErr error
	for _, spec := range b.phases()[:o.Phases] {
		if spec.prepare != nil {
			if err := spec.prepare(ctx); err != nil {
				runErr = fmt.Errorf("prepare phase %s: %w", spec.name, err)
				r.Failures = append(r.Failures, runErr.Error())
				break
			}
		}
		ph, err := b.runPhase(ctx, spec)
		r.Phases = append(r.Phases, ph)
		if err != nil {
			runErr = fmt.Errorf("phase %s: %w", spec.name, err)
			r.Failures = append(r.Failures, runErr.Error())
			break
		}
		fmt.Fprintf(o.Out, "phase %s done: %.1f s wall, programs %.1f s CPU, database %.1f s CPU\n",
			ph.Name, ph.WallS, ph.ProgramCPU(), ph.DBCPUS)
	}
	r.Derive()
	if runErr != nil {
		keepTmp = o.ProjectDir == ""
		fmt.Fprintf(o.Out, "logs kept in %s\n", filepath.Join(dir, "logs"))
	}
	return r, runErr
}

// progSpec is one program of a phase.
type progSpec struct {
	name string
	args []string
	// scheduler: sets b.urlBase and needs the feeder's cache.
	scheduler bool
	// feeder: wait for its cache file before going on.
	feeder bool
}

// phaseSpec is one phase: its programs, its end condition and the checks
// after it.
type phaseSpec struct {
	name     string
	rows     int64
	programs []progSpec
	// done reports whether the phase's end state is reached (a cheap
	// query).
	done func(ctx context.Context) (bool, error)
	// prepare, if set, runs before the phase is measured: what the
	// simulated world does between phases.
	prepare func(ctx context.Context) error
	// drive, if set, is the phase's load; the phase ends when it returns
	// and done agrees.
	drive func(ctx context.Context, ph *Phase) error
	// check runs after the measurement: full checks that nothing was lost.
	check func(ctx context.Context) error
}

// phases are the paper's six phases for b's project.
func (b *bench) phases() []phaseSpec {
	n := int64(b.opts.Jobs)
	app := b.proj.appID
	keyFile := filepath.Join(b.proj.dir, "keys", "upload_private")
	return []phaseSpec{{
		name: PhaseCreation, rows: 3 * n,
		programs: []progSpec{
			{name: "work_generator", args: []string{"--total-jobs", strconv.FormatInt(n, 10),
				"--unsent-target", strconv.FormatInt(2*n+2, 10), "--min-quorum", "2", "--target-nresults", "2",
				"--delay-bound", "168h", "--rsc-fpops-est", "1e10"}},
			{name: "transitioner"},
		},
		done: b.countIs(2*n, `SELECT COUNT(*) FROM result WHERE server_state = 2`),
		check: b.checks(
			b.expect(n, "jobs", `SELECT COUNT(*) FROM workunit`),
			b.expect(2*n, "instances", `SELECT COUNT(*) FROM result`)),
	}, {
		name: PhaseDispatch, rows: 2 * n,
		programs: []progSpec{
			{name: "feeder", feeder: true},
			{name: "scheduler", scheduler: true, args: []string{"--addr", anyPort, "--url-base", "",
				"--upload-key", keyFile, "--max-results-per-rpc", "1", "--request-delay", "1s"}},
		},
		prepare: b.stageOutputs,
		drive:   b.dispatch,
		done:    b.countIs(2*n, `SELECT COUNT(*) FROM result WHERE server_state = 5`),
		check:   b.expect(2*n, "instances reported as a success", `SELECT COUNT(*) FROM result WHERE server_state = 5 AND outcome = 1`),
	}, {
		name: PhaseValidation, rows: 3 * n,
		programs: []progSpec{
			{name: "transitioner"},
			{name: "validator", args: []string{"--checker", "bitwise"}},
		},
		done: b.countIs(n, `SELECT COUNT(*) FROM workunit WHERE appid = ? AND assimilate_state = 1`, app),
		check: b.checks(
			b.expect(n, "jobs with a canonical result", `SELECT COUNT(*) FROM workunit WHERE canonical_resultid <> 0 AND error_mask = 0`),
			b.expect(2*n, "valid instances", `SELECT COUNT(*) FROM result WHERE validate_state = 1`)),
	}, {
		name: PhaseAssimilation, rows: n,
		programs: []progSpec{
			{name: "assimilator", args: []string{"--handler", "copy", "--results-dir", "results"}},
		},
		done: b.countIs(n, `SELECT COUNT(*) FROM workunit WHERE appid = ? AND assimilate_state = 2`, app),
		// Each job's two outputs, "out" and "log".
		check: b.filesIn(2*n, "results"),
	}, {
		name: PhaseFileDeletion, rows: 3 * n,
		programs: []progSpec{
			{name: "transitioner"},
			{name: "file_deleter"},
		},
		done: b.all(
			b.countIs(n, `SELECT COUNT(*) FROM workunit WHERE file_delete_state = 2`),
			b.countIs(2*n, `SELECT COUNT(*) FROM result WHERE file_delete_state = 2`)),
		// Only the shared model is left in the download directory: the
		// file deleter keeps a shared file for --shared-file-grace after
		// its last job.
		check: b.checks(b.filesIn(0, "upload"), b.sharedFilesIn("download")),
	}, {
		name: PhasePurge, rows: 3 * n,
		programs: []progSpec{
			{name: "db_purge", args: []string{"--min-age", "0", "--archive-dir", "archives"}},
		},
		done: b.all(
			b.countIs(0, `SELECT EXISTS (SELECT 1 FROM workunit)`),
			b.countIs(0, `SELECT EXISTS (SELECT 1 FROM result)`)),
		check: b.checks(
			b.expect(0, "jobs left", `SELECT COUNT(*) FROM workunit`),
			b.expect(0, "instances left", `SELECT COUNT(*) FROM result`)),
	}}
}

// countIs is a done condition: query's single number equals want.
func (b *bench) countIs(want int64, query string, args ...any) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		var got int64
		if err := b.db.QueryRowContext(ctx, query, args...).Scan(&got); err != nil {
			return false, fmt.Errorf("%s: %w", query, err)
		}
		return got == want, nil
	}
}

// all is a done condition met when each of conds is, checked in order.
func (b *bench) all(conds ...func(context.Context) (bool, error)) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		for _, c := range conds {
			if ok, err := c(ctx); !ok || err != nil {
				return false, err
			}
		}
		return true, nil
	}
}

// expect is a check: query's number must be want.
func (b *bench) expect(want int64, what, query string) func(context.Context) error {
	return func(ctx context.Context) error {
		var got int64
		if err := b.db.QueryRowContext(ctx, query).Scan(&got); err != nil {
			return fmt.Errorf("%s: %w", query, err)
		}
		if got != want {
			return fmt.Errorf("%s: %d, want %d", what, got, want)
		}
		return nil
	}
}

// filesIn is a check: the project subdirectory holds want regular files.
func (b *bench) filesIn(want int64, sub string) func(context.Context) error {
	return func(context.Context) error {
		// The file deleter leaves tombstones for outputs whose upload
		// certificates are still good; they are not files left over.
		left, err := outputfile.ListLeft(filepath.Join(b.proj.dir, sub), time.Now())
		if err != nil {
			return fmt.Errorf("list files in %s: %w", sub, err)
		}
		if int64(len(left)) != want {
			return fmt.Errorf("%d files in %s, want %d (first: %q)", len(left), sub, want, left[:min(len(left), 5)])
		}
		return nil
	}
}

// sharedFilesIn is a check: the project subdirectory holds the live
// shared files (with their gzip'd copies) and nothing else.
func (b *bench) sharedFilesIn(sub string) func(context.Context) error {
	return func(ctx context.Context) error {
		var want int64
		if err := b.db.QueryRowContext(ctx, `SELECT COUNT(*) + COALESCE(SUM(gzipped_nbytes > 0), 0) FROM shared_file WHERE state = 0`).Scan(&want); err != nil {
			return fmt.Errorf("count shared files: %w", err)
		}
		return b.filesIn(want, sub)(ctx)
	}
}

// checks runs each check and joins their errors.
func (b *bench) checks(cs ...func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		var errs []error
		for _, c := range cs {
			errs = append(errs, c(ctx))
		}
		return errors.Join(errs...)
	}
}

// runPhase starts the phase's programs, waits for its end condition, and
// measures: the database server's CPU and I/O between start and end, each
// program's CPU over its life (read just before it is stopped), and memory
// sampled once a second.
func (b *bench) runPhase(ctx context.Context, spec phaseSpec) (Phase, error) {
	ph := Phase{Name: spec.name, CPUS: map[string]float64{}, PeakRSSBytes: map[string]int64{},
		StartRSSBytes: map[string]int64{}, EndRSSBytes: map[string]int64{}, Rows: spec.rows}
	ctx, cancel := context.WithTimeout(ctx, b.opts.PhaseTimeout)
	defer cancel()
	fmt.Fprintf(b.opts.Out, "phase %s: starting %s\n", spec.name, names(spec.programs))
	dbBefore, err := procstat.Read(b.dbPID)
	if err != nil {
		return ph, err
	}
	start := time.Now()
	var progs []*program
	stopAll := func() error {
		var errs []error
		for i := len(progs) - 1; i >= 0; i-- {
			errs = append(errs, progs[i].Stop(30*time.Second))
		}
		return errors.Join(errs...)
	}
	samplerDone := make(chan struct{})
	var samplerWG sync.WaitGroup
	defer func() {
		select {
		case <-samplerDone:
		default:
			close(samplerDone)
		}
		samplerWG.Wait()
	}()
	for _, ps := range spec.programs {
		p, err := b.launch(ctx, ps)
		if err != nil {
			return ph, errors.Join(err, stopAll())
		}
		progs = append(progs, p)
	}
	samplerWG.Add(1)
	go func() {
		defer samplerWG.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-samplerDone:
				return
			case <-t.C:
				for _, p := range progs {
					p.sample()
				}
			}
		}
	}()

	var waitErr error
	if spec.drive != nil {
		waitErr = spec.drive(ctx, &ph)
		if waitErr == nil {
			waitErr = b.watch(ctx, spec, progs, 200*time.Millisecond)
		}
	} else {
		waitErr = b.watch(ctx, spec, progs, 500*time.Millisecond)
	}
	ph.WallS = round3(time.Since(start).Seconds())
	dbAfter, err := procstat.Read(b.dbPID)
	if err != nil {
		waitErr = errors.Join(waitErr, err)
	}
	d := dbAfter.Sub(dbBefore)
	ph.DBCPUS, ph.DBReadBytes, ph.DBWriteBytes = round3(d.CPUSeconds), d.ReadBytes, d.WriteBytes
	close(samplerDone)
	samplerWG.Wait()
	for _, p := range progs {
		p.sample()
		first, last, peak := p.usage()
		ph.CPUS[p.Name()] = round3(ph.CPUS[p.Name()] + last.CPUSeconds)
		ph.PeakRSSBytes[p.Name()] = peak
		ph.StartRSSBytes[p.Name()] = first.RSSBytes
		ph.EndRSSBytes[p.Name()] = last.RSSBytes
	}
	if err := stopAll(); err != nil {
		waitErr = errors.Join(waitErr, err)
	}
	if waitErr == nil && spec.check != nil {
		waitErr = spec.check(context.WithoutCancel(ctx))
	}
	if waitErr != nil {
		ph.Error = waitErr.Error()
		return ph, waitErr
	}
	ph.Instances = 2 * b.opts.Jobs
	return ph, nil
}

// launch starts one program of a phase and waits until it is ready to be
// measured against: the feeder has made its cache, the scheduler listens.
func (b *bench) launch(ctx context.Context, ps progSpec) (*program, error) {
	args := append([]string{"--config", b.proj.configPath, "--listen", anyPort}, ps.args...)
	pr, err := projectrun.Start(projectrun.Spec{Name: ps.name, Bin: filepath.Join(b.opts.BinDir, ps.name),
		LogDir: filepath.Join(b.proj.dir, "logs"), Args: args, ReportsAddrs: true})
	if err != nil {
		return nil, err
	}
	// No sample yet: the first, a second in, is the program's size once
	// it is running, which "memory flat over the run" compares against.
	p := &program{Proc: pr}
	switch {
	case ps.feeder:
		err = pr.WaitFile(ctx, b.proj.shmPath)
	case ps.scheduler:
		var addr string
		addr, err = pr.WaitAddr(ctx, "addr")
		b.urlBase = "http://" + addr
	}
	if err != nil {
		return p, errors.Join(err, pr.Stop(10*time.Second))
	}
	return p, nil
}

// watch waits for the phase's end condition. It reads the programs'
// items-processed counters every poll and asks the database only when they
// stood still since the previous poll (the daemons went idle) or five
// seconds have passed, so watching costs the database next to nothing.
func (b *bench) watch(ctx context.Context, spec phaseSpec, progs []*program, poll time.Duration) error {
	const maxQuiet = 5 * time.Second
	var lastItems = -1.0
	lastCheck := time.Now()
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("end condition not reached: %w", ctx.Err())
		case <-t.C:
		}
		for _, p := range progs {
			if !p.Running() {
				return fmt.Errorf("%s exited: %v (see %s)", p.Name(), p.Err(), p.LogPath())
			}
		}
		var items float64
		for _, p := range progs {
			v, err := p.itemsProcessed(ctx, b.http)
			if err != nil {
				items = -2 // unreadable: fall back to the periodic check
				break
			}
			items += v
		}
		idle := items >= 0 && items == lastItems
		lastItems = items
		if !idle && time.Since(lastCheck) < maxQuiet {
			continue
		}
		lastCheck = time.Now()
		ok, err := spec.done(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
	}
}

// dispatch is the dispatch phase's load: it runs the load generator and
// records requests, rate, latency and its own CPU.
func (b *bench) dispatch(ctx context.Context, ph *Phase) error {
	g := &loadGen{url: b.urlBase + "/scheduler", uploadDir: filepath.Join(b.proj.dir, "upload"), fanout: 1024,
		want: 2 * int64(b.opts.Jobs)}
	self, _ := procstat.Read(os.Getpid())
	stop := make(chan struct{})
	go b.progress(g, stop)
	res, err := g.run(ctx, b.opts.Conns, b.opts.HostsPerConn, b.proj.auths)
	close(stop)
	after, _ := procstat.Read(os.Getpid())
	ph.LoadgenCPUS = round3(after.CPUSeconds - self.CPUSeconds)
	ph.Requests, ph.NoWorkReplies, ph.UnackedReports = g.requests.Load(), g.noWork.Load(), g.unacked.Load()
	if res.elapsed > 0 {
		ph.RPS = round3(float64(ph.Requests) / res.elapsed.Seconds())
	}
	ph.LatencyMS = LatencyOf(res.latencies)
	return err
}

// progress prints the load generator's counts every ten seconds.
func (b *bench) progress(g *loadGen, stop <-chan struct{}) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			fmt.Fprintf(b.opts.Out, "  dispatch: %d requests, %d of %d instances sent, %d acknowledged\n",
				g.requests.Load(), g.received.Load(), g.want, g.acked.Load())
		}
	}
}

func names(ps []progSpec) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.name)
	}
	return strings.Join(slices.Clip(s), " + ")
}

// round3 rounds to thousandths, so the JSON shows 0.11, not
// 0.11000000000000001 (CPU times come in hundredths anyway).
func round3(x float64) float64 { return math.Round(x*1000) / 1000 }
