package scalebench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/db/schema"
	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/privatedb"
	"github.com/taskserver/taskserver/internal/procstat"
	"github.com/taskserver/taskserver/internal/projectrun"
	"github.com/taskserver/taskserver/internal/statuspage"
	"github.com/taskserver/taskserver/internal/store"
)

// Options configures a run.
type Options struct {
	// BinDir holds the built programs.
	BinDir string
	// Sizes are the result-table sizes to measure, in order.
	Sizes []int64
	// DispatchSeconds is how long each load level of the dispatch phase
	// runs; 0 means 10.
	DispatchSeconds float64
	// PhaseTimeout bounds each daemon's phase; 0 means 20 minutes.
	PhaseTimeout time.Duration
	// BufferPool is the private server's innodb_buffer_pool_size; empty
	// means 1G, as `make bench` has it. A sweep (Pools) replaces it.
	BufferPool string
	// Pools, when given, sweep the buffer pool: each size is filled once,
	// and every phase is measured under each of these
	// innodb_buffer_pool_size values in turn, on a copy of the filled
	// data; the main figures are the largest pool's, and each size gets a
	// working set (Size.WorkingSet). Defaults sorts them, smallest first.
	Pools []string
	// Statements runs the server with performance_schema and gives each
	// phase and dispatch level the statement forms that took the most of
	// the server's time (DaemonCost.Statements). The instrumentation costs
	// every statement CPU, so the figures of such a run are not the plain
	// run's.
	Statements bool
	// Out receives progress lines.
	Out io.Writer
}

func (o *Options) defaults() error {
	if len(o.Sizes) == 0 {
		return errors.New("no sizes: give at least one number of result rows")
	}
	for _, s := range o.Sizes {
		if s < 1000 {
			return fmt.Errorf("size %d: want at least 1000 result rows", s)
		}
	}
	if o.DispatchSeconds <= 0 {
		o.DispatchSeconds = 10
	}
	if o.PhaseTimeout <= 0 {
		o.PhaseTimeout = 20 * time.Minute
	}
	if o.BufferPool == "" {
		o.BufferPool = "1G"
	}
	if len(o.Pools) > 0 {
		pools, err := sortPools(o.Pools)
		if err != nil {
			return err
		}
		o.Pools = pools
		o.BufferPool = pools[len(pools)-1]
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	return nil
}

const benchDatabase = "taskserver_scale"

// Run measures every size and returns the report (partly filled, with the
// error, when a size failed).
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	load, _ := os.ReadFile("/proc/loadavg")
	r := &Report{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), GitVersion: daemon.Version,
		Started: time.Now().UTC().Format(time.RFC3339), LoadAvgAtStart: string(trimNL(load)), BufferPool: o.BufferPool,
		BufferPools: o.Pools}
	for _, size := range o.Sizes {
		fmt.Fprintf(o.Out, "== size %d result rows\n", size)
		s, err := runSize(ctx, o, size)
		if s != nil {
			r.Sizes = append(r.Sizes, *s)
		}
		if err != nil {
			return r, fmt.Errorf("size %d: %w", size, err)
		}
	}
	return r, nil
}

// sizeRun is one size's state, under one server.
type sizeRun struct {
	o     Options
	st    *store.Store
	proj  *project
	dbPID int
	http  *http.Client
}

// serverOptions are the private server's settings with buffer pool pool.
// A sweep's servers load no saved page list (of the fill's pool, or of a
// predecessor's): each pool is warmed alike by measurePool.
func (o Options) serverOptions(pool string) privatedb.Options {
	return privatedb.Options{BufferPool: pool, MaxConnections: 500, LogFileSize: "1G", ColdStart: len(o.Pools) > 0,
		StatementStats: o.Statements}
}

