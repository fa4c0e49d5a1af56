package scheduler

import (
	"reflect"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/scheduler/decide"
)

// TestJobsTodayCounts: counts add up per host and version on one day and
// start again on a later one; they are taken once due (or when all are
// asked for), one write at a time, in the store's lock order; a write that
// failed leaves them counted, one that succeeded removes what it wrote
// and keeps what came meanwhile; the overlay adds them to the rows read
// (same day), replaces an earlier day's, and makes a row for a version
// without one.
func TestJobsTodayCounts(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(100*86400, 0)
	d := func(host, av int64, sent int, day int64) decide.HostAppVersionDelta {
		return decide.HostAppVersionDelta{HostID: host, AppVersionID: av, Sent: sent, Day: day}
	}
	var j jobsToday
	j.add([]decide.HostAppVersionDelta{d(2, 5, 1, 100), d(1, 7, 2, 100), {HostID: 3, AppVersionID: 5, Errors: 1}}, t0)
	j.add([]decide.HostAppVersionDelta{d(2, 5, 2, 100), d(1, 7, 1, 99)}, t0)
	if got := j.take(t0.Add(jobsTodayWriteEvery/2), false); got != nil {
		t.Fatalf("taken before due: %+v", got)
	}
	want := []decide.HostAppVersionDelta{d(1, 7, 2, 100), d(2, 5, 3, 100)}
	taken := j.take(t0.Add(jobsTodayWriteEvery), false)
	if !reflect.DeepEqual(taken, want) {
		t.Fatalf("taken when due: %+v, want %+v", taken, want)
	}
	if again := j.take(t0.Add(time.Hour), true); again != nil {
		t.Fatalf("taken again while the first write is on: %+v", again)
	}
	j.done(taken, false, t0)
	if taken = j.take(t0, true); !reflect.DeepEqual(taken, want) {
		t.Fatalf("after a failed write, all taken: %+v, want %+v", taken, want)
	}
	// Sent meanwhile: host 2 one more today, host 1 the next day.
	j.add([]decide.HostAppVersionDelta{d(2, 5, 1, 100), d(1, 7, 4, 101)}, t0)
	j.done(taken, true, t0)
	if got := j.take(t0, true); !reflect.DeepEqual(got, []decide.HostAppVersionDelta{d(1, 7, 4, 101), d(2, 5, 1, 100)}) {
		t.Fatalf("after a write, left: %+v", got)
	} else {
		j.done(got, false, t0)
	}

	rows := []row.HostAppVersion{{HostID: 1, AppVersionID: 7, NJobsToday: 9, Day: 100, MaxJobsPerDay: 3},
		{HostID: 1, AppVersionID: 8, NJobsToday: 2, Day: 101}}
	got := j.overlay(1, rows)
	wantRows := []row.HostAppVersion{{HostID: 1, AppVersionID: 7, NJobsToday: 4, Day: 101, MaxJobsPerDay: 3},
		{HostID: 1, AppVersionID: 8, NJobsToday: 2, Day: 101}}
	if !reflect.DeepEqual(got, wantRows) {
		t.Errorf("overlay of host 1: %+v, want %+v", got, wantRows)
	}
	if rows[0].NJobsToday != 9 {
		t.Errorf("overlay changed the rows read: %+v", rows[0])
	}
	got = j.overlay(2, []row.HostAppVersion{{HostID: 2, AppVersionID: 5, NJobsToday: 6, Day: 100}})
	if len(got) != 1 || got[0].NJobsToday != 7 {
		t.Errorf("overlay of host 2, same day: %+v, want 7 jobs", got)
	}
	got = j.overlay(2, nil)
	if want := []row.HostAppVersion{{HostID: 2, AppVersionID: 5, NJobsToday: 1, Day: 100}}; !reflect.DeepEqual(got, want) {
		t.Errorf("overlay of host 2 without rows: %+v, want %+v", got, want)
	}
	if got := j.overlay(3, nil); got != nil {
		t.Errorf("overlay of host 3 (an error, no sends): %+v, want nothing", got)
	}
}
