package protocol

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"
)

// Bounds of what one scheduler request may make the server hold.
const (
	// ClientStderrMax is the most stderr a BOINC client sends with one
	// task: it keeps the last 63 KB of the app's stderr
	// (client/app_control.cpp, read_stderr_file) and wraps it in a few
	// lines of XML.
	ClientStderrMax = 64 << 10
	// DefaultMaxReports is the most reports kept from one request. A client
	// reports only tasks it was sent, and the scheduler gives a host a few
	// tasks per CPU and reads at most 1000 of a host's tasks in progress:
	// 2000 is twice what any host can hold, so only a forged request meets
	// it. Reports past it are left for the client's next request.
	DefaultMaxReports = 2000
	// DefaultMaxReportBytes bounds the bytes kept of one request's reports,
	// stderr included: 128 reports with the largest stderr a client sends.
	// Reports past it are left for the client's next request.
	DefaultMaxReportBytes = 128 * ClientStderrMax
	// maxReportBytes bounds what is kept of one report besides its stderr:
	// a real one is under 2 KB. The rest of a longer one is dropped.
	maxReportBytes = 16 << 10
	// maxRestBytes bounds the request without its reports: host and
	// preferences, app versions, tasks in progress (a few hundred bytes
	// each). A longer request is refused as too large.
	maxRestBytes = 8 << 20
	// maxTagBytes bounds one tag; a '<' that starts a longer one is text.
	maxTagBytes = 4096
)

// DefaultMaxBodyBytes is the largest scheduler request read by default:
// the largest stderr a client sends for each of DefaultMaxReports tasks,
// and room for the rest. Memory does not grow with it: reports past the
// limits are read and dropped, not held.
const DefaultMaxBodyBytes = ClientStderrMax*DefaultMaxReports + maxRestBytes

// reqReader splits a scheduler request as it is read: each top-level
// <result> is decoded on its own, with its stderr_out cut to its tail while
// it streams, and the rest of the document is kept for the tree scanner.
// What it holds is bounded by the limits, never by the body.
type reqReader struct {
	br      *bufio.Reader
	lim     Limits
	rest    []byte
	stack   []string // open elements of rest, outermost first
	results []ReportResult
	left    int   // reports not kept
	kept    int64 // bytes kept of the reports

	// The report being read.
	mode   int
	chunk  []byte
	stderr stderrTail
	hasErr bool   // the report's first stderr_out was read
	tag    []byte // the tag being handled
}

const (
	modeRest   = iota // the document outside reports
	modeReport        // a report being kept
	modeStderr        // the first stderr_out of a report being kept
	modeSkip          // a report past the limits
)

// errTooLarge is returned by the body's reader past Limits.MaxBytes.
type limitReader struct {
	r    io.Reader
	left int64
	max  int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left < 0 {
		return 0, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, l.max)
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		return n, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, l.max)
	}
	return n, err
}

// readBufs holds the request readers' 64 KiB buffers. A new one per
// request was the scheduler's largest allocation: zeroing it, collecting it
// and handing its pages back to the kernel cost about a sixth of the
// dispatch benchmark's scheduler CPU.
var readBufs = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

// parseRequestStream reads a scheduler request within lim.
func parseRequestStream(r io.Reader, lim Limits) (*SchedulerRequest, error) {
	if lim.MaxReports <= 0 {
		lim.MaxReports = DefaultMaxReports
	}
	if lim.MaxReportBytes <= 0 {
		lim.MaxReportBytes = DefaultMaxReportBytes
	}
	if lim.MaxStderrBytes <= 0 {
		lim.MaxStderrBytes = ClientStderrMax
	}
	br := readBufs.Get().(*bufio.Reader)
	br.Reset(&limitReader{r: r, left: lim.MaxBytes, max: lim.MaxBytes})
	p := &reqReader{lim: lim, br: br}
	p.stderr.max = lim.MaxStderrBytes
	err := p.run()
	// Everything kept was copied out of the buffer, so it goes back now.
	p.br = nil
	br.Reset(nil)
	readBufs.Put(br)
	if err != nil {
		if errors.Is(err, ErrTooLarge) || errors.Is(err, ErrTooDeep) || errors.Is(err, ErrMalformed) {
			return nil, err
		}
		return nil, fmt.Errorf("read: %w", err)
	}
	doc, err := scan(string(p.rest), lim)
	if err != nil {
		return nil, err
	}
	root := doc.find("scheduler_request", nil)
	if root == nil {
		return nil, fmt.Errorf("%w: no <scheduler_request>", ErrMalformed)
	}
	if !root.closed {
		return nil, fmt.Errorf("%w: no </scheduler_request>; the message was cut off", ErrMalformed)
	}
	req := &SchedulerRequest{}
	decodeInto(root, reflect.ValueOf(req).Elem())
	req.HasOtherResults = root.child("other_results") != nil
	req.Results = p.results
	for i := range req.MsgsFromHost {
		req.MsgsFromHost[i].readMsgFields()
	}
	req.ReportsLeft = p.left
	return req, nil
}