// openStore opens the benchmark database on srv, creating it if create.
func openStore(ctx context.Context, srv *privatedb.Server, create bool) (*store.Store, string, error) {
	if create {
		admin, err := sql.Open("mysql", srv.DSN())
		if err != nil {
			return nil, "", err
		}
		_, err = admin.ExecContext(ctx, schema.CreateDatabase(benchDatabase))
		admin.Close()
		if err != nil {
			return nil, "", fmt.Errorf("create database %s: %w", benchDatabase, err)
		}
	}
	cfg, err := mysql.ParseDSN(srv.DSN())
	if err != nil {
		return nil, "", err
	}
	cfg.DBName = benchDatabase
	dsn := cfg.FormatDSN()
	st, err := store.Open(ctx, dsn, store.Options{MaxOpenConns: 2})
	if err != nil {
		return nil, "", err
	}
	return st, dsn, nil
}

func runSize(ctx context.Context, o Options, size int64) (*Size, error) {
	tmp, err := os.MkdirTemp("", "scalebench-")
	if err != nil {
		return nil, err
	}
	keep := false
	defer func() {
		if !keep {
			_ = os.RemoveAll(tmp)
		}
	}()
	// A sweep fills under its largest pool, which its main figures are
	// measured with too.
	pool := o.BufferPool
	if len(o.Pools) > 0 {
		pool = o.Pools[len(o.Pools)-1]
	}
	dbDir := filepath.Join(tmp, "db")
	srv, err := privatedb.Start(ctx, dbDir, o.serverOptions(pool))
	if err != nil {
		return nil, err
	}
	defer func() { srv.Stop() }()
	st, dsn, err := openStore(ctx, srv, true)
	if err != nil {
		return nil, err
	}
	closeSt := func() {
		if st != nil {
			st.Close()
			st = nil
		}
	}
	defer closeSt()
	b := &sizeRun{o: o, st: st, dbPID: srv.PID(), http: &http.Client{Timeout: 5 * time.Second}}
	if b.proj, err = setup(ctx, st, filepath.Join(tmp, "project"), dsn); err != nil {
		return nil, fmt.Errorf("set up project: %w", err)
	}
	defer func() { _ = os.Remove(b.proj.shmPath); _ = os.Remove(b.proj.shmPath + ".lock") }()

	s := &Size{Daemons: map[string]*DaemonCost{}}
	dbBefore, _ := procstat.Read(b.dbPID)
	fs, err := b.proj.fill(ctx, st, size)
	if err != nil {
		return s, fmt.Errorf("fill: %w", err)
	}
	dbAfter, _ := procstat.Read(b.dbPID)
	s.ResultRows, s.Jobs, s.Hosts, s.Users, s.FillS = fs.Results, fs.Jobs, fs.Hosts, fs.Users, fs.Seconds
	s.FillDBCPUS = round3(dbAfter.CPUSeconds - dbBefore.CPUSeconds)
	s.WorkSetJobs = b.proj.setJobs
	fmt.Fprintf(o.Out, "filled %d jobs, %d instances, %d hosts, %d users in %.1f s\n", fs.Jobs, fs.Results, fs.Hosts, fs.Users, fs.Seconds)
	if err := b.proj.stageOutputs(); err != nil {
		return s, fmt.Errorf("stage outputs: %w", err)
	}
	if s.Explain, err = b.explain(ctx); err != nil {
		return s, err
	}
	if len(o.Pools) == 0 {
		err := b.measure(ctx, s)
		if err != nil {
			keep = true
			fmt.Fprintf(o.Out, "logs kept in %s\n", filepath.Join(b.proj.dir, "logs"))
		}
		return s, err
	}

	// The sweep: keep the filled data directory and project, then measure
	// each pool on a copy of them, so that every pool starts from the same
	// tables and work sets.
	closeSt()
	t0 := time.Now()
	if err := srv.Shutdown(); err != nil {
		return s, fmt.Errorf("stop the filled server: %w", err)
	}
	snap := filepath.Join(tmp, "snapshot")
	if err := os.MkdirAll(snap, 0o700); err != nil {
		return s, err
	}
	// Not kept with the logs on failure: at 10^7 rows it is gigabytes.
	defer func() { _ = os.RemoveAll(snap) }()
	// Nor is the last copy: killed, not stopped, its pool is not written back.
	defer func() { srv.Kill() }()
	if err := os.Rename(filepath.Join(dbDir, "data"), filepath.Join(snap, "data")); err != nil {
		return s, err
	}
	if err := copyTree(ctx, b.proj.dir, filepath.Join(snap, "project")); err != nil {
		return s, err
	}
	fmt.Fprintf(o.Out, "filled data directory kept in %.1f s\n", time.Since(t0).Seconds())
	var runs []*Size
	for i, pool := range o.Pools {
		last := i == len(o.Pools)-1
		ps, err := b.measurePool(ctx, s, snap, dbDir, pool, last, &srv)
		if ps != nil {
			runs = append(runs, ps)
		}
		if err != nil {
			keep = true
			fmt.Fprintf(o.Out, "logs kept in %s\n", filepath.Join(b.proj.dir, "logs"))
			if ps != nil {
				s = ps
			}
			s.WorkingSet = workingSet(o.Pools[:len(runs)], runs)
			return s, fmt.Errorf("buffer pool %s: %w", pool, err)
		}
	}
	main := runs[len(runs)-1]
	main.WorkingSet = workingSet(o.Pools, runs)
	return main, nil
}

