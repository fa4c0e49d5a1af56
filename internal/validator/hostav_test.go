package validator

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// hav is host hostID's host_app_version row for version avID.
func (b *bundle) hav(t *testing.T, hostID, avID int64) row.HostAppVersion {
	t.Helper()
	rows, err := b.st.HostAppVersionListByHost(context.Background(), hostID)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.AppVersionID == avID {
			return r
		}
	}
	return row.HostAppVersion{}
}

// TestVerdictsTeachHostAppVersion: each valid result adds its elapsed time
// per estimated FLOP and turnaround to its host's row for the version and
// doubles the host's shrunk daily quota, up to --daily-result-quota and
// no further; an invalid result ends its host's valid streak.
func TestVerdictsTeachHostAppVersion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const av, quota = 9, 8
	svc := b.service(Config{App: "demo", Batch: 100, DailyResultQuota: quota})
	u1, h1 := b.volunteer(t, "a@example.com")
	u2, h2 := b.volunteer(t, "b@example.com")
	u3, h3 := b.volunteer(t, "c@example.com")
	// h1 failed with the version until its quota was 1; h3 had a streak.
	b.exec(t, `INSERT INTO host_app_version (host_id, app_version_id, max_jobs_per_day, n_errors) VALUES (?, ?, 1, 9)`, h1, av)
	b.exec(t, `INSERT INTO host_app_version (host_id, app_version_id, consecutive_valid) VALUES (?, ?, 3)`, h3, av)
	ran := func(id int64, elapsed float64) {
		b.exec(t, `UPDATE result SET app_version_id = ?, elapsed_time = ?, sent_time = ?, received_time = ? WHERE id = ?`,
			av, elapsed, t0-7200, t0-3600, id)
	}
	var quotas []int
	for i, elapsed := range []float64{43200, 40000, 50000, 43200} {
		wu := b.addJob(t, fmt.Sprintf("j%d", i))
		ran(b.addSuccess(t, wu, fmt.Sprintf("j%d_0", i), u1, h1, []byte("42\n"), state.ValidateInit), elapsed)
		ran(b.addSuccess(t, wu, fmt.Sprintf("j%d_1", i), u2, h2, []byte("42\n"), state.ValidateInit), 1000)
		if i == 3 {
			ran(b.addSuccess(t, wu, fmt.Sprintf("j%d_2", i), u3, h3, []byte("41\n"), state.ValidateInit), 1000)
		}
		if n := runOnce(t, svc); n != 1 {
			t.Fatalf("pass %d: RunOnce = %d jobs, want 1", i, n)
		}
		quotas = append(quotas, b.hav(t, h1, av).MaxJobsPerDay)
	}
	if want := []int{2, 4, 8, 8}; !slices.Equal(quotas, want) {
		t.Errorf("h1's quota after each valid result: %v, want %v (doubled, capped at --daily-result-quota %d)",
			quotas, want, quota)
	}
	h := b.hav(t, h1, av)
	wantMean := (43200 + 40000 + 50000 + 43200) / 4 / fpopsDay
	if h.EtN != 4 || math.Abs(h.EtAvg-wantMean) > wantMean*1e-9 || h.EtMedian <= 0 ||
		h.TurnaroundN != 4 || h.TurnaroundAvg != 3600 || h.ConsecutiveValid != 4 || h.NValid != 4 || h.NErrors != 9 {
		t.Errorf("h1's row %+v: want 4 samples of mean %g, turnaround 3600, 4 valid in a row, n_errors 9", h, wantMean)
	}
	if h := b.hav(t, h3, av); h.ConsecutiveValid != 0 || h.EtN != 0 || h.NValid != 0 {
		t.Errorf("h3's row after an invalid result: %+v; want streak 0, nothing learnt", h)
	}
	if r := b.hav(t, h2, av); r.EtN != 4 || math.Abs(r.EtMedian*fpopsDay/1000-1) > 1e-12 {
		t.Errorf("h2's row %+v: want 4 samples of %g", r, 1000/fpopsDay)
	}
}
