package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/dbproxy"
	"github.com/taskserver/taskserver/internal/projectrun"
)

// LoadOptions configures a load run (`chaos load`, `make load`): the chaos
// project without kills, its work generator never short of work, a steady
// stream of hosts for Duration and the database taken away from every
// program once in the middle. Zero values mean the documented defaults.
type LoadOptions struct {
	// BinDir holds the built programs, this one included.
	BinDir string
	// OutDir receives report.json, the logs and the project; default
	// load-report.
	OutDir string
	// Duration is how long the hosts load the scheduler; default 5m. Then
	// generation stops and the run waits for every job to be purged.
	Duration time.Duration
	// Hosts is the number of simulated hosts, Users the accounts they are
	// spread over; default 400 hosts of 40 users.
	Hosts int
	Users int
	// NCPUs is each host's CPUs; default 1.
	NCPUs int
	// ComputeTime is one task's CPU time; default 4s. With NextRPCDelay it
	// sets the mix: a host asks every NextRPCDelay (default 1s) and gets
	// a task every ComputeTime/NCPUs.
	ComputeTime  time.Duration
	NextRPCDelay time.Duration
	// DBCut is how long the programs' database connections stay cut, from
	// the middle of the run; default 10s.
	DBCut time.Duration
	// DelayBound is each job's deadline; default 30s.
	DelayBound time.Duration
	// SampleEvery is the memory sampling interval; default 2s.
	SampleEvery time.Duration
	// DrainTimeout bounds the wait for the last jobs; default 10m.
	DrainTimeout time.Duration
	// FailFrac is the share of failing hosts (0 with FailFracSet: none);
	// default DefaultFailFrac.
	FailFrac    float64
	FailFracSet bool
	// Seed makes the hosts reproducible; 0 picks one from the clock.
	Seed uint64
	// Out receives progress lines; default stdout.
	Out io.Writer
}

func (lo *LoadOptions) defaults() error {
	if lo.OutDir == "" {
		lo.OutDir = "load-report"
	}
	if lo.Duration == 0 {
		lo.Duration = 5 * time.Minute
	}
	if lo.Hosts == 0 {
		lo.Hosts = 400
	}
	if lo.Users == 0 {
		lo.Users = 40
	}
	if lo.NCPUs == 0 {
		lo.NCPUs = 1
	}
	if lo.ComputeTime == 0 {
		lo.ComputeTime = 4 * time.Second
	}
	if lo.NextRPCDelay == 0 {
		lo.NextRPCDelay = time.Second
	}
	if lo.DBCut == 0 {
		lo.DBCut = 10 * time.Second
	}
	if lo.DelayBound == 0 {
		lo.DelayBound = 30 * time.Second
	}
	if lo.SampleEvery == 0 {
		lo.SampleEvery = 2 * time.Second
	}
	if lo.DrainTimeout == 0 {
		lo.DrainTimeout = 10 * time.Minute
	}
	if lo.Out == nil {
		lo.Out = os.Stdout
	}
	if lo.Seed == 0 {
		lo.Seed = uint64(time.Now().UnixNano())
	}
	var errs []error
	if lo.Hosts < 1 || lo.Users < 1 || lo.NCPUs < 1 {
		errs = append(errs, fmt.Errorf("hosts %d, users %d, cpus %d: want at least 1", lo.Hosts, lo.Users, lo.NCPUs))
	}
	for _, d := range []time.Duration{lo.Duration, lo.ComputeTime, lo.NextRPCDelay, lo.DBCut, lo.DelayBound, lo.SampleEvery, lo.DrainTimeout} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("duration %s: want a positive one", d))
		}
	}
	if lo.DBCut >= lo.Duration/2 {
		errs = append(errs, fmt.Errorf("db cut %s: want less than half the duration %s", lo.DBCut, lo.Duration))
	}
	return errors.Join(errs...)
}