// measurePool measures the filled project kept in snap under buffer pool
// pool: it puts a copy of the data directory and the project in place (the
// snapshot itself for the last pool), starts a server on it (*srv, whose
// predecessor it kills) and measures every phase. The returned Size has
// filled's fill figures and plans.
func (b *sizeRun) measurePool(ctx context.Context, filled *Size, snap, dbDir, pool string, last bool, srv **privatedb.Server) (*Size, error) {
	fmt.Fprintf(b.o.Out, "== buffer pool %s\n", pool)
	t0 := time.Now()
	// The measured copy is thrown away: killed, it writes back nothing.
	(*srv).Kill()
	if err := os.RemoveAll(dbDir); err != nil {
		return nil, err
	}
	_ = os.Remove(b.proj.shmPath)
	_ = os.Remove(b.proj.shmPath + ".lock")
	if err := os.RemoveAll(b.proj.dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dbDir, 0o700); err != nil {
		return nil, err
	}
	place := func(name, to string) error {
		if last {
			return os.Rename(filepath.Join(snap, name), to)
		}
		return copyTree(ctx, filepath.Join(snap, name), to)
	}
	if err := place("data", filepath.Join(dbDir, "data")); err != nil {
		return nil, err
	}
	if err := place("project", b.proj.dir); err != nil {
		return nil, err
	}
	s, err := privatedb.StartOn(ctx, dbDir, b.o.serverOptions(pool))
	if err != nil {
		return nil, err
	}
	*srv = s
	st, dsn, err := openStore(ctx, s, false)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	if err := b.proj.writeConfig(dsn); err != nil {
		return nil, err
	}
	// Warm the pool as the fill warms it in a run without a sweep: one
	// unmeasured read of every row of the big tables (as much of them as
	// the pool holds stays). Else the first phase measured would pay
	// every pool's cold start, whatever its size.
	if err := st.ScaleWarm(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(b.o.Out, "copy in place, server started and pool warmed in %.1f s\n", time.Since(t0).Seconds())
	pb := &sizeRun{o: b.o, st: st, proj: b.proj, dbPID: s.PID(), http: b.http}
	ps := &Size{ResultRows: filled.ResultRows, Jobs: filled.Jobs, Hosts: filled.Hosts, Users: filled.Users,
		WorkSetJobs: filled.WorkSetJobs, FillS: filled.FillS, FillDBCPUS: filled.FillDBCPUS, Explain: filled.Explain,
		Daemons: map[string]*DaemonCost{}}
	return ps, pb.measure(ctx, ps)
}

// copyTree copies the directory from to the new path to, as cp -a does:
// an independent copy (no hard links) the measured server may change.
func copyTree(ctx context.Context, from, to string) error {
	if out, err := exec.CommandContext(ctx, "cp", "-a", from, to).CombinedOutput(); err != nil {
		return fmt.Errorf("copy %s: %w: %s", from, err, tail(out))
	}
	return nil
}

// measure runs every phase, each on its own, into s.
func (b *sizeRun) measure(ctx context.Context, s *Size) error {
	var errs []error
	step := func(name string, f func(context.Context, *Size) error) {
		if len(errs) > 0 {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, b.o.PhaseTimeout)
		defer cancel()
		if err := f(pctx, s); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	step("status", b.measureStatus)
	step("feeder", b.measureFeeder)
	step("dispatch", b.measureDispatch)
	step("transitioner", b.daemonPhase("transitioner", nil, store.ScaleDueTransition))
	// One validator and one assimilator per app, as a project runs them.
	step("validator", b.daemonPhase("validator", []string{"--checker", "bitwise", "--app"}, store.ScaleNeedValidate))
	step("assimilator", b.daemonPhase("assimilator", []string{"--handler", "copy", "--results-dir", "results", "--app"},
		store.ScaleNeedAssimilate))
	step("file_deleter", b.daemonPhase("file_deleter", nil, store.ScaleFileDeleteReady))
	step("db_purge", b.daemonPhase("db_purge", []string{"--min-age", strconv.FormatInt(time.Now().Unix()-b.proj.purgeBefore, 10) + "s",
		"--archive-dir", "archives"}, store.ScalePurgeable))
	s.derive()
	return errors.Join(errs...)
}

// explain records the hot queries' plans at this size.
func (b *sizeRun) explain(ctx context.Context) ([]Explained, error) {
	ex, err := b.st.ScaleExplain(ctx, b.proj.apps[0], time.Now().Unix())
	if err != nil {
		return nil, err
	}
	out := make([]Explained, 0, len(ex))
	for _, e := range ex {
		out = append(out, Explained{Query: e.Name, Plan: e.Plan})
	}
	return out, nil
}

// bufferVars are the server counters read around each phase.
var bufferVars = []string{"Innodb_buffer_pool_pages_data", "Innodb_buffer_pool_read_requests", "Innodb_buffer_pool_reads", "Innodb_pages_read"}

// meter measures one phase: the database server's CPU and buffer-pool
// counters between start and end.
type meter struct {
	b      *sizeRun
	start  time.Time
	db     procstat.Usage
	status map[string]int64
}

func (b *sizeRun) startMeter(ctx context.Context) (*meter, error) {
	m := &meter{b: b, start: time.Now()}
	var err error
	if m.status, err = b.st.ScaleStatusVars(ctx, bufferVars); err != nil {
		return nil, err
	}
	if b.o.Statements {
		if err := b.st.ScaleStatementsReset(ctx); err != nil {
			return nil, err
		}
	}
	if m.db, err = procstat.Read(b.dbPID); err != nil {
		return nil, err
	}
	return m, nil
}

// stop fills c's wall time, database CPU and buffer-pool figures.
func (m *meter) stop(ctx context.Context, c *DaemonCost) error {
	db, err := procstat.Read(m.b.dbPID)
	if err != nil {
		return err
	}
	c.WallS = round3(time.Since(m.start).Seconds())
	c.DBCPUS = round3(db.CPUSeconds - m.db.CPUSeconds)
	st, err := m.b.st.ScaleStatusVars(ctx, bufferVars)
	if err != nil {
		return err
	}
	c.BufferPoolDataMB = round3(float64(st["Innodb_buffer_pool_pages_data"]) * 16 / 1024)
	c.BufferPoolReadRequests = st["Innodb_buffer_pool_read_requests"] - m.status["Innodb_buffer_pool_read_requests"]
	c.BufferPoolDiskReads = st["Innodb_buffer_pool_reads"] - m.status["Innodb_buffer_pool_reads"]
	c.BufferPoolPagesRead = st["Innodb_pages_read"] - m.status["Innodb_pages_read"]
	if m.b.o.Statements {
		sts, err := m.b.st.ScaleStatements(ctx, statementsKept)
		if err != nil {
			return err
		}
		c.Statements = make([]Statement, len(sts))
		for i, st := range sts {
			c.Statements[i] = Statement(st)
		}
	}
	return nil
}

// statementsKept is how many statement forms a phase keeps (--statements).
const statementsKept = 12

// start launches one program of the project.
func (b *sizeRun) start(name string, args ...string) (*projectrun.Proc, error) {
	all := append([]string{"--config", b.proj.configPath, "--listen", "127.0.0.1:0"}, args...)
	return projectrun.Start(projectrun.Spec{Name: name, Bin: filepath.Join(b.o.BinDir, name),
		LogDir: filepath.Join(b.proj.dir, "logs"), Args: all, ReportsAddrs: true})
}

// cpuOf reads a running program's CPU seconds.
func cpuOf(p *projectrun.Proc) float64 {
	u, err := procstat.Read(p.PID())
	if err != nil {
		return 0
	}
	return u.CPUSeconds
}

// daemonPhase measures one daemon alone on its work set: it runs until
// none of its work is left (polled by reading one row of it), and its CPU
// and the database's are divided by the jobs it had. Args ending in "--app" start one instance per app, the app's
// name appended.
func (b *sizeRun) daemonPhase(name string, args []string, work store.ScaleWork) func(context.Context, *Size) error {
	return func(ctx context.Context, s *Size) error {
		count := func(limit int64) (int64, error) {
			return b.st.ScaleLeftAt(ctx, work, b.proj.apps[:], time.Now().Unix(), b.proj.purgeBefore, limit)
		}
		jobs, err := count(0)
		if err != nil {
			return err
		}
		if name == "file_deleter" {
			jobs /= 3 // a job and its two instances
		}
		c := &DaemonCost{Jobs: jobs}
		s.Daemons[name] = c
		fmt.Fprintf(b.o.Out, "phase %s: %d jobs\n", name, jobs)
		m, err := b.startMeter(ctx)
		if err != nil {
			return err
		}
		var argSets [][]string
		if len(args) > 0 && args[len(args)-1] == "--app" {
			for a := range b.proj.apps {
				argSets = append(argSets, append(slices.Clone(args), fmt.Sprintf("scale%d", a)))
			}
		} else {
			argSets = [][]string{args}
		}
		var procs []*projectrun.Proc
		defer func() {
			for _, p := range procs {
				_ = p.Stop(30 * time.Second)
			}
		}()
		for _, a := range argSets {
			p, err := b.start(name, a...)
			if err != nil {
				return err
			}
			procs = append(procs, p)
		}
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return fmt.Errorf("work not done: %w (see %s)", ctx.Err(), procs[0].LogPath())
			case <-t.C:
			}
			for _, p := range procs {
				if !p.Running() {
					return fmt.Errorf("exited: %v (see %s)", p.Err(), p.LogPath())
				}
			}
			n, err := count(1)
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
		}
		for _, p := range procs {
			c.CPUS += cpuOf(p)
		}
		c.CPUS = round3(c.CPUS)
		if err := m.stop(ctx, c); err != nil {
			return err
		}
		fmt.Fprintf(b.o.Out, "phase %s done: %.1f s wall, %.2f s CPU, database %.2f s CPU\n", name, c.WallS, c.CPUS, c.DBCPUS)
		return nil
	}
}

