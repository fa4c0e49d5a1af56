package protocol

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// sampleParts splits the recorded request of sample 09 into what comes
// before its report, the report, and what follows it.
func sampleParts(t testing.TB) (head, report, tail string) {
	t.Helper()
	b := string(readSample(t, "09_scheduler_request_reporting_result.body.xml"))
	loc := regexp.MustCompile(`(?s)<result>.*</result>\n`).FindStringIndex(b)
	if loc == nil {
		t.Fatal("sample 09 has no <result>")
	}
	return b[:loc[0]], b[loc[0]:loc[1]], b[loc[1]:]
}

// manyReports is sample 09 with n reports, each with stderr lines of
// stderrBytes in all, generated as it is read: the body is never held, and
// reading it allocates nothing.
type manyReports struct {
	head, tail string
	pre, post  string // a report, before and after its number
	i, n       int
	state      int // 0 head, 1 reports, 2 tail, 3 done
	buf        []byte
	out        []byte
}

func newManyReports(t testing.TB, n, stderrBytes int) (*manyReports, int64) {
	head, report, tail := sampleParts(t)
	line := strings.Repeat("x", 63) + "\n"
	report = strings.Replace(report, "app started", strings.Repeat(line, stderrBytes/len(line))+"app started", 1)
	pre, post, _ := strings.Cut(report, "wu_upper_1_0")
	pre += "wu_upper_"
	post = "_0" + post
	m := &manyReports{head: head, tail: tail, pre: pre, post: post, n: n, buf: make([]byte, 0, len(report)+16)}
	size := int64(len(head) + len(tail))
	for i := range n {
		size += int64(len(pre) + len(post) + len(strconv.Itoa(i)))
	}
	return m, size
}

func (m *manyReports) Read(p []byte) (int, error) {
	for len(m.out) == 0 {
		switch m.state {
		case 0:
			m.buf = append(m.buf[:0], m.head...)
			m.state = 1
		case 1:
			if m.i == m.n {
				m.state = 2
				continue
			}
			m.buf = append(strconv.AppendInt(append(m.buf[:0], m.pre...), int64(m.i), 10), m.post...)
			m.i++
		case 2:
			m.buf = append(m.buf[:0], m.tail...)
			m.state = 3
		default:
			return 0, io.EOF
		}
		m.out = m.buf
	}
	n := copy(p, m.out)
	m.out = m.out[n:]
	return n, nil
}

// TestManyReportsAreBounded reads the recorded request of sample 09 with
// 27,000 reports of 1 KB of stderr each (issue 16: such a request was held
// whole and each of its reports looked up). The parser keeps the first
// MaxReports, counts the rest in ReportsLeft, and holds a bounded amount of
// memory: what it keeps, and what it allocates in all, are bounded by the
// reports kept, not by the body, which it never holds.
func TestManyReportsAreBounded(t *testing.T) {
	const n = 27_000
	body, size := newManyReports(t, n, 1024)
	lim := DefaultLimits()
	lim.MaxBytes = size

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	req, err := ParseSchedulerRequestLimits(body, lim)
	if err != nil {
		t.Fatalf("request with %d reports (%d bytes): %v", n, size, err)
	}
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	runtime.KeepAlive(req)

	if len(req.Results) != DefaultMaxReports || req.ReportsLeft != n-DefaultMaxReports {
		t.Fatalf("kept %d reports, left %d; want the first %d kept, %d left", len(req.Results), req.ReportsLeft,
			DefaultMaxReports, n-DefaultMaxReports)
	}
	if last := req.Results[len(req.Results)-1]; last.Name != fmt.Sprintf("wu_upper_%d_0", DefaultMaxReports-1) ||
		!strings.HasSuffix(last.StderrOut, "</stderr_txt>") || len(last.StderrOut) < 1024 {
		t.Fatalf("last report kept: %q with %d bytes of stderr", last.Name, len(last.StderrOut))
	}
	if len(req.AppVersions) != 1 || !req.HasOtherResults || req.HostID != 7 {
		t.Fatalf("what follows the reports was lost: %+v", req)
	}
	// A kept report is its text (about 1.6 KB here) and its decoded form.
	perReport := int64(4 << 10)
	if bound := DefaultMaxReports * perReport; held > bound {
		t.Errorf("request holds %d bytes after parsing, want at most %d (%d reports × %d)", held, bound,
			DefaultMaxReports, perReport)
	}
	// Reading a kept report allocates a few copies of it; one left
	// allocates nothing, and the body is never held (a third of it here).
	if bound := uint64(DefaultMaxReports * 2 * perReport); allocated > bound {
		t.Errorf("parsing a %d-byte request allocated %d bytes; want at most %d (%d reports × %d)", size, allocated,
			bound, DefaultMaxReports, 2*perReport)
	}
}

