package chaos

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/assimilator"
	"github.com/taskserver/taskserver/internal/projectrun"
)

func TestRecordAppendsEveryDeliveryAndFlagsMissingOutputs(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "handled.log")
	out := filepath.Join(dir, "out")
	if err := os.WriteFile(out, []byte("output"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(assimilator.EnvJobName, "job_a")
	t.Setenv(assimilator.EnvErrorMask, "0")
	for range 2 { // a redelivery after a kill
		if err := Record(log, []string{out}); err != nil {
			t.Fatalf("Record(job_a) = %v, want nil", err)
		}
	}
	t.Setenv(assimilator.EnvJobName, "job_b")
	t.Setenv(assimilator.EnvErrorMask, "8")
	if err := Record(log, nil); err != nil {
		t.Fatalf("Record(job_b, failed) = %v, want nil", err)
	}
	t.Setenv(assimilator.EnvJobName, "job_c")
	t.Setenv(assimilator.EnvErrorMask, "0")
	if err := Record(log, []string{filepath.Join(dir, "gone")}); err == nil {
		t.Fatal("Record(job_c) with a missing output = nil, want an error so the job is retried")
	}
	// A line cut short by a kill is not a delivery.
	f, _ := os.OpenFile(log, os.O_APPEND|os.O_WRONLY, 0)
	_, _ = f.WriteString("done job_d 0 ab")
	f.Close()

	h, err := readHandled(log)
	if err != nil {
		t.Fatalf("readHandled: %v", err)
	}
	if n := len(h.done["job_a"]); n != 2 {
		t.Errorf("job_a deliveries = %d, want 2", n)
	}
	if ds := h.done["job_b"]; len(ds) != 1 || ds[0].mask != 8 || ds[0].digest != "-" {
		t.Errorf("job_b deliveries = %+v, want one with mask 8 and no digest", ds)
	}
	if h.missing["job_c"] != 1 || len(h.done["job_c"]) != 0 {
		t.Errorf("job_c: missing %d, done %d; want 1 missing, 0 done", h.missing["job_c"], len(h.done["job_c"]))
	}
	if _, ok := h.done["job_d"]; ok {
		t.Error("a line cut short counted as a delivery")
	}
}

func TestRecordRefusesToRunOutsideTheAssimilator(t *testing.T) {
	t.Setenv(assimilator.EnvJobName, "")
	if err := Record(filepath.Join(t.TempDir(), "log"), nil); err == nil {
		t.Fatal("Record with no job name = nil, want an error")
	}
}

func TestReportJSONKeysAndVerdict(t *testing.T) {
	tests := []struct {
		name string
		r    Report
		ok   bool
	}{
		{"clean finished run", Report{Finished: true, Jobs: 10}, true},
		{"unfinished run", Report{Finished: false, Jobs: 10}, false},
		{"a job lost", Report{Finished: true, JobsLost: 1}, false},
		{"credit granted twice", Report{Finished: true, DuplicateCredit: 1}, false},
		{"a file deleted too early", Report{Finished: true, FilesDeletedEarly: 1}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.OK(); got != tc.ok {
				t.Errorf("OK() = %v, want %v", got, tc.ok)
			}
			var table bytes.Buffer
			if err := tc.r.WriteTable(&table); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]string{true: "OK:", false: "FAILED:"}[tc.ok]; !strings.Contains(table.String(), want) {
				t.Errorf("table lacks %q:\n%s", want, table.String())
			}
		})
	}
	dir := t.TempDir()
	r := Report{Faults: map[string]int{"kill_scheduler": 3}, Finished: true}
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "report.json"))
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("report.json: %v", err)
	}
	for _, k := range []string{"faults", "jobs", "jobs_lost", "duplicate_assimilations", "duplicate_credit",
		"same_user_twice", "reports_lost", "files_leaked"} {
		if _, ok := m[k]; !ok {
			t.Errorf("report.json lacks key %q", k)
		}
	}
}

func TestOptionsRefuseBadValues(t *testing.T) {
	tests := []struct {
		name string
		o    Options
	}{
		{"no bin dir", Options{}},
		{"negative jobs", Options{BinDir: "bin", Jobs: -1}},
		{"negative kills", Options{BinDir: "bin", Kills: -1}},
		{"shares over 1", Options{BinDir: "bin", FailFrac: 0.6, CheatFrac: 0.6}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.o.defaults(); err == nil {
				t.Errorf("defaults() of %+v = nil, want an error", tc.o)
			}
		})
	}
	o := Options{BinDir: "bin"}
	if err := o.defaults(); err != nil || o.Jobs != 5000 || o.Kills != 100 || o.OutDir != "chaos-report" || o.FailFrac != DefaultFailFrac {
		t.Errorf("defaults() = %v, jobs %d, kills %d, out %q, fail frac %v; want nil, 5000, 100, chaos-report, %v",
			err, o.Jobs, o.Kills, o.OutDir, o.FailFrac, DefaultFailFrac)
	}
}

func TestOptionsKeepAnExplicitZeroFailFrac(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		want float64
	}{
		{"not given: the default", Options{BinDir: "bin"}, DefaultFailFrac},
		{"given as 0: no failing hosts", Options{BinDir: "bin", FailFracSet: true}, 0},
		{"given as 0.2", Options{BinDir: "bin", FailFrac: 0.2, FailFracSet: true}, 0.2},
		{"0.2 without the set flag", Options{BinDir: "bin", FailFrac: 0.2}, 0.2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			if err := o.defaults(); err != nil || o.FailFrac != tc.want {
				t.Errorf("defaults() = %v, fail frac %v; want nil, %v", err, o.FailFrac, tc.want)
			}
		})
	}
}

func TestJobsByNameAllowsARowArchivedAgain(t *testing.T) {
	a := projectrun.Record{"id": "1", "name": "a", "assimilate_state": "2"}
	b := projectrun.Record{"id": "2", "name": "b", "assimilate_state": "2"}
	bAgain := projectrun.Record{"id": "2", "name": "b", "assimilate_state": "2"}
	bOtherID := projectrun.Record{"id": "3", "name": "b", "assimilate_state": "2"}
	jobs, twice := jobsByName([]projectrun.Record{a, b, bAgain}, []projectrun.Record{a})
	if len(jobs) != 2 || len(twice) != 0 {
		t.Errorf("row archived twice and still live: %d jobs, duplicates %v; want 2 jobs, none", len(jobs), twice)
	}
	_, twice = jobsByName([]projectrun.Record{a, b}, []projectrun.Record{bOtherID})
	if len(twice) != 1 || twice[0] != "b" {
		t.Errorf("one name under two ids: duplicates %v, want [b]", twice)
	}
}
