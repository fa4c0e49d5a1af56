package scheduler

import (
	"slices"
	"testing"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/shmcache"
	"github.com/taskserver/taskserver/internal/store"
)

// DecideSends is the walk on inputs alone: sends with their entries and
// versions, the verdict on each entry, the shortfall and its reason.
func TestDecideSends(t *testing.T) {
	t.Parallel()
	tables := shmcache.Tables{
		Platforms:   []row.Platform{{ID: 1, Name: "x86_64-pc-linux-gnu"}},
		Apps:        []row.App{{ID: 10, Name: "a"}, {ID: 11, Name: "w"}},
		AppVersions: []row.AppVersion{{ID: 100, AppID: 10, VersionNum: 7, PlatformID: 1}},
	}
	// One hour per job on the host; deadlines of a day, two hours, two days.
	entry := func(id, app, delay int64) shmcache.Entry {
		return shmcache.Entry{ResultID: id, WorkunitID: id, AppID: app, RscFpopsEst: 3.6e12, DelayBound: delay}
	}
	entries := []shmcache.Entry{entry(1, 10, 86400), entry(2, 11, 86400), entry(3, 10, 2*3600), entry(4, 10, 2*86400),
		entry(5, 10, 86400)}
	host := row.Host{ID: 1, UserID: 1, PNCPUs: 1, PFpops: 1e9}
	req := &protocol.SchedulerRequest{PlatformName: "x86_64-pc-linux-gnu", WorkReqSeconds: 2 * 3600, CPUReqSecs: 2 * 3600}
	in := DecideInput{Now: 1000, Tables: tables, Entries: entries, Host: host, Request: req,
		Policy: Policy{MaxInProgressPerCPU: 10}}

	t.Run("covered", func(t *testing.T) {
		t.Parallel()
		// Two held hours: the third job would end after its two-hour deadline.
		in := in
		in.Held = []store.HostResult{{ID: 9, WorkunitID: 9, AppID: 10, AppVersionID: 100, RscFpopsEst: 3.6e12}}
		d := DecideSends(in)
		var got []int
		for _, s := range d.Sends {
			got = append(got, s.Entry)
			if s.AppVersionID != 100 || s.VersionNum != 7 || s.Resource != protocol.ResourceCPU || s.Flops != 1e9 {
				t.Errorf("send %+v, want version 100 (7) on the CPU at 1e9", s)
			}
		}
		if !slices.Equal(got, []int{0, 3}) || d.Short != "" {
			t.Fatalf("sends entries %v, short %q; want [0 3], covered", got, d.Short)
		}
		want := []string{"", reasonPlatform, reasonDeadline, "", ""}
		if !slices.Equal(d.Rejected, want) || !slices.Equal(d.Sent, []bool{true, false, false, true, false}) {
			t.Errorf("rejected %q sent %v, want %q and entries 0, 3", d.Rejected, d.Sent, want)
		}
	})
	t.Run("in-progress limit", func(t *testing.T) {
		t.Parallel()
		in := in
		in.Policy.MaxInProgressPerCPU = 1
		in.Held = []store.HostResult{{ID: 9, WorkunitID: 9, AppID: 10, AppVersionID: 100, RscFpopsEst: 3.6e12}}
		d := DecideSends(in)
		if len(d.Sends) != 0 || d.Short != reasonInProgressLimit || d.Limit != 1 {
			t.Fatalf("sends %v, short %q, limit %d; want none, %s, 1", d.Sends, d.Short, d.Limit, reasonInProgressLimit)
		}
	})
	t.Run("already sent to the user", func(t *testing.T) {
		t.Parallel()
		in := in
		in.SentToUser = []int64{1}
		d := DecideSends(in)
		if len(d.Sends) != 2 || d.Sends[0].Entry != 2 || d.Rejected[0] != reasonOnePerUser {
			t.Fatalf("sends %+v, rejected %q; want entries 2 and 3, entry 0 %s", d.Sends, d.Rejected, reasonOnePerUser)
		}
	})
}
