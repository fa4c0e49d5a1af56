package paperbench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// Phase is one phase's measurements. The first five fields are the JSON
// keys issue 6 promises; the rest are extras.
type Phase struct {
	Name      string             `json:"name"`
	WallS     float64            `json:"wall_s"`
	CPUS      map[string]float64 `json:"cpu_s"`
	DBCPUS    float64            `json:"db_cpu_s"`
	Instances int                `json:"instances"`

	DBReadBytes  int64 `json:"db_read_bytes"`
	DBWriteBytes int64 `json:"db_write_bytes"`
	// Rows is how many database rows the phase had to bring to its end
	// state (jobs plus instances, or jobs alone, depending on the phase).
	Rows int64 `json:"rows"`
	// PeakRSSBytes, StartRSSBytes and EndRSSBytes are per program: the high
	// water mark, and the resident size at the first and last sample.
	PeakRSSBytes  map[string]int64 `json:"peak_rss_bytes"`
	StartRSSBytes map[string]int64 `json:"start_rss_bytes"`
	EndRSSBytes   map[string]int64 `json:"end_rss_bytes"`

	// Dispatch only.
	Requests       int64    `json:"requests,omitempty"`
	NoWorkReplies  int64    `json:"no_work_replies,omitempty"`
	RPS            float64  `json:"rps,omitempty"`
	LatencyMS      *Latency `json:"latency_ms,omitempty"`
	UnackedReports int64    `json:"unacked_reports,omitempty"`
	LoadgenCPUS    float64  `json:"loadgen_cpu_s,omitempty"`
	Error          string   `json:"error,omitempty"`
}

// ProgramCPU is the phase's CPU seconds summed over its programs.
func (p Phase) ProgramCPU() float64 {
	var s float64
	for _, v := range p.CPUS {
		s += v
	}
	return s
}

// Latency is the dispatch latency distribution in milliseconds.
type Latency struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
}

// Reference is the issue's C++ BOINC and paper figures, written beside ours
// for comparison.
type Reference struct {
	BOINCTotalCPUSPer100k     float64 `json:"boinc_cgi_total_cpu_s_per_100k"`
	BOINCDBCPUSPer100k        float64 `json:"boinc_cgi_db_cpu_s_per_100k"`
	BOINCBestTotalCPUSPer100k float64 `json:"boinc_long_lived_total_cpu_s_per_100k"`
	BOINCBestDBCPUSPer100k    float64 `json:"boinc_long_lived_db_cpu_s_per_100k"`
	BOINCInstancesPerDay      float64 `json:"boinc_instances_per_day"`
	PaperTotalCPUSPer100k     float64 `json:"paper_total_cpu_s_per_100k"`
	PaperDBCPUSPer100k        float64 `json:"paper_db_cpu_s_per_100k"`
	PaperInstancesPerDay      float64 `json:"paper_instances_per_day"`
	TargetTotalCPUSPer100k    float64 `json:"target_total_cpu_s_per_100k"`
	TargetDBCPUSPer100k       float64 `json:"target_db_cpu_s_per_100k"`
	TargetDispatchRPS         float64 `json:"target_dispatch_rps"`
	TargetDispatchP99MS       float64 `json:"target_dispatch_p99_ms"`
}

// IssueReference holds the figures of issue 6 (C++ BOINC at commit
// c5c6cb79 on a 2-core machine, and the paper's 2005 figures) and the
// targets issue 22 set for the new job shape (issue 6's were 112 s total
// and 70 s database CPU per 100,000 instances, 2,000 requests/s).
var IssueReference = Reference{
	BOINCTotalCPUSPer100k:     1593,
	BOINCDBCPUSPer100k:        526.9,
	BOINCBestTotalCPUSPer100k: 560,
	BOINCBestDBCPUSPer100k:    350,
	BOINCInstancesPerDay:      5.4e6,
	PaperTotalCPUSPer100k:     980,
	PaperDBCPUSPer100k:        365,
	PaperInstancesPerDay:      8.8e6,
	TargetTotalCPUSPer100k:    75,
	TargetDBCPUSPer100k:       40,
	TargetDispatchRPS:         3000,
	TargetDispatchP99MS:       50,
}

