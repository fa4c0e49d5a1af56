package scheduler

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/shmcache"
	"github.com/taskserver/taskserver/internal/state"
)

func TestHostQueueCheck(t *testing.T) {
	t.Parallel()
	host := row.Host{PNCPUs: 2, PFpops: 1e9, MNbytes: 1e9, DFree: 1e10}
	job := shmcache.Entry{RscFpopsEst: 1e12, RscMemoryBound: 1e8, RscDiskBound: 1e8, DelayBound: 7200} // 1000 s
	tests := []struct {
		name   string
		host   row.Host
		req    protocol.SchedulerRequest
		queued []float64 // fpops of jobs already held
		job    func(e shmcache.Entry) shmcache.Entry
		want   string
	}{
		{name: "fits", host: host, want: ""},
		{name: "too much memory", host: host, job: func(e shmcache.Entry) shmcache.Entry { e.RscMemoryBound = 2e9; return e }, want: reasonMemory},
		{name: "memory unknown on host is no limit", host: row.Host{PNCPUs: 1, PFpops: 1e9},
			job: func(e shmcache.Entry) shmcache.Entry { e.RscMemoryBound = 2e9; e.RscDiskBound = 1e15; return e }, want: ""},
		{name: "too much disk", host: host, job: func(e shmcache.Entry) shmcache.Entry { e.RscDiskBound = 2e10; return e }, want: reasonDisk},
		{name: "runtime beyond deadline", host: host, job: func(e shmcache.Entry) shmcache.Entry { e.DelayBound = 999; return e }, want: reasonDeadline},
		{name: "no delay bound is never feasible", host: host, job: func(e shmcache.Entry) shmcache.Entry { e.DelayBound = 0; return e }, want: reasonDeadline},
		// 2 CPUs hold 12 jobs of 1000 s: queue ends at now+6000, the new job at 7000 <= 7200.
		{name: "queue shared by CPUs fits", host: host, queued: repeat(1e12, 12), want: ""},
		// 14 jobs: queue ends at now+7000, the new job at 8000 > 7200.
		{name: "queue too long", host: host, queued: repeat(1e12, 14), want: reasonDeadline},
		{name: "client's estimated delay counts", host: host, req: protocol.SchedulerRequest{EstimatedDelay: 6500}, want: reasonDeadline},
		{name: "unknown speed falls back to 1e9", host: row.Host{}, want: ""},
		{name: "slow host", host: row.Host{PFpops: 1e8}, want: reasonDeadline},
		{name: "host available half the time is half as fast", host: row.Host{PFpops: 1e9, OnFrac: 0.5, ActiveFrac: 1},
			job: func(e shmcache.Entry) shmcache.Entry { e.DelayBound = 1500; return e }, want: reasonDeadline},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := newHostQueue(1000, tt.host, &tt.req, resources(tt.host, &tt.req), 10, nil)
			v := &version{avgNCPUs: 1, flops: tt.host.PFpops}
			for _, f := range tt.queued {
				q.add(f, 0, v)
			}
			e := job
			if tt.job != nil {
				e = tt.job(e)
			}
			if got := queueCheck(q, e, v); got != tt.want {
				t.Fatalf("check(%+v) on host %+v with %d queued = %q, want %q", e, tt.host, len(tt.queued), got, tt.want)
			}
		})
	}
}

func TestHostQueueDiskShrinksWithWorkSent(t *testing.T) {
	t.Parallel()
	req := &protocol.SchedulerRequest{}
	q := newHostQueue(0, row.Host{DFree: 3e8}, req, resources(row.Host{}, req), 10, nil)
	e := shmcache.Entry{RscDiskBound: 1e8, DelayBound: 1e6}
	v := &version{avgNCPUs: 1}
	for i := 0; i < 3; i++ {
		if got := queueCheck(q, e, v); got != "" {
			t.Fatalf("job %d: check = %q, want it to fit", i, got)
		}
		q.add(0, e.RscDiskBound, v)
	}
	if got := queueCheck(q, e, v); got != reasonDisk {
		t.Fatalf("4th job with 3e8 free: check = %q, want %q", got, reasonDisk)
	}
}

