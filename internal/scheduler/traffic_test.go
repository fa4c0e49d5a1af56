package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

const sample09 = "../protocol/testdata/samples/09_scheduler_request_reporting_result.body.xml"

// sampleRequest is a captured request of the real client, as the fixture's
// user on host hostID with rpc_seqno seqno, with its one report replaced
// by reports.
func (f *fixture) sampleRequest(path string, hostID int64, seqno int, reports ...string) string {
	f.t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		f.t.Fatal(err)
	}
	s := regexp.MustCompile(`<authenticator>.*</authenticator>`).ReplaceAllString(string(b),
		"<authenticator>"+f.user.Authenticator+"</authenticator>")
	s = regexp.MustCompile(`<hostid>.*</hostid>`).ReplaceAllString(s, fmt.Sprintf("<hostid>%d</hostid>", hostID))
	s = regexp.MustCompile(`<rpc_seqno>.*</rpc_seqno>`).ReplaceAllString(s, fmt.Sprintf("<rpc_seqno>%d</rpc_seqno>", seqno))
	loc := regexp.MustCompile(`(?s)<result>.*</result>\n`).FindStringIndex(s)
	if loc == nil && len(reports) == 0 {
		return s
	}
	if loc == nil {
		f.t.Fatalf("%s has no <result>", path)
	}
	return s[:loc[0]] + strings.Join(reports, "") + s[loc[1]:]
}

// sampleReportNamed is sample 09's report as of result name, with stderr
// lines of stderrBytes in all before its own.
func sampleReportNamed(t testing.TB, name string, stderrBytes int) string {
	r := strings.ReplaceAll(sampleReport(t, sample09), "wu_upper_1_0", name)
	line := strings.Repeat("x", 99) + "\n"
	return strings.Replace(r, "app started", strings.Repeat(line, stderrBytes/len(line))+"app started", 1)
}

func (f *fixture) postReply(body string) *protocol.SchedulerReply {
	f.t.Helper()
	code, out := f.post(body)
	if code != http.StatusOK {
		f.t.Fatalf("POST /scheduler (%d bytes) = %d %q, want 200", len(body), code, out)
	}
	rep, err := protocol.ParseSchedulerReply(strings.NewReader(out))
	if err != nil {
		f.t.Fatalf("reply: %v\n%s", err, out)
	}
	return rep
}

// TestRealClientsLargestReportIsAccepted: a real 7.20 client reports
// every ready task in one request, each with up to 64 KB of stderr; 20
// tasks with 62 KB each made a 1.27 MB request (issue 16), refused with 413
// for ever. It is accepted with the default limits, every report recorded
// with its stderr (cut to the column's size, keeping the end).
func TestRealClientsLargestReportIsAccepted(t *testing.T) {
	t.Parallel()
	f := setup(t, func(o *Options) { o.MaxResultsPerRPC = 20 })
	var ids []int64
	for i := range 20 {
		_, id := f.addJob(fmt.Sprintf("wu%02d", i), job{})
		ids = append(ids, id[0])
	}
	rep := f.rpc(request{workSecs: 1e4, instances: 20, ncpus: 8})
	if len(rep.Results) != 20 {
		t.Fatalf("sent %d tasks, want 20", len(rep.Results))
	}
	host := rep.HostID
	var reports []string
	for i := range 20 {
		reports = append(reports, sampleReportNamed(t, fmt.Sprintf("wu%02d_0", i), 62<<10))
	}
	body := f.sampleRequest(sample09, host, 1, reports...)
	if len(body) < 1_260_000 {
		t.Fatalf("request is %d bytes, want the 1.27 MB the real client sent", len(body))
	}
	f.now.Add(600)
	rep = f.postReply(body)
	for i, id := range ids {
		name := fmt.Sprintf("wu%02d_0", i)
		r := f.result(id)
		if !acked(rep, name) || r.ServerState != state.ServerOver || r.Outcome != state.OutcomeSuccess ||
			len(r.StderrOut) < 62<<10 || len(r.StderrOut) > maxBlob || !strings.HasSuffix(r.StderrOut, "</stderr_txt>") {
			t.Fatalf("report %s: acked %v, recorded %v/%v with %d bytes of stderr", name, acked(rep, name),
				r.ServerState, r.Outcome, len(r.StderrOut))
		}
	}
}