// run reads the whole body. Text, and a '<' that cannot start markup ("a <
// b"), is passed on in bulk from the reader's buffer.
func (p *reqReader) run() error {
	for {
		if _, err := p.br.Peek(1); err != nil {
			if errors.Is(err, io.EOF) {
				return p.end()
			}
			return err
		}
		buf, _ := p.br.Peek(p.br.Buffered())
		i := 0
		for {
			j := bytes.IndexByte(buf[i:], '<')
			if j < 0 {
				i = len(buf)
				break
			}
			i += j
			if i+1 < len(buf) && !mayStartMarkup(buf[i+1]) {
				i++
				continue
			}
			break
		}
		if i > 0 {
			err := p.text(buf[:i])
			p.discard(i)
			if err != nil {
				return err
			}
			continue
		}
		p.discard(1) // the '<'
		if err := p.markup(); err != nil {
			return err
		}
	}
}

// mayStartMarkup reports whether c after '<' may make it markup.
func mayStartMarkup(c byte) bool {
	return c == '!' || c == '?' || c == '/' || isNameStart(c)
}

// end finishes a report cut off by the end of the input; the document then
// lacks its close tag and is refused, as the tree scanner would.
func (p *reqReader) end() error {
	if p.mode != modeRest {
		return p.endReport()
	}
	return nil
}

// markup reads what follows a '<' just consumed.
func (p *reqReader) markup() error {
	head, _ := p.br.Peek(64) // most tags are shorter: peekTag's first look
	if len(head) == 0 {
		return p.raw(lessThan)
	}
	switch c := head[0]; {
	case c == '!' && string(head[:min(3, len(head))]) == "!--":
		return p.through("<!--", "-->", p.raw)
	case c == '!' && string(head[:min(8, len(head))]) == "![CDATA[":
		if p.mode == modeStderr {
			p.discard(8)
			p.stderr.flush(true)
			return p.through("", "]]>", p.stderr.cdata)
		}
		return p.through("<![CDATA[", "]]>", p.raw)
	case c == '?':
		return p.through("<?", "?>", p.raw)
	case c == '!':
		return p.through("<!", ">", p.raw)
	case c == '/':
		tag, name, ok := p.peekTag(closeTagEnd, 1)
		if !ok {
			return p.raw(lessThan)
		}
		err := p.closeTag(tag, name)
		p.discard(len(tag) - 1)
		return err
	case !isNameStart(c):
		return p.raw(lessThan) // "a < b": text
	}
	tag, name, ok := p.peekTag(openTagEnd, 0)
	if !ok {
		return p.raw(lessThan)
	}
	err := p.openTag(tag, name, bytes.HasSuffix(tag, []byte("/>")))
	p.discard(len(tag) - 1)
	return err
}

var lessThan = []byte("<")

// tagEnd reads a tag in src, which starts after its '<': the end of its
// name and of the tag, or short when src ends before the tag could, or not
// ok.
type tagEnd func(src []byte) (nameEnd, end int, short, ok bool)

// peekTag returns the tag the reader is at ('<' consumed), from its '<',
// and its name, which starts at nameStart after the '<'. Both alias the
// reader's buffer until the tag is discarded. A tag longer than
// maxTagBytes or broken is not one.
func (p *reqReader) peekTag(f tagEnd, nameStart int) (tag, name []byte, ok bool) {
	for n := 64; ; n *= 2 {
		b, err := p.br.Peek(n)
		nameEnd, end, short, ok := f(b)
		if ok {
			p.tag = append(append(p.tag[:0], '<'), b[:end]...)
			return p.tag, p.tag[1+nameStart : 1+nameEnd], true
		}
		if !short || err != nil || n >= maxTagBytes {
			return nil, nil, false
		}
	}
}

func (p *reqReader) discard(n int) {
	_, _ = p.br.Discard(n)
}