// chaosOptions is the project of a chaos run the load run sets up.
func (lo LoadOptions) chaosOptions() Options {
	return Options{BinDir: lo.BinDir, OutDir: lo.OutDir, Seed: lo.Seed, Hosts: lo.Hosts, Users: lo.Users,
		FailFrac: lo.FailFrac, FailFracSet: lo.FailFracSet, ComputeTime: lo.ComputeTime,
		DelayBound: lo.DelayBound, Out: lo.Out}
}

// FaultDBCut is the load run's one fault: every database connection cut.
const FaultDBCut = "db_connections_cut"

// DBCut is when the programs lost the database and how long the scheduler
// took to send work again once it came back.
type DBCut struct {
	AtSeconds   float64 `json:"at_s"`
	DownSeconds float64 `json:"down_s"`
	// RecoveredAfterSeconds is from the connections' return to the first
	// result the scheduler sent; -1 when it sent none before the end.
	RecoveredAfterSeconds float64 `json:"recovered_after_s"`
	Recovered             bool    `json:"recovered"`
	ConnectionsDropped    int     `json:"connections_dropped"`
	ConnectionsRefused    int     `json:"connections_refused"`
}

// LoadReport is the outcome of a load run: the rate, the database cut, the
// memory of every daemon, and the chaos checks of what was lost.
type LoadReport struct {
	Report
	DurationSeconds float64 `json:"duration_s"`
	// Requests are the scheduler requests answered (outcome ok) during
	// Duration, RPS their rate; RequestsUnavailable those answered 503
	// because the database was away.
	Requests            int64                   `json:"requests"`
	RPS                 float64                 `json:"rps"`
	RequestsUnavailable int64                   `json:"requests_unavailable"`
	ResultsSent         int64                   `json:"results_sent"`
	Hosts               int                     `json:"hosts"`
	DBCut               DBCut                   `json:"db_cut"`
	Memory              map[string]DaemonMemory `json:"memory"`
	Bounded             bool                    `json:"bounded"`
	DrainSeconds        float64                 `json:"drain_s"`
}

// OK reports whether the run drained, broke no promise, recovered from
// the cut and kept every daemon's memory bounded.
func (r *LoadReport) OK() bool {
	return r.Report.OK() && r.DBCut.Recovered && r.Bounded && r.Requests > 0
}

// Write writes report.json into dir.
func (r *LoadReport) Write(dir string) error { return writeJSON(dir, r) }

// WriteTable prints the rate, the cut, the memory table and the outcome
// counts.
func (r *LoadReport) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%-26s %8.0f\n", "load seconds", r.DurationSeconds)
	fmt.Fprintf(&b, "%-26s %8d\n", "hosts", r.Hosts)
	fmt.Fprintf(&b, "%-26s %8d  (%.0f/s)\n", "scheduler requests", r.Requests, r.RPS)
	fmt.Fprintf(&b, "%-26s %8d\n", "results sent", r.ResultsSent)
	fmt.Fprintf(&b, "%-26s %8d\n", "requests answered 503", r.RequestsUnavailable)
	rec := "never"
	if r.DBCut.Recovered {
		rec = fmt.Sprintf("%.1fs", r.DBCut.RecoveredAfterSeconds)
	}
	fmt.Fprintf(&b, "database cut at %.0fs for %.0fs (%d connections dropped, %d refused); work sent again after %s\n",
		r.DBCut.AtSeconds, r.DBCut.DownSeconds, r.DBCut.ConnectionsDropped, r.DBCut.ConnectionsRefused, rec)
	fmt.Fprintf(&b, "%-26s %8.0f\n\n", "drain seconds", r.DrainSeconds)
	fmt.Fprintf(&b, "%-15s %21s %21s %15s %15s %6s  %s\n", "daemon", "RSS MB first/peak/last", "heap MB first/pk/last", "goroutines",
		"sockets", "CPU s", "bounded")
	names := make([]string, 0, len(r.Memory))
	for n := range r.Memory {
		names = append(names, n)
	}
	sort.Strings(names)
	mb := func(v int64) float64 { return float64(v) / (1 << 20) }
	for _, n := range names {
		m := r.Memory[n]
		fmt.Fprintf(&b, "%-15s %7.1f/%6.1f/%6.1f %7.1f/%6.1f/%6.1f %5d/%4d/%4d %5d/%4d/%4d %6.1f  %v\n", n,
			mb(m.RSSFirst), mb(m.RSSPeak), mb(m.RSSLast), mb(m.HeapFirst), mb(m.HeapPeak), mb(m.HeapLast),
			m.GoroutinesFirst, m.GoroutinesPeak, m.GoroutinesLast, m.SocketsFirst, m.SocketsPeak, m.SocketsLast,
			m.CPUSeconds, m.Bounded)
		for _, note := range m.Notes {
			fmt.Fprintf(&b, "  %s\n", note)
		}
	}
	b.WriteString("\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if err := r.Report.WriteTable(w); err != nil {
		return err
	}
	verdict := "load OK: steady, bounded, recovered from the cut, nothing lost"
	switch {
	case !r.Report.OK():
		verdict = "load FAILED: did not drain or lost something"
	case !r.DBCut.Recovered:
		verdict = "load FAILED: the scheduler sent no work after the database came back"
	case !r.Bounded:
		verdict = "load FAILED: memory or goroutines grew (notes above)"
	case r.Requests == 0:
		verdict = "load FAILED: the scheduler answered no request"
	}
	_, err := fmt.Fprintln(w, verdict)
	return err
}

