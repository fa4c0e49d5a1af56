package taskctl_test

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/hostav"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestHostAppVersions(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	p := prepareExplain(t, b)
	host := strconv.FormatInt(p.host, 10)
	out := b.mustRun(t, "host", "app-versions", "--host", host)
	if !strings.Contains(out, "no app version run yet") {
		t.Errorf("host show of a host without rows:\n%s\nwant it to say none", out)
	}
	today := hostav.Day(b.now.Unix())
	// Version 1 (demo 100): 12 samples of a median 2 s per GFLOP, quota
	// shrunk to 3, 4 jobs today; an anonymous NVIDIA build: one sample,
	// jobs counted yesterday.
	storetest.Exec(t, b.st, `INSERT INTO host_app_version (host_id, app_version_id, et_n, et_avg, et_median,
consecutive_valid, max_jobs_per_day, n_jobs_today, day, n_errors, n_valid, turnaround_avg)
VALUES (?, 1, 12, 2.5e-9, 2e-9, 2, 3, 4, ?, 5, 12, 3600), (?, ?, 1, 1e-10, 1e-10, 1, 0, 7, ?, 0, 1, 60)`,
		p.host, today, p.host, hostav.GeneralizedID(1, hostav.AnonNVIDIA), today-1)
	out = b.mustRun(t, "host", "app-versions", "--host", host)
	t.Logf("host show:\n%s", out)
	lines := strings.Split(out, "\n")
	if len(lines) < 4 {
		t.Fatalf("host show: %q, want a header and two rows", out)
	}
	for _, want := range []struct {
		line   int
		fields []string
	}{
		{3, []string{"demo 100 (#1)", "12", "2", "2.5", "0.5", "3", "4", "5", "12", "2", "3600"}},
		{2, []string{"demo anonymous nvidia", "1", "0.1", "0.1", "10 (few)", "full", "0", "0", "1", "1", "60"}},
	} {
		got := strings.Join(strings.Fields(lines[want.line]), " ")
		if w := strings.Join(want.fields, " "); !strings.Contains(got, w) {
			t.Errorf("host show line %d: %q, want %q", want.line, got, w)
		}
	}
	var rows []struct {
		Version   string  `json:"version"`
		Rate      float64 `json:"rate"`
		Trusted   bool    `json:"trusted"`
		JobsToday int     `json:"jobs_today"`
	}
	if err := json.Unmarshal([]byte(b.mustRun(t, "host", "app-versions", "--host", host, "--json")), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || !rows[1].Trusted || rows[1].JobsToday != 4 || math.Abs(rows[1].Rate-5e8) > 1 || rows[0].Trusted {
		t.Errorf("host show --json = %+v; want the anonymous row first (untrusted), then demo 100 trusted at 5e8 with 4 jobs today", rows)
	}
}
