package scheduler

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/state"
)

const sample24 = "../protocol/testdata/samples/24_scheduler_request_report_after_permanent_upload_error.body.xml"

// sampleReport returns the <result> element of a captured request.
func sampleReport(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)<result>.*</result>\n`).Find(b)
	if m == nil {
		t.Fatalf("%s has no <result>", path)
	}
	return string(m)
}

// TestReportWithoutUploadedOutput reports the real client's report after a
// permanent upload error (sample 24: state 5, exit 0), with and without the
// error_msg the client adds, against an upload directory that has the
// output, has it with the wrong size, or lacks it.
func TestReportWithoutUploadedOutput(t *testing.T) {
	t.Parallel()
	report := sampleReport(t, sample24)
	noErrorMsg := regexp.MustCompile(`(?s)\s*<error_msg>.*</error_msg>`).ReplaceAllString(report, "")
	if !strings.Contains(report, "<error_msg>") || strings.Contains(noErrorMsg, "error_msg") {
		t.Fatalf("sample 24 not as expected:\n%s", report)
	}
	const output = "wu_upper_1_0_r0_out" // sample 24's output, 23 bytes
	for _, tt := range []struct {
		name     string
		report   string
		uploaded int // bytes in the upload directory; -1: no file
		// mode of the file: finished (the data server marked it), or
		// still writable (never finished: the upload may go on)
		mode fs.FileMode
		want state.Outcome
	}{
		{"sample 24 as captured, nothing uploaded", report, -1, 0, state.OutcomeClientError},
		{"sample 24 as captured, file there", report, 23, outputfile.FinishedMode, state.OutcomeClientError},
		{"no error_msg, nothing uploaded", noErrorMsg, -1, 0, state.OutcomeClientError},
		{"no error_msg, file too short", noErrorMsg, 10, outputfile.FinishedMode, state.OutcomeClientError},
		{"no error_msg, file there", noErrorMsg, 23, outputfile.FinishedMode, state.OutcomeSuccess},
		{"no error_msg, file there but unfinished", noErrorMsg, 23, outputfile.WritingMode, state.OutcomeClientError},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			uploads := t.TempDir()
			f := setup(t, func(o *Options) { o.UploadDir = uploads })
			_, ids := f.addJob("wu_upper_1", job{})
			// The captured result names its output as the capture's server
			// did; make the stored result agree.
			if _, err := f.st.DB().ExecContext(f.ctx, `UPDATE result SET xml_doc_in = ? WHERE id = ?`,
				`<result><file_info><name>`+output+`</name><open_name>out</open_name><max_nbytes>100000</max_nbytes></file_info></result>`,
				ids[0]); err != nil {
				t.Fatal(err)
			}
			host := f.sendTo(1)
			if tt.uploaded >= 0 {
				p, err := fanout.Path(uploads, output, 16)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(strings.Repeat("x", tt.uploaded)), tt.mode); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(p, tt.mode); err != nil { // past the umask
					t.Fatal(err)
				}
			}
			rep := f.rpc(request{hostID: host, results: []string{tt.report}})
			if !acked(rep, "wu_upper_1_0") {
				t.Fatalf("report not acked: %+v", rep.ResultAcks)
			}
			r := f.result(ids[0])
			if r.ServerState != state.ServerOver || r.Outcome != tt.want || r.ClientState != state.ClientFilesUploaded ||
				r.ExitStatus != 0 {
				t.Fatalf("recorded %+v, want OVER, outcome %s, client_state as reported (5), exit 0", r, tt.want)
			}
			// Whatever the outcome, the output is final now: finished,
			// or closed (created closed when it was missing).
			p, _ := fanout.Path(uploads, output, 16)
			if st, err := os.Stat(p); err != nil || outputfile.Writable(st.Mode()) {
				t.Fatalf("output after the report: %v, %v; want it there and not writable", st, err)
			}
			label := reportSuccess
			if tt.want != state.OutcomeSuccess {
				label = reportClientError
			}
			if got := testutil.ToFloat64(f.svc.m.resultsReported.WithLabelValues(label)); got != 1 {
				t.Fatalf("results_reported_total{%s} = %v, want 1", label, got)
			}
		})
	}
}

// TestOptionalOutputMayBeMissing: a successful report need not include an
// optional output the application did not write (the client reports only
// what it uploaded); an optional output the client reports uploading but
// that is not there, and a required one missing, make the result an error.
func TestOptionalOutputMayBeMissing(t *testing.T) {
	t.Parallel()
	report := regexp.MustCompile(`(?s)\s*<error_msg>.*</error_msg>`).ReplaceAllString(sampleReport(t, sample24), "")
	const out, extra = "wu_upper_1_0_r0_out", "wu_upper_1_0_r1_extra"
	// The client reports uploading extra too.
	withExtra := strings.Replace(report, "</result>", "<file_info>\n    <name>"+extra+
		"</name>\n    <nbytes>5.000000</nbytes>\n    <max_nbytes>100000.000000</max_nbytes>\n</file_info>\n</result>", 1)
	for _, tt := range []struct {
		name     string
		report   string
		uploaded map[string]int // bytes of each finished file in the upload directory
		want     state.Outcome
	}{
		{"optional output not written", report, map[string]int{out: 23}, state.OutcomeSuccess},
		{"optional output written", withExtra, map[string]int{out: 23, extra: 5}, state.OutcomeSuccess},
		{"optional output reported but not there", withExtra, map[string]int{out: 23}, state.OutcomeClientError},
		{"required output missing", report, map[string]int{}, state.OutcomeClientError},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			uploads := t.TempDir()
			f := setup(t, func(o *Options) { o.UploadDir = uploads })
			_, ids := f.addJob("wu_upper_1", job{})
			doc, err := jobxml.FormatResult([]jobxml.OutputFile{{Name: out, OpenName: "out", MaxNbytes: 1e5},
				{Name: extra, OpenName: "extra", MaxNbytes: 1e5, Optional: true}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.st.DB().ExecContext(f.ctx, `UPDATE result SET xml_doc_in = ? WHERE id = ?`, doc, ids[0]); err != nil {
				t.Fatal(err)
			}
			host := f.sendTo(1)
			for name, n := range tt.uploaded {
				p, err := fanout.Path(uploads, name, 16)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(strings.Repeat("x", n)), outputfile.FinishedMode); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(p, outputfile.FinishedMode); err != nil {
					t.Fatal(err)
				}
			}
			rep := f.rpc(request{hostID: host, results: []string{tt.report}})
			if !acked(rep, "wu_upper_1_0") {
				t.Fatalf("report not acked: %+v", rep.ResultAcks)
			}
			if r := f.result(ids[0]); r.ServerState != state.ServerOver || r.Outcome != tt.want {
				t.Fatalf("recorded server state %v outcome %v, want OVER, %v", r.ServerState, r.Outcome, tt.want)
			}
		})
	}
}
