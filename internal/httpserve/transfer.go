package httpserve

import (
	"errors"
	"io"
	"net/http"
	"os"
	"time"
)

// guard holds every request to the minimum transfer rate: it sets the
// connection's read deadline while the handler reads the body and its
// write deadline while the handler writes, and moves each forward as
// bytes flow (http.ResponseController).
type guard struct {
	next    http.Handler
	rate    MinRate
	metrics *Metrics
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	now := time.Now()
	gw := &guardedWriter{ResponseWriter: w, m: meter{rate: g.rate, set: rc.SetWriteDeadline}, metrics: g.metrics}
	// Until the handler writes, the response deadline bounds the whole
	// request; the first write starts it afresh, so a slow handler does not
	// eat into the client's window.
	gw.m.start(now)
	if r.Body != nil && r.Body != http.NoBody {
		gb := &guardedBody{ReadCloser: r.Body, m: meter{rate: g.rate, set: rc.SetReadDeadline}, metrics: g.metrics}
		gb.m.start(now)
		r.Body = gb
	}
	g.next.ServeHTTP(gw, r)
}

// meter is one direction's deadline: quota bytes must move before it.
type meter struct {
	rate MinRate
	set  func(time.Time) error
	n    int64 // bytes moved since the deadline was last set
	cut  bool  // the deadline passed
}

// start sets the deadline one window from now.
func (m *meter) start(now time.Time) {
	m.n = 0
	// An error means the writer cannot set deadlines (not a server's
	// connection): there is nothing to guard.
	_ = m.set(now.Add(m.rate.Window))
}

// moved records n bytes; a full quota moves the deadline on.
func (m *meter) moved(n int64) {
	m.n += n
	if m.n >= m.rate.quota() {
		m.start(time.Now())
	}
}

// timedOut reports whether err is the deadline passing, the first time.
func (m *meter) timedOut(err error) bool {
	if err == nil || m.cut || !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	m.cut = true
	return true
}

// guardedBody is a request body read under the minimum rate.
type guardedBody struct {
	io.ReadCloser
	m       meter
	metrics *Metrics
	done    bool
}

func (b *guardedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.m.moved(int64(n))
	if errors.Is(err, io.EOF) && !b.done {
		// The body is in. Net/http now watches the connection for the
		// client going away while the handler works; a deadline left set
		// would end that watch and cancel the request's context.
		b.done = true
		_ = b.m.set(time.Time{})
	}
	if b.m.timedOut(err) {
		b.metrics.cut(directionRequest)
	}
	return n, err
}

// guardedWriter is a response written under the minimum rate.
type guardedWriter struct {
	http.ResponseWriter
	m       meter
	metrics *Metrics
	started bool
}

// begin restarts the window at the handler's first output.
func (w *guardedWriter) begin() {
	if !w.started {
		w.started = true
		w.m.start(time.Now())
	}
}

func (w *guardedWriter) WriteHeader(code int) {
	w.begin()
	w.ResponseWriter.WriteHeader(code)
}

func (w *guardedWriter) Write(p []byte) (int, error) {
	w.begin()
	n, err := w.ResponseWriter.Write(p)
	w.moved(int64(n), err)
	return n, err
}

// ReadFrom sends src a quota at a time through the real writer's
// ReadFrom, so that a download still goes out with sendfile.
func (w *guardedWriter) ReadFrom(src io.Reader) (int64, error) {
	w.begin()
	rf, ok := w.ResponseWriter.(io.ReaderFrom)
	if !ok {
		n, err := io.Copy(writerOnly{w}, src)
		return n, err
	}
	// Keep a single *io.LimitedReader around the file: sendfile looks
	// through one, not two.
	outer, limited := src.(*io.LimitedReader)
	inner := src
	if limited {
		inner = outer.R
	}
	var total int64
	for {
		chunk := w.m.rate.quota()
		if limited {
			chunk = min(chunk, outer.N)
		}
		if chunk <= 0 {
			return total, nil
		}
		n, err := rf.ReadFrom(&io.LimitedReader{R: inner, N: chunk})
		total += n
		if limited {
			outer.N -= n
		}
		w.moved(n, err)
		if err != nil || n < chunk {
			return total, err
		}
	}
}

func (w *guardedWriter) moved(n int64, err error) {
	w.m.moved(n)
	if w.m.timedOut(err) {
		w.metrics.cut(directionResponse)
	}
}

// Unwrap lets http.ResponseController reach the real writer.
func (w *guardedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writerOnly hides ReadFrom so io.Copy does not call it again.
type writerOnly struct{ io.Writer }
