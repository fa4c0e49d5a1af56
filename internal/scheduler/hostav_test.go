package scheduler

import (
	"testing"

	"github.com/taskserver/taskserver/internal/hostav"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// hav is host hostID's host_app_version row for version avID.
func (f *fixture) hav(hostID, avID int64) row.HostAppVersion {
	f.t.Helper()
	rows, err := f.st.HostAppVersionListByHost(f.ctx, hostID)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, r := range rows {
		if r.AppVersionID == avID {
			return r
		}
	}
	return row.HostAppVersion{}
}

// TestDailyQuotaBookkeeping: the jobs a host gets count in its
// host_app_version row for the version, today's, written with the first
// commit a second or more later (until then the scheduler counts them in
// memory); each reported error
// shrinks its daily quota from --daily-result-quota by one and ends its
// valid streak; a success leaves the quota alone (valid results, in the
// validator, grow it back).
func TestDailyQuotaBookkeeping(t *testing.T) {
	t.Parallel()
	const quota = 10
	f := setup(t, func(o *Options) { o.DailyResultQuota = quota })
	for _, name := range []string{"a", "b", "c"} {
		f.addJob(name, job{})
	}
	host := f.sendTo(3)
	day := hostav.Day(f.now.Load())
	if h := f.hav(host, f.avID); h.NJobsToday != 0 {
		t.Fatalf("right after 3 jobs sent: row %+v, want no jobs written yet", h)
	}
	if got := f.svc.commit.today.overlay(host, nil); len(got) != 1 || got[0].NJobsToday != 3 || got[0].Day != day {
		t.Fatalf("right after 3 jobs sent: counted in memory %+v, want 3 jobs on day %d", got, day)
	}
	f.now.Add(600)
	rep := f.rpc(request{hostID: host, results: []string{errorReport("a_0"), errorReport("b_0"), successReport("c_0")}})
	if !acked(rep, "a_0") || !acked(rep, "b_0") || !acked(rep, "c_0") {
		t.Fatalf("reports: acks %+v, want all three", rep.ResultAcks)
	}
	if h := f.hav(host, f.avID); h.MaxJobsPerDay != quota-2 || h.NErrors != 2 || h.ConsecutiveValid != 0 ||
		h.NJobsToday != 3 || h.Day != day {
		t.Errorf("after 2 errors and a success: row %+v, want quota %d, 2 errors, streak 0, 3 jobs on day %d written",
			h, quota-2, day)
	}
	if got := f.svc.commit.today.overlay(host, nil); len(got) != 0 {
		t.Errorf("after the counts were written: still counted in memory %+v", got)
	}
}

// TestSendRecordsFlopsEstimate: each instance sent keeps the <flops> its
// reply gave the client for the version (result.flops_estimate), first
// the benchmark, then, once the host has hostav.MinSamples valid results of
// the version, the host's own rate.
func TestSendRecordsFlopsEstimate(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, a := f.addJob("a", job{})
	rep := f.rpc(request{workSecs: 1e4, instances: 1, fpops: 2e9})
	if len(rep.Results) != 1 || len(rep.AppVersions) != 1 {
		t.Fatalf("first send: results %v, %d app versions", resultNames(rep), len(rep.AppVersions))
	}
	if got, told := f.result(a[0]).FlopsEstimate, rep.AppVersions[0].Flops; got != told || got != 2e9 {
		t.Errorf("first send: flops_estimate %g, reply <flops> %g; want both the benchmark 2e9", got, told)
	}

	// The host has measured the version (its row exists once the send's
	// count is written): 1/median of seconds per FLOP.
	if err := f.svc.Flush(f.ctx); err != nil {
		t.Fatal(err)
	}
	const measured = 5e9
	storetest.Exec(t, f.st, `UPDATE host_app_version SET et_n = ?, et_avg = ?, et_median = ?, n_valid = ?
WHERE host_id = ? AND app_version_id = ?`, hostav.MinSamples, 1/measured, 1/measured, hostav.MinSamples, rep.HostID, f.avID)
	_, b := f.addJob("b", job{})
	f.now.Add(600)
	rep = f.rpc(request{hostID: rep.HostID, seqno: 2, workSecs: 1e4, instances: 1, fpops: 2e9})
	if len(rep.Results) != 1 || len(rep.AppVersions) != 1 {
		t.Fatalf("second send: results %v, %d app versions", resultNames(rep), len(rep.AppVersions))
	}
	if got, told := f.result(b[0]).FlopsEstimate, rep.AppVersions[0].Flops; got != told || got != measured {
		t.Errorf("second send: flops_estimate %g, reply <flops> %g; want both the host's rate %g", got, told, float64(measured))
	}
}

// TestHostAppVersionsFromTheAuthRead: the rows read with the user serve
// the request when they are of its host; otherwise they are read. Either
// way the jobs the scheduler sent that the rows do not hold yet are added
// (a version without a row gets one), and once written they count once.
func TestHostAppVersionsFromTheAuthRead(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.addJob("a", job{})
	host := f.sendTo(1)
	day := hostav.Day(f.now.Load())
	jobsOf := func(rows []row.HostAppVersion, av int64) (int, bool) {
		for _, r := range rows {
			if r.AppVersionID == av {
				return r.NJobsToday, r.Day == day
			}
		}
		return -1, false
	}
	stale := []row.HostAppVersion{{HostID: host, AppVersionID: 99}}
	x := &rpc{host: row.Host{ID: host}, preHeldOf: host, preHAV: stale}
	got, err := f.svc.hostAppVersions(f.ctx, x)
	if n, today := jobsOf(got, f.avID); err != nil || len(got) != 2 || got[0].AppVersionID != 99 || n != 1 || !today {
		t.Errorf("with the auth read's rows of the host: %+v, %v; want those rows and 1 job today of version %d",
			got, err, f.avID)
	}
	for _, flushed := range []bool{false, true} {
		if flushed {
			if err := f.svc.Flush(f.ctx); err != nil {
				t.Fatal(err)
			}
		}
		x = &rpc{host: row.Host{ID: host}, preHeldOf: host + 1, preHAV: stale}
		got, err = f.svc.hostAppVersions(f.ctx, x)
		if n, today := jobsOf(got, f.avID); err != nil || len(got) != 1 || n != 1 || !today {
			t.Errorf("auth read of another host (counts written: %v): %+v, %v; want the host's own version %d, 1 job today",
				flushed, got, err, f.avID)
		}
	}
}