// Report is the whole run: the phases and the paper's derived figures.
type Report struct {
	Phases           []Phase   `json:"phases"`
	DispatchRPS      float64   `json:"dispatch_rps"`
	TotalCPUSPer100k float64   `json:"total_cpu_s_per_100k"`
	DBCPUSPer100k    float64   `json:"db_cpu_s_per_100k"`
	InstancesPerDay  float64   `json:"instances_per_day"`
	Jobs             int       `json:"jobs"`
	Instances        int       `json:"instances"`
	DispatchP99MS    float64   `json:"dispatch_p99_ms"`
	LoadgenCPUS      float64   `json:"loadgen_cpu_s"`
	DBVersion        string    `json:"db_version"`
	DBLogFileBytes   int64     `json:"db_log_file_bytes"`
	GoVersion        string    `json:"go_version"`
	GitVersion       string    `json:"git_version"`
	CPUs             int       `json:"cpus"`
	Started          string    `json:"started"`
	Reference        Reference `json:"reference"`
	Failures         []string  `json:"failures,omitempty"`
}

// Derive fills the top-level figures from the phases: sums over the phases
// scaled to 100,000 instances, and the paper's capacity rule — instances per
// day at which two cores at 50 % utilisation are saturated. A phase that did
// not complete (no instances) is left out, so the figures of a failed or
// partial run are those of the phases it completed.
func (r *Report) Derive() {
	var total, db float64
	r.DispatchRPS, r.DispatchP99MS, r.LoadgenCPUS = 0, 0, 0
	for _, p := range r.Phases {
		if p.Instances == 0 {
			continue
		}
		total += p.ProgramCPU() + p.DBCPUS
		db += p.DBCPUS
		if p.Name == PhaseDispatch {
			r.DispatchRPS = p.RPS
			if p.LatencyMS != nil {
				r.DispatchP99MS = p.LatencyMS.P99
			}
		}
		r.LoadgenCPUS += p.LoadgenCPUS
	}
	r.TotalCPUSPer100k = Per100k(total, r.Instances)
	r.DBCPUSPer100k = Per100k(db, r.Instances)
	r.InstancesPerDay = InstancesPerDay(total, r.Instances)
}

// Per100k scales seconds spent on n instances to 100,000 instances; 0 when
// n is 0.
func Per100k(seconds float64, n int) float64 {
	if n <= 0 {
		return 0
	}
	return seconds * 100000 / float64(n)
}

// InstancesPerDay is the paper's rule: the instances a day that keep two
// cores 50 % busy, given cpuSeconds spent on n instances. 0 when nothing
// was spent.
func InstancesPerDay(cpuSeconds float64, n int) float64 {
	if cpuSeconds <= 0 || n <= 0 {
		return 0
	}
	const cores, utilisation = 2, 0.5
	return 86400 * cores * utilisation / (cpuSeconds / float64(n))
}

// Percentile is the nearest-rank percentile q (0 < q <= 100) of sorted
// values; 0 for none.
func Percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// LatencyOf returns the p50, p95 and p99 of durations, in milliseconds. It
// sorts d in place.
func LatencyOf(d []time.Duration) *Latency {
	ms := make([]float64, len(d))
	for i, v := range d {
		ms[i] = float64(v) / float64(time.Millisecond)
	}
	sort.Float64s(ms)
	return &Latency{P50: Percentile(ms, 50), P95: Percentile(ms, 95), P99: Percentile(ms, 99)}
}

