package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/paperbench"
)

// TestPaperBenchmark runs `bench --jobs 200` on its private MariaDB, as
// `make bench` does, and checks the report keeps issue 6's promises: every
// phase ends with every instance, and the JSON has the promised keys.
func TestPaperBenchmark(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	if !paperbench.MariaDBAvailable() {
		t.Skip("no MariaDB server program installed: the benchmark cannot start its private database")
	}
	bin := buildPrograms(t)
	out := filepath.Join(t.TempDir(), "paper.json")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "bench"), "--jobs", "200", "--out", out, "--phase-timeout", "3m")
	b, err := cmd.CombinedOutput()
	t.Logf("bench output:\n%s", b)
	if err != nil {
		t.Fatalf("bench --jobs 200: %v", err)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("read report: %v", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatalf("report is not a JSON object: %v", err)
	}
	for _, k := range []string{"phases", "dispatch_rps", "total_cpu_s_per_100k", "db_cpu_s_per_100k", "instances_per_day"} {
		if _, ok := top[k]; !ok {
			t.Errorf("report lacks top-level key %q", k)
		}
	}
	var phases []map[string]json.RawMessage
	if err := json.Unmarshal(top["phases"], &phases); err != nil {
		t.Fatalf("phases is not an array of objects: %v", err)
	}
	if len(phases) != len(paperbench.PhaseNames) {
		t.Fatalf("%d phases in the report, want %d", len(phases), len(paperbench.PhaseNames))
	}
	for i, p := range phases {
		for _, k := range []string{"name", "wall_s", "cpu_s", "db_cpu_s", "instances"} {
			if _, ok := p[k]; !ok {
				t.Errorf("phase %d lacks key %q", i+1, k)
			}
		}
		var name string
		var instances int
		var cpu map[string]float64
		_ = json.Unmarshal(p["name"], &name)
		_ = json.Unmarshal(p["instances"], &instances)
		_ = json.Unmarshal(p["cpu_s"], &cpu)
		if name != paperbench.PhaseNames[i] {
			t.Errorf("phase %d is %q, want %q", i+1, name, paperbench.PhaseNames[i])
		}
		if instances != 400 {
			t.Errorf("phase %s: instances = %d, want 400", name, instances)
		}
		if len(cpu) == 0 {
			t.Errorf("phase %s: no program's CPU recorded", name)
		}
	}
	var r paperbench.Report
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("decode report: %v", err)
	}
	if r.DispatchRPS <= 0 || r.TotalCPUSPer100k <= 0 || r.DBCPUSPer100k <= 0 || r.InstancesPerDay <= 0 {
		t.Errorf("derived figures not filled: rps %v, total %v, db %v, per day %v",
			r.DispatchRPS, r.TotalCPUSPer100k, r.DBCPUSPer100k, r.InstancesPerDay)
	}
	if len(r.Failures) != 0 {
		t.Errorf("failures reported: %v", r.Failures)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(out), "paper.txt")); err != nil {
		t.Errorf("no table beside the JSON: %v", err)
	}
}
