package scheduler

import (
	"testing"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/shmcache"
)

// The rules that pick which cached instances a host may get, one row each,
// on a walk built by hand: no database, no cache file.
func TestWalkCheck(t *testing.T) {
	t.Parallel()
	const (
		linuxIntelModel = "Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz [Family 6 Model 158 Stepping 10]"
		plain, fine     = 10, 11 // apps: no homogeneous redundancy, fine classes
		deprecated      = 12
		otherPlatform   = 13
	)
	trusted := row.Host{OSName: "Linux Ubuntu", PVendor: "GenuineIntel", PModel: linuxIntelModel, PNCPUs: 1, PFpops: 1e9,
		MNbytes: 1e9, DFree: 1e10, ConsecutiveValid: 10, AvgTurnaround: 3600}
	linux := hrClass(hrFine, trusted.OSName, trusted.PVendor, trusted.PModel)
	cat := newCatalog(shmcache.Tables{
		Platforms: []row.Platform{{ID: 1, Name: "x86_64-pc-linux-gnu"}, {ID: 2, Name: "windows_x86_64"}},
		Apps: []row.App{{ID: plain, Name: "plain"}, {ID: fine, Name: "fine", HomogeneousRedundancy: hrFine},
			{ID: deprecated, Name: "old", Deprecated: true}, {ID: otherPlatform, Name: "win"}},
		AppVersions: []row.AppVersion{{ID: 100, AppID: plain, VersionNum: 1, PlatformID: 1},
			{ID: 110, AppID: fine, VersionNum: 1, PlatformID: 1}, {ID: 120, AppID: deprecated, VersionNum: 1, PlatformID: 1},
			{ID: 130, AppID: otherPlatform, VersionNum: 1, PlatformID: 2}},
	}, 1, nil)
	req := &protocol.SchedulerRequest{PlatformName: "x86_64-pc-linux-gnu", WorkReqSeconds: 1}
	entry := func(app int64, mod ...func(*shmcache.Entry)) shmcache.Entry {
		e := shmcache.Entry{ResultID: 1, WorkunitID: 1, AppID: app, RscFpopsEst: 1e12, RscMemoryBound: 1e8,
			RscDiskBound: 1e8, DelayBound: 86400}
		for _, m := range mod {
			m(&e)
		}
		return e
	}
	reliableOnly := func(e *shmcache.Entry) { e.Flags |= row.SendReliableOnly }
	bound := func(c int) func(*shmcache.Entry) { return func(e *shmcache.Entry) { e.HRClass = int32(c) } }
	for _, tt := range []struct {
		name    string
		host    row.Host
		quar    bool
		skipJob bool // the host holds the job, or it went to its user
		hrBound bool // a commit found the job bound to another class
		e       shmcache.Entry
		wantAV  int64
		wantHR  int
		want    string
	}{
		{name: "fits", host: trusted, e: entry(plain), wantAV: 100},
		{name: "no version for the host's platforms", host: trusted, e: entry(otherPlatform), want: reasonPlatform},
		{name: "app deprecated", host: trusted, e: entry(deprecated), want: reasonAppDeprecated},
		{name: "app unknown to the catalog", host: trusted, e: entry(99), want: reasonPlatform},
		{name: "job held or sent to the user: one per user", host: trusted, skipJob: true, e: entry(plain),
			want: reasonOnePerUser},
		{name: "job found bound to another class by a commit", host: trusted, hrBound: true, skipJob: true,
			e: entry(fine), want: reasonHR},
		{name: "homogeneous redundancy: the host's class to bind", host: trusted, e: entry(fine), wantAV: 110,
			wantHR: linux},
		{name: "homogeneous redundancy: cached bound to the host's class", host: trusted, e: entry(fine, bound(linux)),
			wantAV: 110, wantHR: linux},
		{name: "homogeneous redundancy: cached bound to another class", host: trusted, e: entry(fine, bound(linux+1)),
			want: reasonHR},
		{name: "no homogeneous redundancy: a class in the cache is no matter", host: trusted,
			e: entry(plain, bound(linux+1)), wantAV: 100},
		{name: "reliable only, reliable host", host: trusted, e: entry(plain, reliableOnly), wantAV: 100},
		{name: "reliable only, untrusted host", host: row.Host{PFpops: 1e9, AvgTurnaround: 3600},
			e: entry(plain, reliableOnly), want: reasonReliableOnly},
		{name: "reliable only, slow host", host: func() row.Host { h := trusted; h.AvgTurnaround = 86400; return h }(),
			e: entry(plain, reliableOnly), want: reasonReliableOnly},
		{name: "reliable only, quarantined host", host: trusted, quar: true, e: entry(plain, reliableOnly),
			want: reasonReliableOnly},
		{name: "too much memory", host: trusted, e: entry(plain, func(e *shmcache.Entry) { e.RscMemoryBound = 2e9 }),
			want: reasonMemory},
		{name: "too much disk", host: trusted, e: entry(plain, func(e *shmcache.Entry) { e.RscDiskBound = 2e10 }),
			want: reasonDisk},
		{name: "deadline not feasible", host: trusted, e: entry(plain, func(e *shmcache.Entry) { e.DelayBound = 999 }),
			want: reasonDeadline},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ch := cat.choose(req, tt.host, choiceParams{})
			w := &walk{host: tt.host, cat: cat, ch: ch, q: newHostQueue(0, tt.host, req, ch.rsc, 10, ch.quota), quar: tt.quar,
				hostClass: [...]int{hrFine: hrClass(hrFine, tt.host.OSName, tt.host.PVendor, tt.host.PModel),
					hrCoarse: hrClass(hrCoarse, tt.host.OSName, tt.host.PVendor, tt.host.PModel)},
				trustValid: 10, skipJob: map[int64]bool{}, hrBound: map[int64]bool{}}
			w.skipJob[tt.e.WorkunitID] = tt.skipJob
			w.hrBound[tt.e.WorkunitID] = tt.hrBound
			v, hr, why := w.check(tt.e)
			if why != tt.want || (why == "" && (v.av.ID != tt.wantAV || hr != tt.wantHR)) {
				t.Fatalf("check = version %d, class %d, %q; want version %d, class %d, %q", v.av.ID, hr, why, tt.wantAV,
					tt.wantHR, tt.want)
			}
		})
	}
}