// openTag handles an open tag (empty: "<x/>").
func (p *reqReader) openTag(tag, name []byte, empty bool) error {
	switch p.mode {
	case modeRest:
		if string(name) == "result" && len(p.stack) > 0 && p.stack[len(p.stack)-1] == "scheduler_request" {
			if empty {
				return nil // a report of nothing
			}
			if len(p.results) >= p.lim.MaxReports || p.kept >= p.lim.MaxReportBytes {
				p.left++
				p.mode = modeSkip
				return nil
			}
			p.mode, p.hasErr = modeReport, false
			p.chunk = append(p.chunk[:0], "<result>"...)
			p.stderr.reset()
			return nil
		}
		if !empty {
			p.stack = append(p.stack, string(name))
		}
		return p.toRest(tag)
	case modeReport:
		if string(name) == "stderr_out" && !empty && !p.hasErr {
			p.mode, p.hasErr = modeStderr, true
			return nil
		}
		p.toChunk(tag)
	case modeStderr:
		p.stderr.text(tag)
	}
	return nil
}

// closeTag handles a close tag.
func (p *reqReader) closeTag(tag, name []byte) error {
	switch p.mode {
	case modeRest:
		for k := len(p.stack) - 1; k >= 0; k-- {
			if p.stack[k] == string(name) {
				p.stack = p.stack[:k]
				break
			}
		}
		return p.toRest(tag)
	case modeStderr:
		switch string(name) {
		case "stderr_out":
			p.mode = modeReport
			return nil
		case "result", "scheduler_request":
		default:
			p.stderr.text(tag)
			return nil
		}
	case modeReport:
		if !endsReport(name) {
			p.toChunk(tag)
			return nil
		}
	case modeSkip:
		if !endsReport(name) {
			return nil
		}
	}
	// The report ends; a close of the request also closes the request.
	if err := p.endReport(); err != nil {
		return err
	}
	if string(name) == "scheduler_request" {
		return p.closeTag(tag, name)
	}
	return nil
}

// endsReport reports whether a close tag named name ends a report: its own,
// or the request's.
func endsReport(name []byte) bool {
	return string(name) == "result" || string(name) == "scheduler_request"
}

// endReport decodes the report being read and keeps it.
func (p *reqReader) endReport() error {
	mode := p.mode
	p.mode = modeRest
	if mode == modeSkip {
		return nil
	}
	p.chunk = append(p.chunk, "</result>"...)
	doc, err := scan(string(p.chunk), p.lim)
	if err != nil {
		return err
	}
	var rr ReportResult
	decodeInto(doc.children[0], reflect.ValueOf(&rr).Elem())
	if p.hasErr {
		rr.StderrOut = p.stderr.result()
	}
	p.results = append(p.results, rr)
	p.kept += int64(len(p.chunk) + len(rr.StderrOut))
	return nil
}

// text handles character data.
func (p *reqReader) text(b []byte) error {
	if p.mode == modeStderr {
		p.stderr.text(b)
		return nil
	}
	return p.raw(b)
}

// raw handles markup passed on as it is.
func (p *reqReader) raw(b []byte) error {
	switch p.mode {
	case modeRest:
		return p.toRest(b)
	case modeReport:
		p.toChunk(b)
	case modeStderr:
		p.stderr.text(b)
	}
	return nil
}

func (p *reqReader) toRest(b []byte) error {
	if len(p.rest)+len(b) > maxRestBytes {
		return fmt.Errorf("%w: more than %d bytes besides the reports", ErrTooLarge, maxRestBytes)
	}
	p.rest = append(p.rest, b...)
	return nil
}

// toChunk adds to the report being kept; past maxReportBytes the report is
// cut (its close tag is added when it ends).
func (p *reqReader) toChunk(b []byte) {
	if room := maxReportBytes - len(p.chunk); room > 0 {
		p.chunk = append(p.chunk, b[:min(len(b), room)]...)
	}
}

// through passes open, then everything up to and including term, to sink
// (term itself only when open is not empty: the markup is passed whole).
// The reader is just past open's '<' and the rest of open is unread.
func (p *reqReader) through(open, term string, sink func([]byte) error) error {
	if open != "" {
		p.discard(len(open) - 1)
		if err := sink([]byte(open)); err != nil {
			return err
		}
	}
	last := term[0]
	for {
		data, err := p.br.ReadSlice(last)
		switch {
		case err == nil:
			if e := sink(data[:len(data)-1]); e != nil {
				return e
			}
		case errors.Is(err, bufio.ErrBufferFull):
			if e := sink(data); e != nil {
				return e
			}
			continue
		case errors.Is(err, io.EOF):
			return sink(data)
		default:
			return err
		}
		rest, _ := p.br.Peek(len(term) - 1)
		if string(rest) == term[1:] {
			p.discard(len(rest))
			if open != "" {
				return sink([]byte(term))
			}
			return nil
		}
		if err := sink([]byte{last}); err != nil {
			return err
		}
	}
}