// WriteTable writes the paper's table (as Markdown, ready for the README)
// and the derived figures as text.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintln(w, "| phase | wall s | programs CPU s | DB CPU s | DB MB read/written | instances | extra |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---|")
	var wall, prog, db float64
	var rd, wr int64
	for i, p := range r.Phases {
		wall += p.WallS
		prog += p.ProgramCPU()
		db += p.DBCPUS
		rd += p.DBReadBytes
		wr += p.DBWriteBytes
		fmt.Fprintf(w, "| %d %s | %.1f | %.1f (%s) | %.1f | %.1f / %.1f | %d | %s |\n", i+1, p.Name, p.WallS, p.ProgramCPU(),
			byProgram(p.CPUS), p.DBCPUS, mb(p.DBReadBytes), mb(p.DBWriteBytes), p.Instances, p.extra())
	}
	fmt.Fprintf(w, "| total for %d instances | %.1f | %.1f | %.1f | %.1f / %.1f | | |\n", r.Instances, wall, prog, db, mb(rd), mb(wr))
	ref := r.Reference
	fmt.Fprintf(w, "\ntotal CPU (programs + database) per 100,000 instances: %.1f s (target %.0f; C++ BOINC long-lived %.0f, CGI %.0f; paper %.0f)\n",
		r.TotalCPUSPer100k, ref.TargetTotalCPUSPer100k, ref.BOINCBestTotalCPUSPer100k, ref.BOINCTotalCPUSPer100k, ref.PaperTotalCPUSPer100k)
	fmt.Fprintf(w, "database CPU per 100,000 instances: %.1f s (target %.0f; C++ BOINC long-lived %.0f, CGI %.1f; paper %.0f)\n",
		r.DBCPUSPer100k, ref.TargetDBCPUSPer100k, ref.BOINCBestDBCPUSPer100k, ref.BOINCDBCPUSPer100k, ref.PaperDBCPUSPer100k)
	fmt.Fprintf(w, "instances per day at 50%% of two cores: %.2f M (C++ BOINC %.1f M; paper %.1f M)\n",
		r.InstancesPerDay/1e6, ref.BOINCInstancesPerDay/1e6, ref.PaperInstancesPerDay/1e6)
	fmt.Fprintf(w, "dispatch: %.0f requests/s, p99 %.1f ms (target >= %.0f/s, p99 < %.0f ms); load generator CPU %.1f s (not counted)\n",
		r.DispatchRPS, r.DispatchP99MS, ref.TargetDispatchRPS, ref.TargetDispatchP99MS, r.LoadgenCPUS)
	fmt.Fprintf(w, "peak RSS: %s\n", peakRSS(r.Phases))
	fmt.Fprintf(w, "%d jobs, %d CPUs, %s (redo log %d MiB), %s, taskserver %s\n", r.Jobs, r.CPUs, r.DBVersion, r.DBLogFileBytes>>20, r.GoVersion, r.GitVersion)
	for _, f := range r.Failures {
		fmt.Fprintf(w, "FAILED: %s\n", f)
	}
	return nil
}

// extra is the table's last column.
func (p Phase) extra() string {
	var parts []string
	if p.Requests > 0 {
		parts = append(parts, fmt.Sprintf("%d requests (%d no work), %.0f/s", p.Requests, p.NoWorkReplies, p.RPS))
		if p.LatencyMS != nil {
			parts = append(parts, fmt.Sprintf("p50/p95/p99 %.1f/%.1f/%.1f ms", p.LatencyMS.P50, p.LatencyMS.P95, p.LatencyMS.P99))
		}
	}
	if p.Error != "" {
		parts = append(parts, "FAILED")
	}
	return strings.Join(parts, "; ")
}

// byProgram lists CPU seconds by program, in name order.
func byProgram(cpu map[string]float64) string {
	names := make([]string, 0, len(cpu))
	for n := range cpu {
		names = append(names, n)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.1f", n, cpu[n])
	}
	return strings.Join(parts, ", ")
}

// peakRSS lists each program's highest peak over the phases, in MB.
func peakRSS(phases []Phase) string {
	peak := map[string]int64{}
	for _, p := range phases {
		for n, v := range p.PeakRSSBytes {
			peak[n] = max(peak[n], v)
		}
	}
	names := make([]string, 0, len(peak))
	for n := range peak {
		names = append(names, n)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.0f MB", n, mb(peak[n]))
	}
	return strings.Join(parts, ", ")
}

func mb(b int64) float64 { return float64(b) / 1e6 }

// Write writes the report as JSON to path and its table beside it (the same
// name with .txt), creating the directory.
func (r *Report) Write(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("make report directory: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	var t strings.Builder
	if err := r.WriteTable(&t); err != nil {
		return err
	}
	txt := strings.TrimSuffix(path, filepath.Ext(path)) + ".txt"
	if err := os.WriteFile(txt, []byte(t.String()), 0o644); err != nil {
		return fmt.Errorf("write report table: %w", err)
	}
	return nil
}