// loadRun is the state of one load run.
type loadRun struct {
	lo    LoadOptions
	p     *project
	proxy *dbproxy.Proxy
	out   func(string, ...any)

	mu   sync.Mutex
	held map[*projectrun.Proc]bool // stopped on purpose: the work generator after Duration
	cut  DBCut
}

func (l *loadRun) isHeld(pr *projectrun.Proc) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[pr]
}

// RunLoad sets up the project behind a database proxy, loads the
// scheduler for Duration while sampling every daemon, cuts the database in
// the middle, then stops generation, waits for every job to be purged,
// stops everything and checks the outcome. The report is returned
// whenever the checks could run, with an error too when the run did not
// drain.
func RunLoad(ctx context.Context, lo LoadOptions) (*LoadReport, error) {
	if err := lo.defaults(); err != nil {
		return nil, err
	}
	o := lo.chaosOptions()
	if err := o.defaults(); err != nil {
		return nil, err
	}
	started := time.Now()
	_ = mysql.SetLogger(log.New(io.Discard, "", 0)) // the cut's broken connections, logged by the driver
	out := func(format string, args ...any) {
		fmt.Fprintf(lo.Out, "%6.0fs  %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(lo.Out, "chaos load: %s, %d hosts, database cut for %s in the middle, seed %d, output in %s\n",
		lo.Duration, lo.Hosts, lo.DBCut, lo.Seed, lo.OutDir)
	p, err := setup(ctx, o)
	if p != nil {
		defer p.close()
	}
	if err != nil {
		return nil, fmt.Errorf("set up project: %w", err)
	}
	// Never short of work: a backlog of about two seconds of sends.
	p.totalJobs = 0
	p.unsentTarget = max(200, 2*lo.Hosts*lo.NCPUs*int(time.Second)/int(lo.ComputeTime))
	p.schedArgs = []string{"--next-rpc-delay", lo.NextRPCDelay.String()}
	p.simArgs = []string{"--ncpus", fmt.Sprint(lo.NCPUs), "--buffer-per-cpu", "1"}

	cfg, err := mysql.ParseDSN(p.dsn)
	if err != nil {
		return nil, err
	}
	proxy, err := dbproxy.Start(cfg.Addr)
	if err != nil {
		return nil, err
	}
	defer proxy.Close()
	cfg.Addr = proxy.Addr()
	if err := p.writeConfig(cfg.FormatDSN()); err != nil {
		return nil, err
	}
	l := &loadRun{lo: lo, p: p, proxy: proxy, out: out, held: map[*projectrun.Proc]bool{}}

	runCtx, cancel := context.WithTimeout(ctx, lo.Duration+lo.DrainTimeout+2*time.Minute)
	defer cancel()
	if err := p.startDaemons(runCtx); err != nil {
		return nil, err
	}
	sim := p.simclient("hosts", lo.Hosts, lo.Seed, 0, o.FailFrac, o.CheatFrac)
	p.sims = append(p.sims, sim)
	if err := sim.Start(); err != nil {
		return nil, errors.Join(err, p.stopAll())
	}
	out("project running: scheduler %s, database through %s, logs in %s", p.urlBase, proxy.Addr(), filepath.Join(p.dir, "logs"))

	loadStart := time.Now()
	s := newSampler(p, loadStart)
	sampleCtx, stopSampling := context.WithCancel(runCtx)
	var side sync.WaitGroup
	side.Go(func() { s.run(sampleCtx, lo.SampleEvery) })
	cutCtx, stopCut := context.WithCancel(runCtx)
	side.Go(func() { l.cutDatabase(cutCtx, s, loadStart) })

	runErr := l.load(runCtx, s, loadStart)
	stopSampling()
	drainStart := time.Now()
	if runErr == nil {
		runErr = l.drain(runCtx)
	}
	drained := time.Since(drainStart)
	stopCut()
	side.Wait()
	cancel()
	stopErr := p.stopAll()

	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer ccancel()
	cr, err := p.check(cctx)
	if err != nil {
		return nil, errors.Join(runErr, stopErr, err)
	}
	r := &LoadReport{Report: *cr, Hosts: lo.Hosts, DrainSeconds: drained.Seconds(), Memory: map[string]DaemonMemory{}}
	r.Seed = lo.Seed
	r.Finished = runErr == nil
	r.ElapsedSeconds = time.Since(started).Seconds()
	r.Faults = map[string]int{FaultDBCut: 1}
	for _, d := range p.daemons {
		r.UnexpectedExits += d.Crashes()
	}
	if stopErr != nil {
		r.Notes = append(r.Notes, "stop: "+stopErr.Error())
	}
	l.fill(r, s)
	if err := s.writeCSV(filepath.Join(lo.OutDir, "memory.csv")); err != nil {
		r.Notes = append(r.Notes, "memory.csv: "+err.Error())
	}
	return r, runErr
}

// load keeps the project running for Duration, printing the rate.
func (l *loadRun) load(ctx context.Context, s *sampler, start time.Time) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	end := start.Add(l.lo.Duration)
	lastReq, lastAt, lastPrint := 0.0, 0.0, time.Now()
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("load: %w", ctx.Err())
		case <-tick.C:
		}
		if err := l.p.restartExited(l.isHeld, l.out); err != nil {
			return err
		}
		if time.Since(lastPrint) < 10*time.Second {
			continue
		}
		lastPrint = time.Now()
		req, at := s.requestsSoFar()
		rate := 0.0
		if at > lastAt {
			rate = (req - lastReq) / (at - lastAt)
		}
		lastReq, lastAt = req, at
		pg, err := l.p.liveProgress(ctx)
		if err != nil {
			l.out("load: %.0f requests/s | database unreadable: %v", rate, err)
			continue
		}
		l.out("load: %.0f requests/s | jobs live %d | instances unsent %d, in progress %d, over %d",
			rate, pg.live, pg.unsent, pg.inProgress, pg.over)
	}
	return nil
}

