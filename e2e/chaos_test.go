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

	"github.com/taskserver/taskserver/internal/privatedb"
)

// TestChaosSmallRun runs the real chaos binary on a small run (300 jobs,
// 20 SIGKILLs of daemons, one database restart, a full upload disk and a
// scheduler flood) and checks its report: every key there and every
// outcome 0. `make chaos` is the same with 5,000 jobs and 100 kills.
func TestChaosSmallRun(t *testing.T) {
	b := runChaos(t, 6*time.Minute, "--jobs", "300", "--kills", "20", "--kill-every", "1s",
		"--burst-hosts", "50", "--burst-for", "8s", "--disk-full-for", "5s", "--seed", "8", "--timeout", "5m")
	var r map[string]any
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("report.json: %v\n%s", err, b)
	}
	faults, ok := r["faults"].(map[string]any)
	if !ok {
		t.Fatalf("report.json faults = %v, want an object of counts", r["faults"])
	}
	kills := 0.0
	for k, v := range faults {
		if len(k) > 5 && k[:5] == "kill_" {
			kills += v.(float64)
		}
	}
	if kills != 20 {
		t.Errorf("kills injected = %v, want 20 (faults %v)", kills, faults)
	}
	for _, k := range []string{"db_restart", "scheduler_overload"} {
		if faults[k] != 1.0 {
			t.Errorf("faults[%s] = %v, want 1", k, faults[k])
		}
	}
	// The disk-full fault needs a tmpfs mount: as root it must happen.
	if os.Geteuid() == 0 && faults["disk_full"] != 1.0 {
		t.Errorf("faults[disk_full] = %v as root, want 1 (skipped: %v)", faults["disk_full"], r["disk_full_skipped"])
	}
	// At least 300: the work generator's documented window may add a batch.
	if j, _ := r["jobs"].(float64); j < 300 {
		t.Errorf("jobs = %v, want 300", r["jobs"])
	}
	for _, k := range []string{"jobs_lost", "duplicate_assimilations", "duplicate_credit", "same_user_twice",
		"reports_lost", "files_leaked", "files_deleted_early", "wrong_outputs", "counts_off"} {
		v, ok := r[k].(float64)
		if !ok || v != 0 {
			t.Errorf("report.json %s = %v, want 0 (notes: %v)", k, r[k], r["notes"])
		}
	}
	if r["finished"] != true {
		t.Errorf("finished = %v, want true", r["finished"])
	}
}

// runChaos builds the programs, runs `chaos args... --out DIR` within
// timeout, logs its output, fails the test when it does not exit 0 and
// returns its report.json.
func runChaos(t *testing.T, timeout time.Duration, args ...string) []byte {
	t.Helper()
	bin := chaosPrograms(t)
	out := filepath.Join(t.TempDir(), "report")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "chaos"), append(args, "--out", out)...)
	start := time.Now()
	output, err := cmd.CombinedOutput()
	t.Logf("chaos %s ran %s:\n%s", strings.Join(args, " "), time.Since(start).Round(time.Second), output)
	if err != nil {
		t.Errorf("chaos %s: %v, want exit 0", strings.Join(args, " "), err)
	}
	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatalf("read report: %v", err)
	}
	return b
}

// chaosPrograms builds the programs for a run of the chaos binary, which
// starts its own private MariaDB: skipped in -short mode or without a
// MariaDB server program (a failure under CI or TASKSERVER_REAL_CLIENT).
func chaosPrograms(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	if !privatedb.Available() {
		if os.Getenv("CI") == "true" || os.Getenv("TASKSERVER_REAL_CLIENT") == "1" {
			t.Fatal("no MariaDB server program installed (scripts/db-up.sh installs it)")
		}
		t.Skip("no MariaDB server program installed for the chaos run's private database")
	}
	return buildPrograms(t)
}
