package scheduler

import (
	"testing"

	"github.com/taskserver/taskserver/internal/hostav"
	"github.com/taskserver/taskserver/internal/row"
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
// host_app_version row for the version, today's; each reported error
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
	if h := f.hav(host, f.avID); h.NJobsToday != 3 || h.Day != day || h.MaxJobsPerDay != 0 {
		t.Fatalf("after 3 jobs sent: row %+v, want 3 jobs on day %d, quota unset", h, day)
	}
	f.now.Add(600)
	rep := f.rpc(request{hostID: host, results: []string{errorReport("a_0"), errorReport("b_0"), successReport("c_0")}})
	if !acked(rep, "a_0") || !acked(rep, "b_0") || !acked(rep, "c_0") {
		t.Fatalf("reports: acks %+v, want all three", rep.ResultAcks)
	}
	if h := f.hav(host, f.avID); h.MaxJobsPerDay != quota-2 || h.NErrors != 2 || h.ConsecutiveValid != 0 || h.NJobsToday != 3 {
		t.Errorf("after 2 errors and a success: row %+v, want quota %d, 2 errors, streak 0, still 3 jobs today", h, quota-2)
	}
}

// TestHostAppVersionsFromTheAuthRead: the rows read with the user serve
// the request when they are of its host; otherwise they are read.
func TestHostAppVersionsFromTheAuthRead(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.addJob("a", job{})
	host := f.sendTo(1)
	stale := []row.HostAppVersion{{HostID: host, AppVersionID: 99}}
	x := &rpc{host: row.Host{ID: host}, preHeldOf: host, preHAV: stale}
	if got, err := f.svc.hostAppVersions(f.ctx, x); err != nil || len(got) != 1 || got[0].AppVersionID != 99 {
		t.Errorf("with the auth read's rows of the host: %+v, %v; want those rows", got, err)
	}
	x = &rpc{host: row.Host{ID: host}, preHeldOf: host + 1, preHAV: stale}
	if got, err := f.svc.hostAppVersions(f.ctx, x); err != nil || len(got) != 1 || got[0].AppVersionID != f.avID ||
		got[0].NJobsToday != 1 {
		t.Errorf("auth read of another host: %+v, %v; want the host's own row (version %d, 1 job today)", got, err, f.avID)
	}
}
