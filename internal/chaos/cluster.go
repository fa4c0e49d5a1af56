package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	dto "github.com/prometheus/client_model/go"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/galera"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/privatedb"
	"github.com/taskserver/taskserver/internal/procstat"
	"github.com/taskserver/taskserver/internal/projectrun"
)

// FaultNodeKill is the fault kind of a database node killed with SIGKILL
// and started again (a cluster run).
const FaultNodeKill = "node_kill"

// ClusterOptions configures a cluster run (`chaos cluster`, `make
// cluster`): the chaos run's project on a Galera cluster, with two
// feeder/scheduler pairs and a database node killed and rejoined.
type ClusterOptions struct {
	// Options are the chaos run's; Kills (daemon SIGKILLs) and BurstHosts
	// (the scheduler flood) may be 0 here: ClusterOptions' own fields set
	// them.
	Options
	// DaemonKills is how many SIGKILLs of daemons to inject besides the
	// node kill; 0 injects none.
	DaemonKills int
	// Burst is the number of extra hosts of a scheduler flood; 0: none.
	Burst int
	// Nodes is the cluster's size; default 3.
	Nodes int
	// Single runs on one plain private server instead of a cluster, with
	// no node kill and no server restart: the same project, for the
	// capacity model's baseline.
	Single bool
	// Pairs is the number of feeder/scheduler pairs; default 2.
	Pairs int
	// NodeDown is how long the killed node stays down; default 10s.
	NodeDown time.Duration
	// KillAt is the share of the jobs handed to the assimilator after
	// which the node is killed; default 0.3.
	KillAt float64
	// FailoverDSNs gives every daemon the whole list of node DSNs,
	// starting at its own node, instead of its own node's only.
	FailoverDSNs bool
}

// NodeRejoin is one node kill and what happened after it.
type NodeRejoin struct {
	Node string `json:"node"`
	// Transfer is how the node got the cluster's state back: IST, SST.
	Transfer string `json:"transfer"`
	// Position is the uuid:seqno --wsrep-recover found before the restart.
	Position      string  `json:"position"`
	DownSeconds   float64 `json:"down_seconds"`
	RejoinSeconds float64 `json:"rejoin_seconds"`
}

// ClusterReport is the outcome of a cluster run: the chaos run's counts
// (all must be 0) and the cluster's figures. report.json holds it.
type ClusterReport struct {
	Report
	Mode      string `json:"mode"` // galera or single
	Nodes     int    `json:"nodes"`
	Pairs     int    `json:"feeder_scheduler_pairs"`
	NodeKills int    `json:"node_kills"`
	// Rejoins lists every node kill; a node that did not come back is a
	// failure.
	Rejoins []NodeRejoin `json:"rejoins"`
	// Failovers sums db_failovers_total over every daemon and restart.
	Failovers float64 `json:"failovers"`
	// CertificationConflicts sums the nodes' wsrep_local_cert_failures and
	// wsrep_local_bf_aborts: transactions that lost to another node's
	// write-set and came back as error 1213. Retries1213 is what the
	// daemons counted as db_retries_total{code="1213"}.
	CertificationConflicts float64 `json:"certification_conflicts"`
	CertFailures           float64 `json:"cert_failures"`
	BFAborts               float64 `json:"bf_aborts"`
	Retries1213            float64 `json:"retries_1213"`
	// ClaimsOK and ClaimsConflict are the schedulers' cache_claims_total;
	// ClaimsLostFraction is conflict / (ok + conflict): claims a
	// scheduler lost to another for the same cached instance.
	ClaimsOK           float64 `json:"claims_ok"`
	ClaimsConflict     float64 `json:"claims_conflict"`
	ClaimsLostFraction float64 `json:"claims_lost_fraction"`
	// RunSeconds is from the daemons' start to the last job purged.
	RunSeconds    float64 `json:"run_seconds"`
	JobsPerMinute float64 `json:"jobs_per_minute"`
	// DBCPUSeconds is each database server's CPU time over the run
	// (SST/IST helpers excluded), DBCPUSecondsTotal their sum, and
	// DBCPUMsPerInstance the total per instance made.
	DBCPUSeconds       map[string]float64 `json:"db_cpu_seconds"`
	DBCPUSecondsTotal  float64            `json:"db_cpu_seconds_total"`
	DBCPUMsPerInstance float64            `json:"db_cpu_ms_per_instance"`
}

// OK reports whether the run finished, broke no promise and, on a
// cluster, killed a node that came back.
func (r *ClusterReport) OK() bool {
	if !r.Report.OK() {
		return false
	}
	if r.Mode == "single" {
		return true
	}
	if r.NodeKills < 1 || len(r.Rejoins) < r.NodeKills {
		return false
	}
	for _, j := range r.Rejoins {
		if j.Transfer == "" {
			return false
		}
	}
	return true
}

// WriteTable prints the chaos table and the cluster's figures.
func (r *ClusterReport) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%-26s %8s  (%d nodes, %d feeder/scheduler pairs)\n", "database", r.Mode, r.Nodes, r.Pairs)
	for _, j := range r.Rejoins {
		fmt.Fprintf(&b, "%-26s %8s  (%s down %.0fs, back in %.1fs from %s)\n", "node killed, rejoined by", j.Transfer,
			j.Node, j.DownSeconds, j.RejoinSeconds, j.Position)
	}
	fmt.Fprintf(&b, "%-26s %8.0f\n", "db failovers", r.Failovers)
	fmt.Fprintf(&b, "%-26s %8.0f  (cert failures %.0f, BF aborts %.0f; daemons' 1213 retries %.0f)\n",
		"certification conflicts", r.CertificationConflicts, r.CertFailures, r.BFAborts, r.Retries1213)
	fmt.Fprintf(&b, "%-26s %8.3f  (ok %.0f, conflict %.0f)\n", "claims lost fraction", r.ClaimsLostFraction, r.ClaimsOK, r.ClaimsConflict)
	fmt.Fprintf(&b, "%-26s %8.0f  (%d jobs in %.0fs)\n", "jobs per minute", r.JobsPerMinute, r.Jobs, r.RunSeconds)
	names := make([]string, 0, len(r.DBCPUSeconds))
	for n := range r.DBCPUSeconds {
		names = append(names, n)
	}
	sort.Strings(names)
	var per []string
	for _, n := range names {
		per = append(per, fmt.Sprintf("%s %.1f", n, r.DBCPUSeconds[n]))
	}
	fmt.Fprintf(&b, "%-26s %8.1f  (%s)\n", "database CPU seconds", r.DBCPUSecondsTotal, strings.Join(per, ", "))
	fmt.Fprintf(&b, "%-26s %8.2f  (%d instances)\n\n", "database CPU ms/instance", r.DBCPUMsPerInstance, r.Instances)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if err := r.Report.WriteTable(w); err != nil {
		return err
	}
	if r.Mode != "single" && r.Report.OK() && !r.OK() {
		_, err := io.WriteString(w, "FAILED: no database node was killed and rejoined\n")
		return err
	}
	return nil
}

// Write writes report.json into dir.
func (r *ClusterReport) Write(dir string) error { return writeJSON(dir, r) }

// dbNode is one database server of the run, as the harness sees it.
type dbNode struct {
	name string
	dsn  string
	cpu  func() float64
	// status reads the node's wsrep counters; nil for a plain server.
	status func(context.Context) (galera.Status, error)
}