// TestLargeStderrKeepsItsTail: a report's stderr_out longer than
// MaxStderrBytes keeps its end, which says how the app ended, as BOINC's
// client keeps the end of a long stderr.
func TestLargeStderrKeepsItsTail(t *testing.T) {
	t.Parallel()
	head, report, tail := sampleParts(t)
	big := strings.Repeat("é&amp;line\n", 20_000) + "the end"
	report = strings.Replace(report, "app started in", big+" app started in", 1)
	report = strings.Replace(report, "<core_client_version>", "&lt;early&gt;<core_client_version>", 1)
	lim := DefaultLimits()
	lim.MaxStderrBytes = 65535
	req, err := ParseSchedulerRequestLimits(strings.NewReader(head+report+tail), lim)
	if err != nil {
		t.Fatal(err)
	}
	got := req.Results[0].StderrOut
	if len(got) > 65535 || len(got) < 65535-4 || !strings.HasSuffix(got, "args: \n\n</stderr_txt>") ||
		!strings.Contains(got, "é&amp;line\nthe end app started") {
		t.Fatalf("stderr of %d bytes kept as %d bytes ending %q", len(big), len(got), got[max(0, len(got)-100):])
	}
	if !bytes.Equal([]byte(got), bytes.ToValidUTF8([]byte(got), nil)) {
		t.Fatalf("kept stderr starts inside a character: %q", got[:10])
	}
	// It is the tail of the whole stderr, every byte of it, not only its
	// first and last lines.
	lim.MaxStderrBytes = 1 << 30
	whole, err := ParseSchedulerRequestLimits(strings.NewReader(head+report+tail), lim)
	if err != nil {
		t.Fatal(err)
	}
	if w := whole.Results[0].StderrOut; !strings.HasSuffix(w, got) {
		t.Fatalf("kept stderr (%d bytes) is not the tail of the whole (%d bytes)", len(got), len(w))
	}
	// A short one is kept whole, decoded as before.
	req, err = ParseSchedulerRequestLimits(strings.NewReader(head+strings.Replace(report, big, "short", 1)+tail), lim)
	if err != nil {
		t.Fatal(err)
	}
	if got := req.Results[0].StderrOut; !strings.HasPrefix(got, "<early><core_client_version>7.20.5</core_client_version>\n\n<stderr_txt>\nshort app started") {
		t.Fatalf("short stderr = %q", got)
	}
}

// TestReportBytesAreBounded: 200 reports with the largest stderr a client
// sends are more than MaxReportBytes; the reports up to it are kept, the
// others left for the next request.
func TestReportBytesAreBounded(t *testing.T) {
	t.Parallel()
	const n = 200
	body, size := newManyReports(t, n, 62<<10)
	lim := DefaultLimits()
	req, err := ParseSchedulerRequestLimits(body, lim)
	if err != nil {
		t.Fatalf("request with %d reports (%d bytes): %v", n, size, err)
	}
	var kept int64
	for _, r := range req.Results[:len(req.Results)-1] {
		kept += int64(len(r.StderrOut))
	}
	if req.ReportsLeft == 0 || len(req.Results)+req.ReportsLeft != n || kept >= lim.MaxReportBytes ||
		kept+int64(len(req.Results[len(req.Results)-1].StderrOut)) < lim.MaxReportBytes-2*ClientStderrMax {
		t.Fatalf("kept %d reports (%d bytes of stderr before the last), left %d; want reports up to %d bytes kept, the rest left",
			len(req.Results), kept, req.ReportsLeft, lim.MaxReportBytes)
	}
}

// BenchmarkParseManyReports reads the request of TestManyReportsAreBounded
// (27,000 reports of 1 KB of stderr, 49 MB): the allocations per request
// are those of the reports kept.
func BenchmarkParseManyReports(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		body, size := newManyReports(b, 27_000, 1024)
		lim := DefaultLimits()
		lim.MaxBytes = size
		b.SetBytes(size)
		if _, err := ParseSchedulerRequestLimits(body, lim); err != nil {
			b.Fatal(err)
		}
	}
}
