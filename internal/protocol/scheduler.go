package protocol

import (
	"bufio"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
)

// ParseSchedulerRequest reads a client's <scheduler_request> within
// DefaultLimits. See ParseSchedulerRequestLimits.
func ParseSchedulerRequest(r io.Reader) (*SchedulerRequest, error) {
	return ParseSchedulerRequestLimits(r, DefaultLimits())
}

// ParseSchedulerRequestLimits reads a client's <scheduler_request>. It is
// lenient where the client is sloppy (unescaped names, unknown elements,
// anything before the root) and strict where it matters: a request without
// its closing tag was cut off, and is refused with ErrMalformed rather than
// read as a host that has fewer tasks than it has. Errors wrap ErrTooLarge,
// ErrTooDeep or ErrMalformed, or are read errors from r.
//
// The request is read as it streams, and what it may make the parser hold
// is bounded by lim, not by its length: each report (<result>) is decoded
// on its own, with only the last lim.MaxStderrBytes of its stderr_out; past
// lim.MaxReports reports or lim.MaxReportBytes kept, the remaining reports
// are read, counted in ReportsLeft, and dropped, so that the client reports
// them again next time.
func ParseSchedulerRequestLimits(r io.Reader, lim Limits) (*SchedulerRequest, error) {
	req, err := parseRequestStream(r, lim)
	if err != nil {
		return nil, fmt.Errorf("parse scheduler request: %w", err)
	}
	return req, nil
}

// WriteSchedulerRequest writes req as a client does. The simulated client
// uses it.
func WriteSchedulerRequest(w io.Writer, req *SchedulerRequest) error {
	return writeDocument(w, "scheduler_request", reflect.ValueOf(req).Elem(), nil)
}

// WriteSchedulerReply writes rep as the reply body the BOINC client accepts,
// from <scheduler_reply> to </scheduler_reply>, followed by rep.Raw
// fragments verbatim before the closing tag.
func WriteSchedulerReply(w io.Writer, rep *SchedulerReply) error {
	return writeDocument(w, "scheduler_reply", reflect.ValueOf(rep).Elem(), rep.Raw)
}

// ParseSchedulerReply reads a <scheduler_reply> the way the client does:
// whatever comes before it is skipped, and a reply without
// </scheduler_reply> is an error. The simulated client uses it.
func ParseSchedulerReply(r io.Reader) (*SchedulerReply, error) {
	root, err := readDocument(r, DefaultLimits(), "scheduler_reply")
	if err != nil {
		return nil, fmt.Errorf("parse scheduler reply: %w", err)
	}
	rep := &SchedulerReply{}
	decodeInto(root, reflect.ValueOf(rep).Elem())
	for i := range rep.TrickleDowns {
		rep.TrickleDowns[i].readTrickleFields()
	}
	return rep, nil
}

// readDocument reads r within lim and returns the first element called
// root, which must be closed.
func readDocument(r io.Reader, lim Limits, root string) (*node, error) {
	b, err := io.ReadAll(io.LimitReader(r, lim.MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	if int64(len(b)) > lim.MaxBytes {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, lim.MaxBytes)
	}
	doc, err := scan(string(b), lim)
	if err != nil {
		return nil, err
	}
	n := doc.find(root, nil)
	if n == nil {
		return nil, fmt.Errorf("%w: no <%s>", ErrMalformed, root)
	}
	if !n.closed {
		return nil, fmt.Errorf("%w: no </%s>; the message was cut off", ErrMalformed, root)
	}
	return n, nil
}

// writeBufs holds writeDocument's buffered writers: one per reply was a
// fifth of what the dispatch benchmark's scheduler allocated.
var writeBufs = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}

func writeDocument(w io.Writer, root string, v reflect.Value, raw []string) error {
	bw := writeBufs.Get().(*bufio.Writer)
	bw.Reset(w)
	defer func() {
		bw.Reset(nil)
		writeBufs.Put(bw)
	}()
	e := &encoder{w: bw}
	bw.WriteString("<" + root + ">\n")
	e.fields(v, 0)
	for _, frag := range raw {
		bw.WriteString(frag)
		if !strings.HasSuffix(frag, "\n") {
			bw.WriteByte('\n')
		}
	}
	bw.WriteString("</" + root + ">\n")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", root, err)
	}
	return nil
}

// HeadHostID returns the host id named in the first bytes of a scheduler
// request, or 0: enough to log which host sent a request that could not be
// read whole.
func HeadHostID(head []byte) int64 {
	doc, err := scan(string(head), Limits{MaxBytes: int64(len(head)), MaxDepth: 32, MaxElements: 1000})
	if err != nil {
		return 0
	}
	if n := doc.find("hostid", nil); n != nil {
		return parseInt(n.text(), 64)
	}
	return 0
}