// queueCheck is the queue's verdict on e run with v: memory and disk, then
// the deadline.
func queueCheck(q *hostQueue, e shmcache.Entry, v *version) string {
	if why := q.fits(e); why != "" {
		return why
	}
	return q.deadline(e, v)
}

func repeat(f float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = f
	}
	return out
}

func TestCatalogChoose(t *testing.T) {
	t.Parallel()
	tables := shmcache.Tables{
		Platforms: []row.Platform{
			{ID: 1, Name: "x86_64-pc-linux-gnu"},
			{ID: 2, Name: "i686-pc-linux-gnu"},
			{ID: 3, Name: "windows_x86_64"},
			{ID: 4, Name: "old", Deprecated: true},
		},
		Apps: []row.App{
			{ID: 10, Name: "a"},
			{ID: 11, Name: "b", MinVersion: 200},
			{ID: 12, Name: "gone", Deprecated: true},
			{ID: 13, Name: "c"},
		},
		AppVersions: []row.AppVersion{
			{ID: 100, AppID: 10, VersionNum: 100, PlatformID: 1},
			{ID: 101, AppID: 10, VersionNum: 101, PlatformID: 2}, // newest, on the alt platform
			{ID: 102, AppID: 10, VersionNum: 102, PlatformID: 3},
			{ID: 103, AppID: 10, VersionNum: 103, PlatformID: 1, Deprecated: true},
			{ID: 104, AppID: 10, VersionNum: 104, PlatformID: 1, PlanClass: "cuda"},
			{ID: 110, AppID: 11, VersionNum: 100, PlatformID: 1}, // below min_version
			{ID: 120, AppID: 12, VersionNum: 100, PlatformID: 1},
			{ID: 130, AppID: 13, VersionNum: 5, PlatformID: 2},
			{ID: 131, AppID: 13, VersionNum: 5, PlatformID: 1}, // tie: primary wins
			{ID: 140, AppID: 10, VersionNum: 500, PlatformID: 4},
		},
	}
	c := newCatalog(tables, 1, nil)
	tests := []struct {
		name string
		req  protocol.SchedulerRequest
		want map[int64]int64 // app id → app version id (0: anonymous)
	}{
		{name: "primary only", req: protocol.SchedulerRequest{PlatformName: "x86_64-pc-linux-gnu"},
			want: map[int64]int64{10: 100, 13: 131}},
		{name: "alt platform newer version wins", req: protocol.SchedulerRequest{PlatformName: "x86_64-pc-linux-gnu",
			AltPlatforms: []protocol.AltPlatform{{Name: "i686-pc-linux-gnu"}}},
			want: map[int64]int64{10: 101, 13: 131}},
		{name: "unknown platform", req: protocol.SchedulerRequest{PlatformName: "sparc"}, want: map[int64]int64{}},
		{name: "deprecated platform", req: protocol.SchedulerRequest{PlatformName: "old"}, want: map[int64]int64{}},
		{name: "anonymous platform uses the client's versions", req: protocol.SchedulerRequest{PlatformName: "anonymous",
			AppVersions: []protocol.ClientAppVer{{AppName: "a", VersionNum: 7}, {AppName: "a", VersionNum: 9}, {AppName: "gone", VersionNum: 1}}},
			want: map[int64]int64{10: 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := c.choose(&tt.req, row.Host{}, choiceParams{}).byApp
			if len(got) != len(tt.want) {
				t.Fatalf("choose(%+v) = %+v, want apps→versions %v", tt.req, got, tt.want)
			}
			for app, avID := range tt.want {
				if v, ok := got[app]; !ok || v[0].av.ID != avID {
					t.Fatalf("choose(%+v)[%d] = %+v, want version id %d", tt.req, app, v, avID)
				}
			}
		})
	}
	if v := c.choose(&protocol.SchedulerRequest{PlatformName: "anonymous",
		AppVersions: []protocol.ClientAppVer{{AppName: "a", VersionNum: 7}, {AppName: "a", VersionNum: 9}}}, row.Host{},
		choiceParams{}).byApp[10][0]; v.versionNum != 9 || !v.anonymous {
		t.Fatalf("anonymous choice = %+v, want the client's newest version 9", v)
	}
}