// Why a request got less than it asked: a limit reached wins, then the
// reason most candidates were turned down for, ties to the most specific.
func TestWalkShort(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		nsent     int
		covered   float64
		nheld     int
		limit     int
		quar      bool
		seen      int
		rejected  map[string]int
		wantSecs  float64
		wantJobs  int
		maxPerRPC int
		want      string
	}{
		{name: "covered", nsent: 2, covered: 100, wantSecs: 100, wantJobs: 2, limit: 10, seen: 2, want: ""},
		{name: "seconds covered, jobs not", nsent: 1, covered: 100, wantSecs: 100, wantJobs: 2, limit: 10, seen: 9,
			want: reasonNoCachedWork},
		{name: "nothing sent, nothing asked in seconds", wantSecs: 0, wantJobs: 0, limit: 10, seen: 0,
			want: reasonNoCachedWork},
		{name: "reply full", nsent: 3, covered: 10, wantSecs: 100, maxPerRPC: 3, limit: 10, want: reasonRPCLimit},
		{name: "in-progress limit", nsent: 1, nheld: 3, limit: 4, wantSecs: 100, want: reasonInProgressLimit},
		{name: "quarantined: one task", nheld: 1, limit: 1, quar: true, wantSecs: 100, want: reasonQuarantined},
		{name: "nothing looked at: the cache had nothing", limit: 10, wantSecs: 100, want: reasonNoCachedWork},
		{name: "most rejections win", limit: 10, seen: 5, wantSecs: 100,
			rejected: map[string]int{reasonPlatform: 3, reasonMemory: 2}, want: reasonPlatform},
		{name: "a tie goes to the most specific", limit: 10, seen: 4, wantSecs: 100,
			rejected: map[string]int{reasonPlatform: 2, reasonDisk: 2}, want: reasonDisk},
		{name: "claims lost to others only: nothing more in the cache", limit: 10, seen: 3, wantSecs: 100,
			want: reasonNoCachedWork},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.maxPerRPC == 0 {
				tt.maxPerRPC = 100
			}
			q := &hostQueue{rsc: []rscQueue{{wantSecs: tt.wantSecs, wantInst: float64(tt.wantJobs), secs: tt.covered,
				inst: float64(tt.nsent), njobs: tt.nsent}}}
			w := &walk{q: q, nheld: tt.nheld, limit: tt.limit, quar: tt.quar, seen: tt.seen, rejected: tt.rejected}
			if got := w.short(tt.nsent, tt.maxPerRPC); got != tt.want {
				t.Fatalf("short = %q, want %q", got, tt.want)
			}
		})
	}
}

// Resending a lost task names the build it was sent with while that exists;
// an anonymous-platform client gets only its own builds.
func TestCatalogForResend(t *testing.T) {
	t.Parallel()
	c := newCatalog(shmcache.Tables{
		Platforms: []row.Platform{{ID: 1, Name: "x86_64-pc-linux-gnu"}},
		Apps:      []row.App{{ID: 10, Name: "a"}, {ID: 11, Name: "b"}},
		AppVersions: []row.AppVersion{{ID: 100, AppID: 10, VersionNum: 100, PlatformID: 1},
			{ID: 101, AppID: 10, VersionNum: 101, PlatformID: 1}},
	}, 1, nil)
	linux := &protocol.SchedulerRequest{PlatformName: "x86_64-pc-linux-gnu"}
	anon := &protocol.SchedulerRequest{PlatformName: anonymousPlatform, AppVersions: []protocol.ClientAppVer{
		{AppName: "a", VersionNum: 7, Platform: "p7"}, {AppName: "a", VersionNum: 9, Platform: "p9"}}}
	for _, tt := range []struct {
		name    string
		req     *protocol.SchedulerRequest
		app     int64
		avID    int64
		avNum   int
		ok      bool
		wantAV  int64
		wantNum int
	}{
		{name: "the version it was sent with", req: linux, app: 10, avID: 100, avNum: 100, ok: true, wantAV: 100,
			wantNum: 100},
		{name: "that version gone: the current choice", req: linux, app: 10, avID: 999, avNum: 50, ok: true,
			wantAV: 101, wantNum: 101},
		{name: "no version id: the current choice", req: linux, app: 10, avNum: 50, ok: true, wantAV: 101,
			wantNum: 101},
		{name: "app without a version for the host: not resent", req: linux, app: 11, avID: 999},
		{name: "anonymous: the client's build of that number", req: anon, app: 10, avNum: 7, ok: true, wantNum: 7},
		{name: "anonymous: no such build, its current choice", req: anon, app: 10, avNum: 8, ok: true, wantNum: 9},
		{name: "anonymous: the client lists no build of the app", req: anon, app: 11, avID: 100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, ok := c.choose(tt.req, row.Host{}, choiceParams{}).forResend(tt.app, tt.avID, tt.avNum)
			if ok != tt.ok || (ok && (v.av.ID != tt.wantAV || v.versionNum != tt.wantNum)) {
				t.Fatalf("forResend = version id %d number %d, %v; want %d number %d, %v", v.av.ID, v.versionNum, ok,
					tt.wantAV, tt.wantNum, tt.ok)
			}
		})
	}
}