// drain stops the work generator and waits until every job is finished
// and purged, the hosts still computing what they hold.
func (l *loadRun) drain(ctx context.Context) error {
	gen := l.p.daemon("work_generator")
	l.mu.Lock()
	l.held[gen] = true
	l.mu.Unlock()
	if err := stopRunning(gen, 30*time.Second); err != nil {
		return fmt.Errorf("stop generation: %w", err)
	}
	l.out("load over: generation stopped, draining")
	dctx, cancel := context.WithTimeout(ctx, l.lo.DrainTimeout)
	defer cancel()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastPrint := time.Now()
	for {
		select {
		case <-dctx.Done():
			return fmt.Errorf("drain did not finish: %w", dctx.Err())
		case <-tick.C:
		}
		if err := l.p.restartExited(l.isHeld, l.out); err != nil {
			return err
		}
		pg, err := l.p.liveProgress(dctx)
		if err != nil {
			continue
		}
		if pg.live == 0 {
			l.out("every job purged: drained")
			return nil
		}
		if time.Since(lastPrint) >= 10*time.Second {
			l.out("draining: jobs live %d | instances unsent %d, in progress %d, over %d", pg.live, pg.unsent, pg.inProgress, pg.over)
			lastPrint = time.Now()
		}
	}
}

// cutDatabase waits for the middle of the run, cuts every database
// connection for DBCut, gives them back and measures how long the
// scheduler takes to send a result again.
func (l *loadRun) cutDatabase(ctx context.Context, s *sampler, start time.Time) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Until(start.Add(l.lo.Duration / 2))):
	}
	cutAt := time.Since(start)
	dropped := l.proxy.Cut()
	l.out("fault: every database connection cut (%d dropped), new ones refused for %s", dropped, l.lo.DBCut)
	select {
	case <-ctx.Done():
	case <-time.After(l.lo.DBCut):
	}
	// The baseline before the return: nothing is sent while cut.
	sched := l.p.daemon("scheduler")
	baseline := math.NaN()
	if addr := sched.Addr(daemon.AdminListener); addr != "" {
		if fams, err := scrape(ctx, s.client, addr); err == nil {
			baseline = metricValue(fams, metricSchedSent, "", "")
		}
	}
	l.proxy.Restore()
	back := time.Now()
	l.mu.Lock()
	l.cut = DBCut{AtSeconds: cutAt.Seconds(), DownSeconds: time.Since(start).Seconds() - cutAt.Seconds(),
		RecoveredAfterSeconds: -1, ConnectionsDropped: dropped, ConnectionsRefused: l.proxy.Refused()}
	l.mu.Unlock()
	l.out("fault: database connections forwarded again")

	// The first result sent after the return: poll the scheduler's counter
	// more often than the sampler does.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if addr := sched.Addr(daemon.AdminListener); addr != "" {
			if fams, err := scrape(ctx, s.client, addr); err == nil {
				v := metricValue(fams, metricSchedSent, "", "")
				switch {
				case math.IsNaN(baseline) || v < baseline:
					baseline = v
				case v > baseline:
					after := time.Since(back).Seconds()
					l.mu.Lock()
					l.cut.Recovered, l.cut.RecoveredAfterSeconds = true, after
					l.mu.Unlock()
					l.out("recovered: the scheduler sent work %.1fs after the database came back", after)
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			l.out("not recovered: the scheduler sent no work after the database came back")
			return
		case <-tick.C:
		}
	}
}

// fill puts the rate, the cut and the memory figures into r.
func (l *loadRun) fill(r *LoadReport, s *sampler) {
	l.mu.Lock()
	r.DBCut = l.cut
	l.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	r.DurationSeconds = s.lastAt
	r.Requests = int64(s.requests.total)
	r.RequestsUnavailable = int64(s.refused.total)
	r.ResultsSent = int64(s.sent.total)
	if s.lastAt > 0 {
		r.RPS = s.requests.total / s.lastAt
	}
	w := newBoundWindow(l.lo.Duration.Seconds(), r.DBCut.AtSeconds, r.DBCut.DownSeconds)
	r.Bounded = len(s.series) > 0
	for name, xs := range s.series {
		m := summarize(xs, w)
		if c := s.cpu[name]; c != nil {
			m.CPUSeconds = c.total
		}
		r.Memory[name] = m
		r.Bounded = r.Bounded && m.Bounded
	}
}