func TestReportOutcome(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rr   protocol.ReportResult
		want state.Outcome
	}{
		{"uploaded, exit 0", protocol.ReportResult{State: 5}, state.OutcomeSuccess},
		{"uploaded, exit 1", protocol.ReportResult{State: 5, ExitStatus: 1}, state.OutcomeClientError},
		{"compute error", protocol.ReportResult{State: 3, ExitStatus: 3}, state.OutcomeClientError},
		{"download error", protocol.ReportResult{State: 1, ExitStatus: -186}, state.OutcomeClientError},
		{"upload failed for good but state 5", protocol.ReportResult{State: 5,
			FileInfos: []protocol.ReportFileInfo{{Name: "x_0", ErrorMsg: "\npermanent upload error\n"}}}, state.OutcomeClientError},
		{"aborted", protocol.ReportResult{State: 6}, state.OutcomeClientError},
	}
	for _, tt := range tests {
		if got, _ := reportOutcome(&tt.rr); got != tt.want {
			t.Errorf("%s: reportOutcome(%+v) = %v, want %v", tt.name, tt.rr, got, tt.want)
		}
	}
}

func TestOutputDocKeepsOnlyOwnFiles(t *testing.T) {
	t.Parallel()
	doc := outputDoc([]protocol.ReportFileInfo{
		{Name: "r_0", Nbytes: 23, MaxNbytes: 100, MD5Cksum: "abc"},
		{Name: "other_0", Nbytes: 1},
		{Name: "../etc/passwd"},
		{Name: "r_1", Nbytes: math.NaN(), ErrorMsg: "failed"},
	}, nil)
	if strings.Contains(doc, "passwd") || !strings.Contains(doc, "<name>r_0</name>") || !strings.Contains(doc, "<error_msg>failed</error_msg>") {
		t.Fatalf("outputDoc without expected names = %q", doc)
	}
	doc = outputDoc([]protocol.ReportFileInfo{{Name: "r_0", Nbytes: 23}, {Name: "other_0", Nbytes: 1}},
		[]jobxml.OutputFile{{Name: "r_0"}})
	if strings.Contains(doc, "other_0") || !strings.Contains(doc, "<nbytes>23</nbytes>") {
		t.Fatalf("outputDoc with expected names = %q, want only r_0", doc)
	}
}

func TestClip(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abcdef", 3, "abc"},
		{"aé", 2, "a"}, // é is 2 bytes: not cut in half
		{"aéb", 3, "aé"},
	} {
		if got := clip(tt.in, tt.n); got != tt.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

func TestMasterPage(t *testing.T) {
	t.Parallel()
	h := MasterPage("Demo <Project>", "http://127.0.0.1:8080/scheduler")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET / = %d, want 200", rec.Code)
	}
	body := rec.Body.String()
	var link, sched bool
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, `<link rel="boinc_scheduler" href="http://127.0.0.1:8080/scheduler">`) {
			link = true
		}
		if strings.Contains(line, "<scheduler>http://127.0.0.1:8080/scheduler</scheduler>") {
			sched = true
		}
	}
	if !link || !sched || !strings.Contains(body, "Demo &lt;Project&gt;") {
		t.Fatalf("master page lacks an unindented <link>, a <scheduler> line or the escaped name:\n%s", body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/other", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("GET /other = %d, want 404", rec.Code)
	}
}