// measureStatus times the status page's reading of the database (as the
// page does it uncached), `taskctl status --json` and `taskctl host
// explain` of a GPU host.
func (b *sizeRun) measureStatus(ctx context.Context, s *Size) error {
	m, err := b.startMeter(ctx)
	if err != nil {
		return err
	}
	if _, err := statuspage.Collect(ctx, b.st, nil, b.http, time.Second, time.Now()); err != nil {
		return fmt.Errorf("status page: %w", err)
	}
	s.StatusPageS = round3(time.Since(m.start).Seconds())
	// One page, as a phase of one job: its database CPU per job is the
	// page's.
	s.StatusPage = &DaemonCost{Jobs: 1}
	if err := m.stop(ctx, s.StatusPage); err != nil {
		return err
	}
	s.StatusPage.DBCPUMSPerJob = round3(s.StatusPage.DBCPUS * 1000)
	run := func(args ...string) (float64, error) {
		t0 := time.Now()
		cmd := exec.CommandContext(ctx, filepath.Join(b.o.BinDir, "taskctl"), append([]string{"--config", b.proj.configPath}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("taskctl %v: %w: %s", args, err, tail(out))
		}
		return round3(time.Since(t0).Seconds()), nil
	}
	if s.TaskctlStatusS, err = run("status", "--json"); err != nil {
		return err
	}
	// Host 10 has an NVIDIA GPU and work in progress.
	if s.HostExplainS, err = run("host", "explain", "--host", "10"); err != nil {
		return err
	}
	fmt.Fprintf(b.o.Out, "status page %.3f s, taskctl status %.3f s, host explain %.3f s\n", s.StatusPageS, s.TaskctlStatusS, s.HostExplainS)
	return nil
}

// metric reads one gauge or counter from a program's /metrics.
func (b *sizeRun) metric(ctx context.Context, p *projectrun.Proc, name string) (float64, error) {
	addr := p.Addr(daemon.AdminListener)
	if addr == "" {
		return 0, errors.New("no /metrics address reported")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return metricValue(body, name)
}

// measureFeeder runs the feeder alone: how long until its cache is made,
// its CPU and the database's for the first fill, and the fill ratio.
func (b *sizeRun) measureFeeder(ctx context.Context, s *Size) error {
	c := &FeederCost{}
	s.Feeder = c
	m, err := b.startMeter(ctx)
	if err != nil {
		return err
	}
	p, err := b.start("feeder")
	if err != nil {
		return err
	}
	defer func() { _ = p.Stop(30 * time.Second) }()
	if err := p.WaitFile(ctx, b.proj.shmPath); err != nil {
		return err
	}
	c.FirstFillS = round3(time.Since(m.start).Seconds())
	if _, err := p.WaitAddr(ctx, daemon.AdminListener); err != nil {
		return err
	}
	// A few passes: the ratio at steady state and the passes' cost.
	sleep(ctx, 5*time.Second)
	if c.FillRatio, err = b.metric(ctx, p, "taskserver_feeder_cache_fill_ratio"); err != nil {
		return err
	}
	rows, err := b.metric(ctx, p, "taskserver_feeder_enumerated_rows_total")
	if err != nil {
		return err
	}
	c.EnumeratedRows = int64(rows)
	c.CPUS = round3(cpuOf(p))
	var dc DaemonCost
	if err := m.stop(ctx, &dc); err != nil {
		return err
	}
	c.WallS, c.DBCPUS, c.BufferPoolDataMB, c.BufferPoolDiskReads = dc.WallS, dc.DBCPUS, dc.BufferPoolDataMB, dc.BufferPoolDiskReads
	c.BufferPoolPagesRead, c.Statements = dc.BufferPoolPagesRead, dc.Statements
	fmt.Fprintf(b.o.Out, "feeder: cache made in %.2f s, fill ratio %.2f, %d rows enumerated in %.1f s\n", c.FirstFillS, c.FillRatio, c.EnumeratedRows, c.WallS)
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func tail(b []byte) []byte { return privatedb.Tail(b, 400) }

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }
