package scalebench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Report is report.json: one object per size measured.
type Report struct {
	CPUs       int    `json:"cpus"`
	GoVersion  string `json:"go_version"`
	GitVersion string `json:"git_version"`
	Started    string `json:"started"`
	// LoadAvgAtStart is /proc/loadavg when the run began: the machine's
	// other load, which the figures share the cores with.
	LoadAvgAtStart string `json:"loadavg_at_start"`
	// BufferPool is the pool the main figures were measured with: the
	// largest of a sweep's BufferPools.
	BufferPool  string   `json:"buffer_pool"`
	BufferPools []string `json:"buffer_pools,omitempty"`
	Sizes       []Size   `json:"sizes"`
}

// Size is the figures at one table size.
type Size struct {
	ResultRows int64 `json:"result_rows"`
	Jobs       int64 `json:"jobs"`
	Hosts      int64 `json:"hosts"`
	Users      int64 `json:"users"`
	// WorkSetJobs is the size of each daemon's work set.
	WorkSetJobs int64   `json:"work_set_jobs"`
	FillS       float64 `json:"fill_s"`
	FillDBCPUS  float64 `json:"fill_db_cpu_s"`

	// DispatchRPS is the best rate with p99 within 100 ms (or, when no
	// level kept it, the lowest level's) and DispatchP99MS its p99.
	DispatchRPS          float64 `json:"dispatch_rps"`
	DispatchP99MS        float64 `json:"dispatch_p99_ms"`
	DispatchWithinBound  bool    `json:"dispatch_p99_within_100ms"`
	SchedulerCPUMSPerReq float64 `json:"scheduler_cpu_ms_per_request"`
	DispatchDBCPUMSPerRq float64 `json:"dispatch_db_cpu_ms_per_request"`
	// CPUMSPerInstance is an instance's life in CPU: dispatch (scheduler,
	// feeder and database per instance sent) plus each daemon's CPU and
	// the database's per job, over the job's two instances.
	CPUMSPerInstance   float64 `json:"cpu_ms_per_instance"`
	DBCPUMSPerInstance float64 `json:"db_cpu_ms_per_instance"`

	StatusPageS    float64 `json:"status_page_s"`
	TaskctlStatusS float64 `json:"taskctl_status_s"`
	HostExplainS   float64 `json:"host_explain_s"`
	// StatusPage is the status page's read as a phase of one request.
	StatusPage *DaemonCost `json:"status_page"`

	Feeder       *FeederCost   `json:"feeder"`
	Dispatch     *DispatchCost `json:"scheduler"`
	Transitioner *DaemonCost   `json:"transitioner"`
	Validator    *DaemonCost   `json:"validator"`
	Assimilator  *DaemonCost   `json:"assimilator"`
	FileDeleter  *DaemonCost   `json:"file_deleter"`
	DBPurge      *DaemonCost   `json:"db_purge"`

	Explain []Explained `json:"explain"`
	// WorkingSet is the buffer-pool sweep's outcome, when there was one.
	WorkingSet *WorkingSet `json:"working_set,omitempty"`

	Daemons map[string]*DaemonCost `json:"-"`
}

// DaemonCost is one daemon's phase: its work set and what it cost.
type DaemonCost struct {
	Jobs          int64   `json:"jobs"`
	WallS         float64 `json:"wall_s"`
	CPUS          float64 `json:"cpu_s"`
	DBCPUS        float64 `json:"db_cpu_s"`
	CPUMSPerJob   float64 `json:"cpu_ms_per_job"`
	DBCPUMSPerJob float64 `json:"db_cpu_ms_per_job"`
	// The buffer pool: pages holding data at the end (MB), logical reads
	// and reads from disk during the phase (a disk read is a page the
	// working set needed that the pool did not hold), and the pages read
	// from disk in all, read-ahead included.
	BufferPoolDataMB       float64 `json:"buffer_pool_data_mb"`
	BufferPoolReadRequests int64   `json:"buffer_pool_read_requests"`
	BufferPoolDiskReads    int64   `json:"buffer_pool_disk_reads"`
	BufferPoolPagesRead    int64   `json:"buffer_pool_pages_read"`
	// Statements are the statement forms that took the most of the
	// server's time in the phase (Options.Statements only).
	Statements []Statement `json:"statements,omitempty"`
}

// Statement is one statement form's share of a phase: the digest text
// with its lists folded, and its count, server time (waits included) and
// rows. A statement of a multi-statement packet is counted under the
// packet's first statement's text: MariaDB's digest is the packet's.
type Statement struct {
	Text         string  `json:"text"`
	Count        int64   `json:"count"`
	TimeMS       float64 `json:"time_ms"`
	RowsExamined int64   `json:"rows_examined"`
	RowsSent     int64   `json:"rows_sent"`
	RowsAffected int64   `json:"rows_affected"`
}

// FeederCost is the feeder alone for a few seconds on the full backlog.
type FeederCost struct {
	FirstFillS          float64     `json:"first_fill_s"`
	FillRatio           float64     `json:"cache_fill_ratio"`
	EnumeratedRows      int64       `json:"enumerated_rows"`
	WallS               float64     `json:"wall_s"`
	CPUS                float64     `json:"cpu_s"`
	DBCPUS              float64     `json:"db_cpu_s"`
	BufferPoolDataMB    float64     `json:"buffer_pool_data_mb"`
	BufferPoolDiskReads int64       `json:"buffer_pool_disk_reads"`
	BufferPoolPagesRead int64       `json:"buffer_pool_pages_read"`
	Statements          []Statement `json:"statements,omitempty"`
}

// DispatchCost is the dispatch phase's levels.
type DispatchCost struct {
	Levels              []level `json:"levels"`
	BufferPoolDataMB    float64 `json:"buffer_pool_data_mb"`
	BufferPoolDiskReads int64   `json:"buffer_pool_disk_reads"`
	BufferPoolPagesRead int64   `json:"buffer_pool_pages_read"`
}

// Explained is one hot query's plan, one line per table.
type Explained struct {
	Query string   `json:"query"`
	Plan  []string `json:"plan"`
}

// daemonOrder is the daemons in the report's order.
var daemonOrder = []string{"transitioner", "validator", "assimilator", "file_deleter", "db_purge"}

// derive fills the per-request, per-job and per-instance figures.
func (s *Size) derive() {
	field := map[string]**DaemonCost{"transitioner": &s.Transitioner, "validator": &s.Validator,
		"assimilator": &s.Assimilator, "file_deleter": &s.FileDeleter, "db_purge": &s.DBPurge}
	var cpu, db float64
	for _, name := range daemonOrder {
		c := s.Daemons[name]
		*field[name] = c
		if c == nil || c.Jobs == 0 {
			continue
		}
		c.CPUMSPerJob = round3(c.CPUS * 1000 / float64(c.Jobs))
		c.DBCPUMSPerJob = round3(c.DBCPUS * 1000 / float64(c.Jobs))
		cpu += (c.CPUMSPerJob + c.DBCPUMSPerJob) / 2
		db += c.DBCPUMSPerJob / 2
	}
	if s.Dispatch != nil && len(s.Dispatch.Levels) > 0 {
		// The best rate within the bound among the levels that had work to
		// send: a level whose backlog ran dry answered "no work" cheaply.
		best := s.Dispatch.Levels[0]
		for _, l := range s.Dispatch.Levels {
			if !l.BacklogDry && l.P99MS <= p99Bound && (l.RPS > best.RPS || best.P99MS > p99Bound) {
				best = l
			}
		}
		s.DispatchRPS, s.DispatchP99MS, s.DispatchWithinBound = best.RPS, best.P99MS, best.P99MS <= p99Bound
		if best.Requests > 0 {
			s.SchedulerCPUMSPerReq = round3(best.SchedCPUS * 1000 / float64(best.Requests))
			s.DispatchDBCPUMSPerRq = round3(best.DBCPUS * 1000 / float64(best.Requests))
		}
		if best.Sent > 0 {
			cpu += (best.SchedCPUS + best.FeedCPUS + best.DBCPUS) * 1000 / float64(best.Sent)
			db += best.DBCPUS * 1000 / float64(best.Sent)
		}
	}
	s.CPUMSPerInstance, s.DBCPUMSPerInstance = round3(cpu), round3(db)
}

