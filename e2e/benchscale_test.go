package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/paperbench"
)

// TestBenchScaleSmall runs `benchscale --scale 20000`, the short form of
// `make bench-scale`, and checks the report: the promised keys at the size,
// every daemon's phase with work done and CPU spent, a dispatch rate, and
// the SVG plot and text table beside it. It runs with --statements, so it
// also checks each phase's statement list.
func TestBenchScaleSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	if !paperbench.MariaDBAvailable() {
		t.Skip("no MariaDB server program installed: the benchmark cannot start its private database")
	}
	bin := buildPrograms(t)
	out := filepath.Join(t.TempDir(), "scale")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "benchscale"), "--scale", "20000", "--out", out,
		"--dispatch-seconds", "2", "--phase-timeout", "2m", "--statements")
	b, err := cmd.CombinedOutput()
	t.Logf("benchscale output:\n%s", b)
	if err != nil {
		t.Fatalf("benchscale --scale 20000: %v", err)
	}
	raw, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatalf("read report: %v", err)
	}
	var top struct {
		Sizes []map[string]json.RawMessage `json:"sizes"`
	}
	if err := json.Unmarshal(raw, &top); err != nil || len(top.Sizes) != 1 {
		t.Fatalf("report sizes = %d, %v; want one size", len(top.Sizes), err)
	}
	s := top.Sizes[0]
	num := func(k string) float64 {
		var v float64
		if err := json.Unmarshal(s[k], &v); err != nil {
			t.Errorf("size lacks number %q: %v", k, err)
		}
		return v
	}
	if rows := num("result_rows"); rows < 18000 || rows > 24000 {
		t.Errorf("result_rows = %g, want about 20000", rows)
	}
	if v := num("dispatch_rps"); v <= 0 {
		t.Errorf("dispatch_rps = %g, want > 0", v)
	}
	if v := num("dispatch_p99_ms"); v <= 0 {
		t.Errorf("dispatch_p99_ms = %g, want > 0", v)
	}
	cpu, db := num("cpu_ms_per_instance"), num("db_cpu_ms_per_instance")
	if cpu <= 0 || db <= 0 || db > cpu {
		t.Errorf("cpu_ms_per_instance %g, db_cpu_ms_per_instance %g: want both > 0, the database's part of the total", cpu, db)
	}
	if v := num("status_page_s"); v <= 0 || v > 30 {
		t.Errorf("status_page_s = %g", v)
	}
	for _, d := range []string{"transitioner", "validator", "assimilator", "file_deleter", "db_purge"} {
		var c struct {
			Jobs   int64   `json:"jobs"`
			CPUS   float64 `json:"cpu_s"`
			DBCPUS float64 `json:"db_cpu_s"`
		}
		if err := json.Unmarshal(s[d], &c); err != nil {
			t.Errorf("size lacks daemon object %q: %v", d, err)
			continue
		}
		if c.Jobs <= 0 || c.CPUS+c.DBCPUS <= 0 {
			t.Errorf("%s: %+v, want jobs done and CPU spent", d, c)
		}
	}
	// --statements: the levels' and daemons' statement forms, with the
	// scheduler's commit among dispatch's.
	type statement struct {
		Text   string  `json:"text"`
		Count  int64   `json:"count"`
		TimeMS float64 `json:"time_ms"`
	}
	var sched struct {
		Levels []struct {
			Statements []statement `json:"statements"`
		} `json:"levels"`
	}
	if err := json.Unmarshal(s["scheduler"], &sched); err != nil || len(sched.Levels) == 0 {
		t.Errorf("scheduler object: %v, %d levels", err, len(sched.Levels))
	}
	for i, l := range sched.Levels {
		commit := false
		for _, st := range l.Statements {
			commit = commit || st.Text == "COMMIT" && st.Count > 0 && st.TimeMS > 0
		}
		if !commit {
			t.Errorf("dispatch level %d lists no COMMIT among its statements: %+v", i, l.Statements)
		}
	}
	var validator struct {
		Statements []statement `json:"statements"`
	}
	if err := json.Unmarshal(s["validator"], &validator); err != nil || len(validator.Statements) == 0 {
		t.Errorf("validator lists no statements: %v", err)
	}
	svg, err := os.ReadFile(filepath.Join(out, "cpu.svg"))
	if err != nil || !strings.HasPrefix(string(svg), "<svg") || !strings.Contains(string(svg), "<polyline") {
		t.Errorf("cpu.svg: %v, want an SVG with a line", err)
	}
	if txt, err := os.ReadFile(filepath.Join(out, "report.txt")); err != nil || !strings.Contains(string(txt), "CPU ms per instance") ||
		!strings.Contains(string(txt), "statements at ") {
		t.Errorf("report.txt: %v", err)
	}
}