// RunCluster sets up the project on a Galera cluster (or one server),
// runs the jobs with the daemons spread over the nodes, kills a node
// mid-run and brings it back, and checks the outcome as Run does.
func RunCluster(ctx context.Context, co ClusterOptions) (*ClusterReport, error) {
	if co.OutDir == "" {
		co.OutDir = "cluster-report"
	}
	o := co.Options
	if err := o.defaults(); err != nil {
		return nil, err
	}
	o.Kills, o.BurstHosts = co.DaemonKills, co.Burst
	if co.Nodes <= 0 {
		co.Nodes = 3
	}
	if co.Single {
		co.Nodes = 1
	}
	if co.Pairs <= 0 {
		co.Pairs = 2
	}
	if co.NodeDown <= 0 {
		co.NodeDown = 10 * time.Second
	}
	if co.KillAt <= 0 || co.KillAt >= 1 {
		co.KillAt = 0.3
	}
	if o.Kills < 0 || o.BurstHosts < 0 {
		return nil, fmt.Errorf("daemon kills %d, burst hosts %d: want 0 or more", o.Kills, o.BurstHosts)
	}
	if !co.Single && co.Nodes < 3 {
		return nil, fmt.Errorf("nodes %d: a cluster that survives a node's death needs at least 3", co.Nodes)
	}
	started := time.Now()
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	out := func(format string, args ...any) {
		fmt.Fprintf(o.Out, "%6.0fs  %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, args...))
	}
	mode := "galera"
	if co.Single {
		mode = "single"
	}
	fmt.Fprintf(o.Out, "cluster: %d jobs on %s (%d nodes), %d feeder/scheduler pairs, %d daemon kills, seed %d, output in %s\n",
		o.Jobs, mode, co.Nodes, co.Pairs, o.Kills, o.Seed, o.OutDir)

	p, err := newProject(o)
	if err != nil {
		return nil, fmt.Errorf("set up project: %w", err)
	}
	defer func() {
		p.close()
		for i := 0; i < co.Pairs; i++ {
			_ = os.Remove(p.clusterShmPath(i))
			_ = os.Remove(p.clusterShmPath(i) + ".lock")
		}
	}()
	var cl *galera.Cluster
	var nodes []dbNode
	if co.Single {
		p.db, err = privatedb.Start(ctx, filepath.Join(p.dir, "db"), privatedb.Options{BufferPool: "256M", MaxConnections: 500})
		if err != nil {
			return nil, fmt.Errorf("start private database: %w", err)
		}
		db := p.db
		p.noDBRestart = true
		nodes = []dbNode{{name: "server", dsn: db.DSN(), cpu: func() float64 {
			u, _ := procstat.Read(db.PID())
			return u.CPUSeconds
		}}}
	} else {
		// Not under OutDir: the nodes may run as user mysql, who must be
		// able to reach their directories; /tmp lets everyone through.
		gdir, err := os.MkdirTemp("", "taskserver-cluster-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(gdir)
		out("starting a %d-node Galera cluster (node 1 bootstraps, the others join by SST)", co.Nodes)
		cl, err = galera.Start(ctx, gdir, galera.Options{Nodes: co.Nodes, BufferPool: "256M", MaxConnections: 500})
		if err != nil {
			return nil, fmt.Errorf("start Galera cluster: %w", err)
		}
		defer func() {
			// The nodes' logs outlive their directories.
			for _, n := range cl.Nodes() {
				if b, err := os.ReadFile(n.LogPath()); err == nil {
					_ = os.WriteFile(filepath.Join(p.dir, "logs", n.Name()+".log"), b, 0o644)
				}
			}
			cl.Stop()
		}()
		for _, n := range cl.Nodes() {
			nodes = append(nodes, dbNode{name: n.Name(), dsn: n.DSN(), cpu: n.CPUSeconds, status: n.Status})
		}
	}
	// The schema through node 1, and the harness's reads there, waiting
	// for the cluster's writes.
	var params map[string]string
	if !co.Single {
		params = map[string]string{"wsrep_sync_wait": "1"}
	}
	if err := p.createSchema(ctx, nodes[0].dsn, params); err != nil {
		return nil, fmt.Errorf("set up project: %w", err)
	}
	p.mountUpload(ctx)
	if p.diskFullSkip != "" {
		out("note: the disk-full fault will be skipped: %s", p.diskFullSkip)
	}
	if err := p.writeConfig(p.dsn); err != nil {
		return nil, err
	}

	runCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	dsns := make([]string, len(nodes))
	for i, n := range nodes {
		dsns[i] = n.dsn
	}
	daemonDSN, err := daemonDSNs(dsns, co.FailoverDSNs)
	if err != nil {
		return nil, err
	}
	cpu0 := map[string]float64{}
	for _, n := range nodes {
		cpu0[n.name] = n.cpu()
	}
	runStart := time.Now()
	urls, err := p.startClusterDaemons(runCtx, co.Pairs, daemonDSN)
	if err != nil {
		return nil, err
	}
	p.urlBase = urls[0]
	for i, u := range urls {
		hosts := o.Hosts / len(urls)
		if i < o.Hosts%len(urls) {
			hosts++
		}
		sim := p.simclientAt(u, fmt.Sprintf("hosts.%d", i), hosts, o.Seed+uint64(100*i), 0, o.FailFrac, o.CheatFrac)
		p.sims = append(p.sims, sim)
		if err := sim.Start(); err != nil {
			return nil, errors.Join(err, p.stopAll())
		}
	}
	out("project running: schedulers %s, logs in %s", strings.Join(urls, " "), filepath.Join(p.dir, "logs"))

	smp := newClusterSampler(p, nodes)
	sampleCtx, stopSampling := context.WithCancel(runCtx)
	sampled := make(chan struct{})
	go func() { defer close(sampled); smp.run(sampleCtx, 2*time.Second) }()

	in := newInjector(p, out)
	injected := make(chan error, 1)
	go func() { injected <- in.run(runCtx) }()
	nodeFault := make(chan error, 1)
	var rejoins []NodeRejoin
	var rejoinsMu sync.Mutex
	go func() {
		if cl == nil {
			nodeFault <- nil
			return
		}
		nodeFault <- killNodeMidRun(runCtx, p, cl, co, in, out, func(j NodeRejoin) {
			rejoinsMu.Lock()
			rejoins = append(rejoins, j)
			rejoinsMu.Unlock()
		})
	}()
	// The run is over when the daemon faults and the node fault are.
	faultsDone := make(chan error, 1)
	go func() { faultsDone <- errors.Join(<-injected, <-nodeFault) }()
	runErr := p.watch(runCtx, in, faultsDone, out)
	runSeconds := time.Since(runStart).Seconds()
	stopSampling()
	<-sampled
	smp.sampleAll(context.WithoutCancel(ctx)) // the last counts before the daemons stop
	cancel()
	stopErr := p.stopAll()
	cpu := map[string]float64{}
	cpuTotal := 0.0
	for _, n := range nodes {
		cpu[n.name] = n.cpu() - cpu0[n.name]
		cpuTotal += cpu[n.name]
	}
	smp.sampleNodes(context.WithoutCancel(ctx))

	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer ccancel()
	base, err := p.check(cctx)
	if err != nil {
		return nil, errors.Join(runErr, stopErr, err)
	}
	r := &ClusterReport{Report: *base, Mode: mode, Nodes: co.Nodes, Pairs: co.Pairs, RunSeconds: runSeconds,
		DBCPUSeconds: cpu, DBCPUSecondsTotal: cpuTotal}
	r.Seed = o.Seed
	r.Finished = runErr == nil
	r.ElapsedSeconds = time.Since(started).Seconds()
	in.mu.Lock()
	r.Faults = in.faults
	r.FaultErrors = len(in.errs)
	faultErrs := errors.Join(in.errs...)
	in.mu.Unlock()
	rejoinsMu.Lock()
	r.Rejoins = append([]NodeRejoin{}, rejoins...)
	rejoinsMu.Unlock()
	r.NodeKills = r.Faults[FaultNodeKill]
	for _, k := range []string{FaultNodeKill, FaultDiskFull, FaultOverload} {
		if _, ok := r.Faults[k]; !ok {
			r.Faults[k] = 0
		}
	}
	for _, d := range p.daemons {
		r.UnexpectedExits += d.Crashes()
	}
	r.DiskFullSkipped = p.diskFullSkip
	if stopErr != nil {
		r.Notes = append(r.Notes, "stop: "+stopErr.Error())
	}
	smp.fill(r)
	if runSeconds > 0 {
		r.JobsPerMinute = float64(r.Jobs) / runSeconds * 60
	}
	if r.Instances > 0 {
		r.DBCPUMsPerInstance = cpuTotal * 1000 / float64(r.Instances)
	}
	return r, errors.Join(runErr, faultErrs)
}

// daemonDSNs returns the DSN of the project database to give the daemon
// started k-th on node i: that node's, or with failover every node's,
// starting at its own, so the daemons spread over the nodes and each
// moves on to the next when its node dies.
func daemonDSNs(serverDSNs []string, failover bool) (func(node int) string, error) {
	withDB := make([]string, len(serverDSNs))
	for i, s := range serverDSNs {
		cfg, err := mysql.ParseDSN(s)
		if err != nil {
			return nil, err
		}
		cfg.DBName = database
		withDB[i] = cfg.FormatDSN()
	}
	return func(node int) string {
		node %= len(withDB)
		if !failover {
			return withDB[node]
		}
		list := append(append([]string(nil), withDB[node:]...), withDB[:node]...)
		return strings.Join(list, ",")
	}, nil
}

// clusterShmPath is pair i's shared-memory cache: each feeder/scheduler
// pair has its own.
func (p *project) clusterShmPath(i int) string { return p.shmPath + "." + strconv.Itoa(i) }

// startClusterDaemons starts the feeder/scheduler pairs (pair i caching
// its own hash partition of the unsent instances, --mod pairs
// --mod-index i, on node i) and the other daemons spread over the
// nodes, and returns the schedulers' URL bases.
func (p *project) startClusterDaemons(ctx context.Context, pairs int, dsn func(int) string) ([]string, error) {
	bin := func(n string) string { return filepath.Join(p.opts.BinDir, n) }
	logs := filepath.Join(p.dir, "logs")
	daemon := func(name, program string, node int, args ...string) *projectrun.Proc {
		return projectrun.New(projectrun.Spec{Name: name, Bin: bin(program), LogDir: logs, ReportsAddrs: true,
			Args: append([]string{"--config", p.configPath, "--listen", anyPort, "--db-dsn", dsn(node)}, args...)})
	}
	schedArgs := func(i int, addr, urlBase string) []string {
		return []string{"--shm-path", p.clusterShmPath(i), "--addr", addr, "--url-base", urlBase,
			"--upload-key", filepath.Join(p.dir, "keys", "upload_private"),
			"--upload-cert-key", filepath.Join(p.dir, "keys", keys.Ed25519PrivateFile), "--request-delay", "1s"}
	}
	var urls []string
	for i := 0; i < pairs; i++ {
		f := daemon(fmt.Sprintf("feeder.%d", i), "feeder", i, "--sleep", "200ms", "--shm-path", p.clusterShmPath(i),
			"--mod", strconv.Itoa(pairs), "--mod-index", strconv.Itoa(i))
		s := daemon(fmt.Sprintf("scheduler.%d", i), "scheduler", i, schedArgs(i, anyPort, "")...)
		p.daemons = append(p.daemons, f, s)
		if err := f.Start(); err != nil {
			return nil, errors.Join(err, p.stopAll())
		}
		if err := f.WaitFile(ctx, p.clusterShmPath(i)); err != nil {
			return nil, errors.Join(err, p.stopAll())
		}
		if err := s.Start(); err != nil {
			return nil, errors.Join(err, p.stopAll())
		}
		addr, err := s.WaitAddr(ctx, "addr")
		if err != nil {
			return nil, errors.Join(err, p.stopAll())
		}
		// A restart after a kill listens where the hosts look for it.
		s.SetArgs(append([]string{"--config", p.configPath, "--listen", anyPort, "--db-dsn", dsn(i)},
			schedArgs(i, addr, "http://"+addr)...))
		urls = append(urls, "http://"+addr)
	}
	handler := strings.Join([]string{bin("chaos"), "record", "--log", p.handledLog}, " ")
	others := []struct {
		name, program string
		args          []string
	}{
		{"transitioner.0", "transitioner", []string{"--mod", "2", "--mod-index", "0", "--sleep", "500ms"}},
		{"transitioner.1", "transitioner", []string{"--mod", "2", "--mod-index", "1", "--sleep", "500ms"}},
		{"validator", "validator", []string{"--sleep", "500ms"}},
		{"assimilator", "assimilator", []string{"--sleep", "500ms", "--handler", "command",
			"--handler-cmd", handler, "--handler-timeout", "1m"}},
		{"file_deleter", "file_deleter", []string{"--sleep", "500ms"}},
		{"db_purge", "db_purge", []string{"--sleep", "1s", "--archive-dir", "archives"}},
		{"work_generator", "work_generator", []string{"--sleep", "500ms",
			"--unsent-target", strconv.Itoa(p.unsentTarget), "--total-jobs", strconv.Itoa(p.totalJobs),
			"--delay-bound", p.opts.DelayBound.String(), "--min-quorum", "2", "--target-nresults", "2", "--rsc-fpops-est", "1e10"}},
	}
	for k, d := range others {
		pr := daemon(d.name, d.program, pairs+k, d.args...)
		p.daemons = append(p.daemons, pr)
		if err := pr.Start(); err != nil {
			return nil, errors.Join(err, p.stopAll())
		}
	}
	return urls, nil
}

// killNodeMidRun waits until KillAt of the jobs reached the handler,
// kills a node other than node 1 (the harness's) with SIGKILL, leaves it
// down for NodeDown and restarts it from its recovered position.
func killNodeMidRun(ctx context.Context, p *project, cl *galera.Cluster, co ClusterOptions, in *injector, out func(string, ...any), done func(NodeRejoin)) error {
	want := int(math.Ceil(co.KillAt * float64(co.Jobs)))
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(p.handledLog); err == nil && strings.Count(string(b), "\n") >= want {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node kill: %w", ctx.Err())
		case <-tick.C:
		}
	}
	n := cl.Node(1 + int(co.Seed%uint64(len(cl.Nodes())-1)))
	out("fault: database %s killed with SIGKILL (down for %s)", n.Name(), co.NodeDown)
	killed := time.Now()
	n.Kill()
	in.count(FaultNodeKill)
	select {
	case <-ctx.Done():
	case <-time.After(co.NodeDown):
	}
	back := time.Now()
	tr, err := n.Restart(context.WithoutCancel(ctx))
	j := NodeRejoin{Node: n.Name(), DownSeconds: back.Sub(killed).Seconds(), RejoinSeconds: time.Since(back).Seconds()}
	_, j.Position = n.LastJoin()
	if err != nil {
		done(j)
		return fmt.Errorf("restart %s: %w", n.Name(), err)
	}
	j.Transfer = string(tr)
	done(j)
	out("fault: database %s back, Synced after %.1fs (state transfer: %s from %s)", n.Name(), j.RejoinSeconds, tr, j.Position)
	return nil
}

// clusterSampler accumulates, over restarts, the daemons' claim,
// failover and retry counters and the nodes' certification counters.
type clusterSampler struct {
	p      *project
	nodes  []dbNode
	client *http.Client

	mu       sync.Mutex
	counters map[string]*counter // "<daemon or node> <what>"
}

func newClusterSampler(p *project, nodes []dbNode) *clusterSampler {
	return &clusterSampler{p: p, nodes: nodes, client: &http.Client{Timeout: 2 * time.Second}, counters: map[string]*counter{}}
}

// Metrics the cluster run reads; the failover ones by suffix, whatever
// their namespace.
const (
	metricClaims        = "taskserver_scheduler_cache_claims_total"
	suffixFailovers     = "db_failovers_total"
	suffixRetries       = "db_retries_total"
	claimOK             = "ok"
	claimConflict       = "conflict"
	certConflictErrCode = "1213"
)

func (s *clusterSampler) run(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		s.sampleAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *clusterSampler) add(key string, v float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counters[key]
	if c == nil {
		c = &counter{}
		s.counters[key] = c
	}
	c.add(v)
}

// sampleAll reads every running daemon's counters and every node's.
func (s *clusterSampler) sampleAll(ctx context.Context) {
	for _, d := range s.p.daemons {
		if !d.Running() {
			continue
		}
		fams, err := scrape(ctx, s.client, d.Addr(daemon.AdminListener))
		if err != nil {
			continue
		}
		if strings.HasPrefix(d.Name(), "scheduler") {
			s.add(d.Name()+" claims_ok", metricValue(fams, metricClaims, "result", claimOK))
			s.add(d.Name()+" claims_conflict", metricValue(fams, metricClaims, "result", claimConflict))
		}
		s.add(d.Name()+" failovers", metricSumSuffix(fams, suffixFailovers, "", ""))
		s.add(d.Name()+" retries_1213", metricSumSuffix(fams, suffixRetries, "code", certConflictErrCode))
	}
	s.sampleNodes(ctx)
}

// sampleNodes reads the nodes' certification counters (reset when a
// node restarts, which counter allows for).
func (s *clusterSampler) sampleNodes(ctx context.Context) {
	for _, n := range s.nodes {
		if n.status == nil {
			continue
		}
		st, err := n.status(ctx)
		if err != nil {
			continue
		}
		s.add(n.name+" cert_failures", float64(st.CertFailures))
		s.add(n.name+" bf_aborts", float64(st.BFAborts))
	}
}

// fill sums the counters into r.
func (s *clusterSampler) fill(r *ClusterReport) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, c := range s.counters {
		v := c.total
		switch {
		case strings.HasSuffix(key, " claims_ok"):
			r.ClaimsOK += v
		case strings.HasSuffix(key, " claims_conflict"):
			r.ClaimsConflict += v
		case strings.HasSuffix(key, " failovers"):
			r.Failovers += v
		case strings.HasSuffix(key, " retries_1213"):
			r.Retries1213 += v
		case strings.HasSuffix(key, " cert_failures"):
			r.CertFailures += v
		case strings.HasSuffix(key, " bf_aborts"):
			r.BFAborts += v
		}
	}
	r.CertificationConflicts = r.CertFailures + r.BFAborts
	if t := r.ClaimsOK + r.ClaimsConflict; t > 0 {
		r.ClaimsLostFraction = r.ClaimsConflict / t
	}
}

// metricSumSuffix sums the counters of every family whose name ends in
// suffix, over the series whose label has value (all when label is "");
// NaN when there is none (the counter stays as it was).
func metricSumSuffix(fams map[string]*dto.MetricFamily, suffix, label, value string) float64 {
	sum, found := 0.0, false
	for name, f := range fams {
		if !strings.HasSuffix(name, suffix) {
			continue
		}
		for _, m := range f.GetMetric() {
			if label != "" && !hasLabel(m, label, value) {
				continue
			}
			found = true
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetUntyped() != nil:
				sum += m.GetUntyped().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	if !found {
		return math.NaN()
	}
	return sum
}
