package paperbench

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPercentileIsNearestRank(t *testing.T) {
	t.Parallel()
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1)
	}
	cases := []struct {
		name   string
		sorted []float64
		q      float64
		want   float64
	}{
		{"no values give zero", nil, 99, 0},
		{"one value is every percentile", []float64{7}, 50, 7},
		{"median of 1..100 is 50", hundred, 50, 50},
		{"p99 of 1..100 is 99", hundred, 99, 99},
		{"p100 is the maximum", hundred, 100, 100},
		{"p95 of ten values rounds the rank up", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 95, 10},
		{"a tiny percentile is the minimum", []float64{3, 4}, 0.1, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := Percentile(c.sorted, c.q); got != c.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", c.sorted, c.q, got, c.want)
			}
		})
	}
}

func TestLatencyOfSortsAndConvertsToMilliseconds(t *testing.T) {
	t.Parallel()
	d := []time.Duration{30 * time.Millisecond, time.Millisecond, 2 * time.Millisecond, 1500 * time.Microsecond}
	got := LatencyOf(d)
	want := Latency{P50: 1.5, P95: 30, P99: 30}
	if *got != want {
		t.Errorf("LatencyOf(%v) = %+v, want %+v", d, *got, want)
	}
}

func TestPer100kAndInstancesPerDay(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name         string
		seconds      float64
		n            int
		per100k, day float64
	}{
		// The issue's C++ figure: 1,593 s per 100,000 instances is 5.4 M a day.
		{"the issue's BOINC figure", 1593, 100000, 1593, 5.4234e6},
		{"a smaller run scales up", 8, 400, 2000, 4.32e6},
		{"112 s per 100k (issue 6's target)", 11.2, 10000, 112, 77.142857e6},
		{"no instances give zero", 5, 0, 0, 0},
		{"no CPU gives zero, not infinity", 0, 100, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := Per100k(c.seconds, c.n); math.Abs(got-c.per100k) > 1e-9 {
				t.Errorf("Per100k(%v, %d) = %v, want %v", c.seconds, c.n, got, c.per100k)
			}
			if got := InstancesPerDay(c.seconds, c.n); math.Abs(got-c.day) > 1e-3*c.day+1e-9 {
				t.Errorf("InstancesPerDay(%v, %d) = %v, want %v", c.seconds, c.n, got, c.day)
			}
		})
	}
}

// sampleReport is two phases of 200 jobs.
func sampleReport() *Report {
	r := &Report{Jobs: 200, Instances: 400, Reference: IssueReference, DBVersion: "10.11", GoVersion: "go1.26", CPUs: 2}
	r.Phases = []Phase{
		{Name: PhaseCreation, WallS: 2, CPUS: map[string]float64{"work_generator": 0.3, "transitioner": 0.1}, DBCPUS: 0.2,
			Instances: 400, DBWriteBytes: 2e6, PeakRSSBytes: map[string]int64{"transitioner": 20e6}},
		{Name: PhaseDispatch, WallS: 3, CPUS: map[string]float64{"feeder": 0.1, "scheduler": 0.5}, DBCPUS: 0.8,
			Instances: 400, Requests: 528, NoWorkReplies: 128, RPS: 176, LatencyMS: &Latency{P50: 1, P95: 2, P99: 3},
			LoadgenCPUS: 0.4, PeakRSSBytes: map[string]int64{"transitioner": 30e6, "scheduler": 25e6}},
	}
	r.Derive()
	return r
}

func TestDeriveSumsPhases(t *testing.T) {
	t.Parallel()
	r := sampleReport()
	// Programs 0.4 + 0.6, database 0.2 + 0.8: 2 s on 400 instances.
	if math.Abs(r.TotalCPUSPer100k-500) > 1e-9 || math.Abs(r.DBCPUSPer100k-250) > 1e-9 {
		t.Errorf("per 100k: total %v, db %v; want 500, 250", r.TotalCPUSPer100k, r.DBCPUSPer100k)
	}
	if math.Abs(r.InstancesPerDay-17.28e6) > 1 {
		t.Errorf("instances per day = %v, want 17.28e6 (86400 × 2 × 0.5 / 5 ms)", r.InstancesPerDay)
	}
	if r.DispatchRPS != 176 || r.DispatchP99MS != 3 || r.LoadgenCPUS != 0.4 {
		t.Errorf("dispatch figures: rps %v p99 %v loadgen %v; want 176, 3, 0.4", r.DispatchRPS, r.DispatchP99MS, r.LoadgenCPUS)
	}
}

func TestWriteTableHasEveryPhaseAndTheTotals(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := sampleReport().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| 1 creation | 2.0 | 0.4 (transitioner 0.1, work_generator 0.3) | 0.2 | 0.0 / 2.0 | 400 |  |",
		"| 2 dispatch | 3.0 | 0.6 (feeder 0.1, scheduler 0.5) | 0.8 |",
		"528 requests (128 no work), 176/s; p50/p95/p99 1.0/2.0/3.0 ms",
		"| total for 400 instances | 5.0 | 1.0 | 1.0 |",
		"per 100,000 instances: 500.0 s",
		"instances per day at 50% of two cores: 17.28 M",
		"peak RSS: scheduler 25 MB, transitioner 30 MB",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q; got:\n%s", want, out)
		}
	}
}

func TestWriteHasThePromisedKeys(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sub", "paper.json")
	if err := sampleReport().Write(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("report is not JSON: %v", err)
	}
	for _, k := range []string{"phases", "dispatch_rps", "total_cpu_s_per_100k", "db_cpu_s_per_100k", "instances_per_day"} {
		if _, ok := got[k]; !ok {
			t.Errorf("report lacks top-level key %q", k)
		}
	}
	phases, _ := got["phases"].([]any)
	if len(phases) != 2 {
		t.Fatalf("phases = %v, want 2 objects", got["phases"])
	}
	for _, p := range phases {
		obj := p.(map[string]any)
		for _, k := range []string{"name", "wall_s", "cpu_s", "db_cpu_s", "instances"} {
			if _, ok := obj[k]; !ok {
				t.Errorf("phase %v lacks key %q", obj["name"], k)
			}
		}
	}
	if _, err := os.Stat(strings.TrimSuffix(path, ".json") + ".txt"); err != nil {
		t.Errorf("no table beside the JSON: %v", err)
	}
}

func TestDeriveLeavesOutAPhaseThatDidNotComplete(t *testing.T) {
	t.Parallel()
	r := sampleReport()
	r.Phases = append(r.Phases, Phase{Name: PhaseValidation, CPUS: map[string]float64{"validator": 100}, DBCPUS: 100,
		Error: "end condition not reached"})
	r.Derive()
	if math.Abs(r.TotalCPUSPer100k-500) > 1e-9 {
		t.Errorf("total per 100k = %v with a failed phase, want 500 (the completed phases only)", r.TotalCPUSPer100k)
	}
}