// metricValue finds the sample name (no labels) in a /metrics body.
func metricValue(body []byte, name string) (float64, error) {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == name {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

// Write writes report.json, report.txt (the table) and cpu.svg into dir.
func (r *Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	var t bytes.Buffer
	if err := r.WriteTable(&t); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.txt"), t.Bytes(), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "cpu.svg"), r.SVG(), 0o644)
}

// WriteTable prints one column per size.
func (r *Report) WriteTable(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "scale benchmark: %d CPUs, load average at start %s, buffer pool %s\n", r.CPUs, r.LoadAvgAtStart, r.BufferPool)
	if len(r.BufferPools) > 0 {
		fmt.Fprintf(bw, "buffer pools swept: %s (each from a cold start on a copy of the fill; the figures above are the largest's)\n", strings.Join(r.BufferPools, " "))
	}
	row := func(label string, f func(s Size) string) {
		fmt.Fprintf(bw, "%-38s", label)
		for _, s := range r.Sizes {
			fmt.Fprintf(bw, " %14s", f(s))
		}
		fmt.Fprintln(bw)
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	daemon := func(name string, f func(c *DaemonCost) float64) func(s Size) string {
		return func(s Size) string {
			if c := s.Daemons[name]; c != nil {
				return num(f(c))
			}
			return "-"
		}
	}
	row("result rows", func(s Size) string { return strconv.FormatInt(s.ResultRows, 10) })
	row("fill s", func(s Size) string { return num(s.FillS) })
	row("CPU ms per instance (programs + DB)", func(s Size) string { return num(s.CPUMSPerInstance) })
	row("DB CPU ms per instance", func(s Size) string { return num(s.DBCPUMSPerInstance) })
	row("dispatch requests/s", func(s Size) string { return num(s.DispatchRPS) })
	row("dispatch p99 ms", func(s Size) string { return num(s.DispatchP99MS) })
	row("scheduler CPU ms per request", func(s Size) string { return num(s.SchedulerCPUMSPerReq) })
	row("dispatch DB CPU ms per request", func(s Size) string { return num(s.DispatchDBCPUMSPerRq) })
	row("feeder first fill s", func(s Size) string {
		if s.Feeder == nil {
			return "-"
		}
		return num(s.Feeder.FirstFillS)
	})
	row("feeder cache fill ratio", func(s Size) string {
		if s.Feeder == nil {
			return "-"
		}
		return num(s.Feeder.FillRatio)
	})
	for _, n := range daemonOrder {
		row(n+" CPU ms/job", daemon(n, func(c *DaemonCost) float64 { return c.CPUMSPerJob }))
		row(n+" DB CPU ms/job", daemon(n, func(c *DaemonCost) float64 { return c.DBCPUMSPerJob }))
	}
	row("status page s", func(s Size) string { return num(s.StatusPageS) })
	row("taskctl status s", func(s Size) string { return num(s.TaskctlStatusS) })
	row("taskctl host explain s", func(s Size) string { return num(s.HostExplainS) })
	for _, s := range r.Sizes {
		s.writeStatements(bw)
	}
	if slices.ContainsFunc(r.Sizes, func(s Size) bool { return s.WorkingSet != nil }) {
		fmt.Fprintf(bw, "working set: the smallest swept buffer pool (MiB) whose database CPU per unit (by reads: disk reads per unit) is within %.0f%% of the best; N+: only the largest, it may need more\n",
			workingSetTolerance*100)
		for _, ph := range phaseOrder {
			row(ph+" working set MiB", func(s Size) string {
				if s.WorkingSet == nil || s.WorkingSet.Phases[ph] == nil {
					return "-"
				}
				return s.WorkingSet.Phases[ph].label()
			})
			row(ph+" working set MiB by reads", func(s Size) string {
				if s.WorkingSet == nil || s.WorkingSet.Phases[ph] == nil {
					return "-"
				}
				return s.WorkingSet.Phases[ph].readsLabel()
			})
		}
		for _, s := range r.Sizes {
			if s.WorkingSet != nil {
				s.WorkingSet.writeTable(bw, s.ResultRows)
			}
		}
	}
	return bw.Flush()
}

// writeStatements prints, per phase, the statement forms that took the
// most of the server's time (--statements): dispatch's at its quoted
// level.
func (s Size) writeStatements(w io.Writer) {
	type phase struct {
		name string
		sts  []Statement
	}
	var phases []phase
	if s.StatusPage != nil {
		phases = append(phases, phase{"status page", s.StatusPage.Statements})
	}
	if s.Feeder != nil {
		phases = append(phases, phase{"feeder", s.Feeder.Statements})
	}
	if s.Dispatch != nil {
		for _, l := range s.Dispatch.Levels {
			if l.RPS == s.DispatchRPS && l.P99MS == s.DispatchP99MS {
				phases = append(phases, phase{fmt.Sprintf("dispatch at %d connections", l.Conns), l.Statements})
				break
			}
		}
	}
	for _, name := range daemonOrder {
		if c := s.Daemons[name]; c != nil {
			phases = append(phases, phase{name, c.Statements})
		}
	}
	if !slices.ContainsFunc(phases, func(p phase) bool { return len(p.sts) > 0 }) {
		return
	}
	fmt.Fprintf(w, "\nstatements at %d result rows, per phase: the server's time in each form (waits included), its share of the forms listed, count, rows examined/sent/affected; a multi-statement packet counts under its first statement\n", s.ResultRows)
	for _, p := range phases {
		var total float64
		for _, st := range p.sts {
			total += st.TimeMS
		}
		fmt.Fprintf(w, "%s:\n", p.name)
		for _, st := range p.sts {
			share := 0.0
			if total > 0 {
				share = 100 * st.TimeMS / total
			}
			fmt.Fprintf(w, "  %9.1f ms %5.1f%% %7d %9d/%d/%d  %s\n", st.TimeMS, share, st.Count, st.RowsExamined,
				st.RowsSent, st.RowsAffected, st.Text)
		}
	}
}

// writeTable prints the sweep of one size: a row per phase, a column per
// pool with the database CPU per unit and (disk reads/pages read).
func (ws *WorkingSet) writeTable(w io.Writer, rows int64) {
	fmt.Fprintf(w, "\nbuffer-pool sweep at %d result rows: database CPU ms per unit (buffer-pool disk reads/pages read from disk)\n", rows)
	fmt.Fprintf(w, "%-14s %-10s", "phase", "unit")
	for _, p := range ws.Pools {
		fmt.Fprintf(w, " %24s", p)
	}
	fmt.Fprintf(w, " %12s %9s\n", "working set", "by reads")
	for _, ph := range phaseOrder {
		p := ws.Phases[ph]
		if p == nil {
			continue
		}
		unit := p.Unit
		if p.DispatchConns > 0 {
			unit = fmt.Sprintf("%s@%d", unit, p.DispatchConns)
		}
		fmt.Fprintf(w, "%-14s %-10s", ph, unit)
		for _, pool := range ws.Pools {
			cell := "-"
			for _, c := range p.Pools {
				if c.Pool == pool {
					cell = fmt.Sprintf("%s (%d/%d)", strconv.FormatFloat(c.DBCPUMSPerUnit, 'f', -1, 64), c.DiskReads, c.PagesRead)
				}
			}
			fmt.Fprintf(w, " %24s", cell)
		}
		fmt.Fprintf(w, " %12s %9s\n", p.label(), p.readsLabel())
	}
}

// SVG plots CPU per instance (programs + database, and database alone)
// against the result rows, on a log scale.
func (r *Report) SVG() []byte {
	const w, h, left, right, top, bottom = 640.0, 400.0, 70.0, 20.0, 40.0, 50.0
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%g" height="%g" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%g" y="20" text-anchor="middle" font-size="14">CPU per instance against table size</text>`+"\n", w/2)
	xmin, xmax, ymax := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range r.Sizes {
		x := math.Log10(float64(max(s.ResultRows, 1)))
		xmin, xmax, ymax = math.Min(xmin, x), math.Max(xmax, x), math.Max(ymax, s.CPUMSPerInstance)
	}
	if len(r.Sizes) == 0 {
		xmin, xmax = 5, 7
	}
	xmin, xmax = math.Floor(xmin), math.Ceil(xmax)
	if xmax == xmin {
		xmax = xmin + 1
	}
	ymax = niceCeil(ymax)
	px := func(x float64) float64 { return left + (x-xmin)/(xmax-xmin)*(w-left-right) }
	py := func(y float64) float64 { return h - bottom - y/ymax*(h-top-bottom) }
	fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>`+"\n", left, h-bottom, w-right, h-bottom)
	fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>`+"\n", left, top, left, h-bottom)
	for e := xmin; e <= xmax; e++ {
		fmt.Fprintf(&b, `<text x="%.1f" y="%g" text-anchor="middle">10^%g</text>`+"\n", px(e), h-bottom+18, e)
	}
	for i := 0; i <= 4; i++ {
		y := ymax * float64(i) / 4
		fmt.Fprintf(&b, `<text x="%g" y="%.1f" text-anchor="end">%g</text>`+"\n", left-6, py(y)+4, y)
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/>`+"\n", left, py(y), w-right, py(y))
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">result rows</text>`+"\n", (left+w-right)/2, h-12)
	fmt.Fprintf(&b, `<text x="16" y="%g" transform="rotate(-90 16 %g)" text-anchor="middle">CPU ms per instance</text>`+"\n", (top+h-bottom)/2, (top+h-bottom)/2)
	series := []struct {
		name, color string
		v           func(Size) float64
	}{
		{"programs + database", "#1f77b4", func(s Size) float64 { return s.CPUMSPerInstance }},
		{"database", "#d62728", func(s Size) float64 { return s.DBCPUMSPerInstance }},
	}
	for i, se := range series {
		var pts []string
		for _, s := range r.Sizes {
			x, y := px(math.Log10(float64(max(s.ResultRows, 1)))), py(se.v(s))
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", x, y, se.color)
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), se.color)
		fmt.Fprintf(&b, `<text x="%g" y="%g" fill="%s">%s</text>`+"\n", left+10, top+14+float64(i)*16, se.color, se.name)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (1 for v <= 0).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}