// stderrTail keeps the last max bytes of a stderr_out's text as it
// streams: CDATA sections as they are, the rest with character references
// decoded, as decodeText reads it. The tail is what BOINC keeps too: the
// end of an app's stderr says how it ended.
type stderrTail struct {
	max     int
	pending []byte // text outside CDATA not yet decoded
	out     []byte
}

func (t *stderrTail) reset() {
	t.pending, t.out = t.pending[:0], t.out[:0]
}

func (t *stderrTail) text(b []byte) {
	t.pending = append(t.pending, b...)
	if len(t.pending) > 2*t.max {
		t.flush(false)
	}
}

func (t *stderrTail) cdata(b []byte) error {
	t.add(b)
	return nil
}

// flush decodes the pending text; unless final, a reference that may be
// cut in two (an '&' among the last 12 bytes) waits for the rest.
func (t *stderrTail) flush(final bool) {
	cut := len(t.pending)
	if !final {
		if i := bytes.LastIndexByte(t.pending[max(0, cut-12):], '&'); i >= 0 {
			cut = max(0, cut-12) + i
		}
	}
	t.add([]byte(unescape(string(t.pending[:cut]))))
	t.pending = append(t.pending[:0], t.pending[cut:]...)
}

func (t *stderrTail) add(b []byte) {
	if len(b) > t.max {
		b = b[len(b)-t.max:]
	}
	if len(t.out)+len(b) > 2*t.max {
		keep := t.max - len(b)
		n := copy(t.out, t.out[len(t.out)-keep:])
		t.out = t.out[:n]
	}
	t.out = append(t.out, b...)
}

// result is the stderr text, trimmed, at most max bytes: the tail, from a
// rune boundary.
func (t *stderrTail) result() string {
	t.flush(true)
	s := strings.TrimSpace(string(t.out))
	if len(s) <= t.max {
		return s
	}
	s = s[len(s)-t.max:]
	for i := 0; i < utf8.UTFMax && len(s) > 0 && !utf8.RuneStart(s[0]); i++ {
		s = s[1:]
	}
	return s
}

// openTagEnd reads `name attr="v" ...>` or ".../>" by openTag's rules.
func openTagEnd(src []byte) (nameEnd, end int, short, ok bool) {
	j := 0
	if j >= len(src) {
		return 0, 0, true, false
	}
	if !isNameStart(src[j]) {
		return 0, 0, false, false
	}
	for j < len(src) && isNameByte(src[j]) {
		j++
	}
	nameEnd = j
	for {
		k := j
		for j < len(src) && isSpace(src[j]) {
			j++
		}
		if j >= len(src) {
			return 0, 0, true, false
		}
		switch {
		case src[j] == '>':
			return nameEnd, j + 1, false, true
		case src[j] == '/' && j+1 >= len(src):
			return 0, 0, true, false
		case src[j] == '/' && src[j+1] == '>':
			return nameEnd, j + 2, false, true
		case j == k || !isNameStart(src[j]):
			return 0, 0, false, false
		}
		for j < len(src) && isNameByte(src[j]) {
			j++
		}
		for j < len(src) && isSpace(src[j]) {
			j++
		}
		if j >= len(src) {
			return 0, 0, true, false
		}
		if src[j] != '=' {
			continue
		}
		j++
		for j < len(src) && isSpace(src[j]) {
			j++
		}
		if j >= len(src) {
			return 0, 0, true, false
		}
		if q := src[j]; q == '"' || q == '\'' {
			e := bytes.IndexByte(src[j+1:], q)
			if e < 0 {
				return 0, 0, true, false
			}
			j += e + 2
			continue
		}
		v := j
		for j < len(src) && !isSpace(src[j]) && src[j] != '>' && src[j] != '<' {
			j++
		}
		if j >= len(src) {
			return 0, 0, true, false
		}
		if j == v {
			return 0, 0, false, false
		}
		if src[j-1] == '/' && src[j] == '>' {
			j--
		}
	}
}

// closeTagEnd reads "/name>" by closeTag's rules.
func closeTagEnd(src []byte) (nameEnd, end int, short, ok bool) {
	j := 1
	for j < len(src) && isNameByte(src[j]) {
		j++
	}
	if j >= len(src) {
		return 0, 0, true, false
	}
	if j == 1 {
		return 0, 0, false, false
	}
	nameEnd = j
	for j < len(src) && isSpace(src[j]) {
		j++
	}
	if j >= len(src) {
		return 0, 0, true, false
	}
	if src[j] != '>' {
		return 0, 0, false, false
	}
	return nameEnd, j + 1, false, true
}
