package scheduler

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/state"
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
	if loc == nil {
		f.t.Fatalf("%s has no <result>", path)
	}
	return s[:loc[0]] + strings.Join(reports, "") + s[loc[1]:]
}

// sampleReportNamed is sample 09's report as of result name, with stderr
// lines of stderrBytes in all before its own.
func sampleReportNamed(t *testing.T, name string, stderrBytes int) string {
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
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
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