// TestMalformedRequestGetsSchedulerReply: a request the scheduler cannot
// use is answered as BOINC's scheduler answers it, with a scheduler reply
// the client reads: a message for the event log in words a volunteer can
// act on (no Go error text) and a request_delay, so the client backs off.
// The detail goes to the server's log with the peer address, and the
// host id when the request's head names one.
func TestMalformedRequestGetsSchedulerReply(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	f := setup(t, func(o *Options) {
		o.MaxBodyBytes = 8192
		o.Log = slog.New(slog.NewTextHandler(&logs, nil))
	})
	whole := f.sampleRequest(sample09, 4321, 1, sampleReport(t, sample09))
	big := f.sampleRequest(sample09, 4321, 1, sampleReportNamed(t, "big", 10_000))
	for _, tt := range []struct {
		name, body string
		outcome    string
		logged     []string
	}{
		{"cut off", whole[:len(whole)/2], outcomeBadRequest, []string{"no </scheduler_request>"}},
		{"not a request", "hello", outcomeBadRequest, []string{"no <scheduler_request>"}},
		{"too deep", "<scheduler_request>" + strings.Repeat("<a>", 100) + "</scheduler_request>", outcomeBadRequest,
			[]string{"nested too deeply"}},
		{"too large", big, outcomeTooLarge, []string{"host_id=4321", "more than 8192 bytes"}},
	} {
		rep := f.postReply(tt.body)
		text := messages(rep)
		if len(rep.Messages) == 0 || rep.RequestDelay < 60 || rep.ResultAcks != nil {
			t.Errorf("%s: reply messages %q, request_delay %v, acks %v; want a message and a delay, nothing acked",
				tt.name, text, rep.RequestDelay, rep.ResultAcks)
		}
		for _, goText := range []string{"parse", "malformed", "message too large", "nested", "bytes", "scheduler_request"} {
			if strings.Contains(text, goText) {
				t.Errorf("%s: message %q shows the volunteer Go error text (%q)", tt.name, text, goText)
			}
		}
		out := logs.String()
		for _, want := range append(tt.logged, "remote_addr=127.0.0.1") {
			if !strings.Contains(out, want) {
				t.Errorf("%s: log lacks %q:\n%s", tt.name, want, out)
			}
		}
	}
	if got := testutil.ToFloat64(f.svc.m.requests.WithLabelValues(outcomeTooLarge)); got != 1 {
		t.Errorf("requests_total{too_large} = %v, want 1", got)
	}
	if n := f.count(`SELECT COUNT(*) FROM host`); n != 0 {
		t.Fatalf("hosts after refused requests = %d", n)
	}
}

// withOtherResults puts names in a request's <other_results>.
func withOtherResults(body string, names ...string) string {
	var b strings.Builder
	b.WriteString("<other_results>\n")
	for _, n := range names {
		fmt.Fprintf(&b, "    <other_result>\n        <name>%s</name>\n        <app_version>0</app_version>\n    </other_result>\n", n)
	}
	return strings.Replace(body, "<other_results>\n", b.String(), 1)
}

// TestRestoredClientReportsAreAccepted: a client restored from a backup
// sends an older rpc_seqno and gets a new host id; its tasks are still on
// the old host, of the same user. As BOINC does ("Allowing result because
// same USER"), its reports are recorded, under the host that reported them,
// and the tasks it still has are not aborted.
func TestRestoredClientReportsAreAccepted(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, a := f.addJob("wua", job{})
	_, b := f.addJob("wub", job{})
	_, c := f.addJob("wuc", job{})
	old := f.sendTo(3)
	f.rpc(request{hostID: old, seqno: 5})

	// Restored from a backup taken at rpc_seqno 2: a new host.
	f.now.Add(600)
	body := withOtherResults(f.sampleRequest(sample09, old, 2, sampleReportNamed(t, "wua_0", 0)), "wub_0", "wuc_0")
	rep := f.postReply(body)
	restored := rep.HostID
	if restored == 0 || restored == old {
		t.Fatalf("restored client's reply hostid = %d, want a new host", restored)
	}
	if !acked(rep, "wua_0") || len(rep.ResultAborts)+len(rep.ResultAbortsINS) != 0 {
		t.Fatalf("restored client: acks %v, aborts %v %v; want wua_0 acked and nothing aborted",
			rep.ResultAcks, rep.ResultAborts, rep.ResultAbortsINS)
	}
	if r := f.result(a[0]); r.ServerState != state.ServerOver || r.Outcome != state.OutcomeSuccess || r.HostID != restored {
		t.Fatalf("wua_0 after the restored client's report: %v/%v on host %d; want SUCCESS on host %d",
			r.ServerState, r.Outcome, r.HostID, restored)
	}
	for _, id := range []int64{b[0], c[0]} {
		if r := f.result(id); r.ServerState != state.ServerInProgress || r.HostID != old {
			t.Fatalf("task the restored client still has: %v/%v on host %d; want in progress on %d",
				r.ServerState, r.Outcome, r.HostID, old)
		}
	}
	// Next time, under its new id, it reports another, and an error.
	rep = f.postReply(withOtherResults(f.sampleRequest(sample09, restored, 1, sampleReportNamed(t, "wub_0", 0),
		errorReport("wuc_0"))))
	if !acked(rep, "wub_0") || !acked(rep, "wuc_0") {
		t.Fatalf("second request: acks %v", rep.ResultAcks)
	}
	if r := f.result(b[0]); r.Outcome != state.OutcomeSuccess || r.HostID != restored {
		t.Fatalf("wub_0: %v on host %d", r.Outcome, r.HostID)
	}
	if r := f.result(c[0]); r.Outcome != state.OutcomeClientError || r.HostID != restored {
		t.Fatalf("wuc_0: %v on host %d", r.Outcome, r.HostID)
	}
	if h := f.hostRow(restored); h.ErrorStreak != 1 {
		t.Fatalf("restored host's error_streak = %d, want 1 (the error it reported)", h.ErrorStreak)
	}
	if h := f.hostRow(old); h.ErrorStreak != 0 {
		t.Fatalf("old host's error_streak = %d, want 0", h.ErrorStreak)
	}
}

// statementCounter counts the store calls a request makes; each is one
// statement or one transaction of a few.
type statementCounter struct {
	*store.Store
	calls atomic.Int64
}

func (s *statementCounter) HostGetByCPID(ctx context.Context, userID int64, cpid string) (row.Host, error) {
	s.calls.Add(1)
	return s.Store.HostGetByCPID(ctx, userID, cpid)
}

func (s *statementCounter) HostInsert(ctx context.Context, h row.Host) (int64, error) {
	s.calls.Add(1)
	return s.Store.HostInsert(ctx, h)
}

func (s *statementCounter) ResultListReported(ctx context.Context, names []string) ([]store.ReportedResult, error) {
	s.calls.Add(1)
	return s.Store.ResultListReported(ctx, names)
}

func (s *statementCounter) ResultListByIDs(ctx context.Context, ids []int64) ([]row.Result, error) {
	s.calls.Add(1)
	return s.Store.ResultListByIDs(ctx, ids)
}

func (s *statementCounter) ResultListByNames(ctx context.Context, names []string) ([]store.ResultByName, error) {
	s.calls.Add(1)
	return s.Store.ResultListByNames(ctx, names)
}

func (s *statementCounter) ResultListHostInProgress(ctx context.Context, hostID int64, limit int) ([]store.HostResult, error) {
	s.calls.Add(1)
	return s.Store.ResultListHostInProgress(ctx, hostID, limit)
}

func (s *statementCounter) ResultDetachHost(ctx context.Context, hostID, now int64) (int, error) {
	s.calls.Add(1)
	return s.Store.ResultDetachHost(ctx, hostID, now)
}

func (s *statementCounter) SchedulerCommit(ctx context.Context, b store.SchedBatch) (store.SchedOutcome, error) {
	s.calls.Add(1)
	return s.Store.SchedulerCommit(ctx, b)
}

func (s *statementCounter) UserHostGet(ctx context.Context, auth string, hostID int64) (store.UserHostHeld, error) {
	s.calls.Add(1)
	return s.Store.UserHostGet(ctx, auth, hostID)
}

func (s *statementCounter) UserHostHeldGet(ctx context.Context, auth string, hostID int64, limit int) (store.UserHostHeld, error) {
	s.calls.Add(1)
	return s.Store.UserHostHeldGet(ctx, auth, hostID, limit)
}

func (s *statementCounter) UserHostHeldList(ctx context.Context, keys []store.AuthHost, limit int) ([]store.UserHostHeld, error) {
	s.calls.Add(1)
	return s.Store.UserHostHeldList(ctx, keys, limit)
}

func (s *statementCounter) WorkunitListByIDs(ctx context.Context, ids []int64) ([]row.Workunit, error) {
	s.calls.Add(1)
	return s.Store.WorkunitListByIDs(ctx, ids)
}

// manyReportsRequest is sample 09 from host with n reports: wua_0 first,
// wub_0 at late, the others of unknown results.
func (f *fixture) manyReportsRequest(host int64, n, late int) string {
	reports := make([]string, n)
	unknown := sampleReportNamed(f.t, "nosuch_NNNNN", 0)
	for i := range reports {
		reports[i] = strings.Replace(unknown, "NNNNN", fmt.Sprintf("%05d", i), 1)
	}
	reports[0] = sampleReportNamed(f.t, "wua_0", 0)
	reports[late] = sampleReportNamed(f.t, "wub_0", 0)
	return f.sampleRequest(sample09, host, 1, reports...)
}

// TestManyReportsCostAFewStatements: a request with 27,000 reports (issue
// 16: 27,043 SELECTs, 5.2 s, and held whole) is answered with a few
// statements: the first protocol.DefaultMaxReports reports are looked up
// together and acked; the others are not acked (the client reports them
// again), and a task among them is not taken for lost and resent.
func TestManyReportsCostAFewStatements(t *testing.T) {
	t.Parallel()
	sc := &statementCounter{}
	f := setup(t, func(o *Options) { sc.Store = o.Store.(*store.Store); o.Store = sc })
	_, a := f.addJob("wua", job{})
	_, b := f.addJob("wub", job{})
	host := f.sendTo(2)

	const n = 27_000
	const late = protocol.DefaultMaxReports + 500 // where wub_0 is reported
	body := f.manyReportsRequest(host, n, late)

	f.now.Add(600)
	sc.calls.Store(0)
	rep := f.postReply(body)
	if calls := sc.calls.Load(); calls > 5 {
		t.Errorf("request with %d reports made %d store calls, want at most 5", n, calls)
	}
	if len(rep.ResultAcks) != protocol.DefaultMaxReports || !acked(rep, "wua_0") || acked(rep, "wub_0") {
		t.Errorf("acked %d reports (wua_0 %v, wub_0 %v); want the first %d, wua_0 among them, not wub_0",
			len(rep.ResultAcks), acked(rep, "wua_0"), acked(rep, "wub_0"), protocol.DefaultMaxReports)
	}
	if len(rep.Results) != 0 {
		t.Errorf("resent %v: a task reported past the limit is not lost", resultNames(rep))
	}
	if r := f.result(a[0]); r.Outcome != state.OutcomeSuccess {
		t.Errorf("wua_0 = %v, want SUCCESS", r.Outcome)
	}
	if r := f.result(b[0]); r.ServerState != state.ServerInProgress {
		t.Errorf("wub_0 = %v, want still in progress (reported again next time)", r.ServerState)
	}
	// Next time it is recorded.
	rep = f.postReply(f.sampleRequest(sample09, host, 2, sampleReportNamed(t, "wub_0", 0)))
	if !acked(rep, "wub_0") || f.result(b[0]).Outcome != state.OutcomeSuccess {
		t.Errorf("wub_0 reported again: acked %v, outcome %v", acked(rep, "wub_0"), f.result(b[0]).Outcome)
	}
}

// BenchmarkManyReports answers the request of
// TestManyReportsCostAFewStatements (27,000 reports, 21 MB) again and
// again, and reports the store calls (statements or short transactions)
// and the allocations per request.
func BenchmarkManyReports(b *testing.B) {
	sc := &statementCounter{}
	f := setup(b, func(o *Options) { sc.Store = o.Store.(*store.Store); o.Store = sc })
	f.addJob("wua", job{})
	f.addJob("wub", job{})
	host := f.sendTo(2)
	body := f.manyReportsRequest(host, 27_000, protocol.DefaultMaxReports+500)
	sc.calls.Store(0)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for range b.N {
		f.postReply(body)
	}
	b.ReportMetric(float64(sc.calls.Load())/float64(b.N), "store-calls/op")
}

const sample17 = "../protocol/testdata/samples/17_scheduler_request_anonymous_platform.body.xml"

// TestLostTaskResentToAnonymousPlatform: a host was sent a task with the
// project's app version, lost it, and now runs the anonymous platform
// (its own builds, app_info.xml). The task is resent for the client's own
// build, without the project's <app_version> and files; a client whose
// anonymous platform does not list the task's app is not sent it at all.
func TestLostTaskResentToAnonymousPlatform(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		lists  string // the app the anonymous platform lists
		resent bool
	}{
		{"lists the app", "demo", true},
		{"lists another app", "upper", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			f.addJob("wua", job{})
			host := f.sendTo(1)
			body := strings.Replace(f.sampleRequest(sample17, host, 1), "<app_name>upper</app_name>",
				"<app_name>"+tt.lists+"</app_name>", 1)
			rep := f.postReply(body)
			if !tt.resent {
				if len(rep.Results) != 0 || len(rep.AppVersions) != 0 {
					t.Fatalf("anonymous platform without the app: resent %v with app versions %+v; want nothing",
						resultNames(rep), rep.AppVersions)
				}
				return
			}
			if names := resultNames(rep); len(names) != 1 || names[0] != "wua_0" {
				t.Fatalf("anonymous platform listing the app: resent %v, want [wua_0]", names)
			}
			if len(rep.AppVersions) != 0 || len(rep.Raw) != 0 {
				t.Fatalf("resend to an anonymous platform carries app versions %+v", rep.AppVersions)
			}
			for _, fi := range rep.FileInfos {
				if fi.FileSignature != "" || fi.Executable != nil {
					t.Fatalf("resend to an anonymous platform carries the project's app file %+v", fi)
				}
			}
			if r := rep.Results[0]; r.VersionNum != 100 || r.Platform != platformName {
				t.Fatalf("resent result names version %d on %q, want the client's own build (100, %s)",
					r.VersionNum, r.Platform, platformName)
			}
		})
	}
}
