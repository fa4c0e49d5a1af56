package dataserver

import (
	"errors"
	"io"
	"io/fs"
	"net/http"
	"strings"

	"github.com/taskserver/taskserver/internal/fanout"
)

// serveDownload sends /download/<dir>/<name> from the download directory.
// Range requests matter: a client resuming a download appends whatever
// arrives to its partial file, so a 200 with the whole file would corrupt
// it (PROTOCOL.md §6); http.ServeContent answers them with 206.
func (h *Handler) serveDownload(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		h.metrics.downloads.WithLabelValues(dlBadMethod).Inc()
		return
	}
	rel, ok := h.downloadPath(strings.TrimPrefix(r.URL.Path, DownloadPrefix))
	if !ok {
		http.NotFound(w, r)
		h.metrics.downloads.WithLabelValues(dlBadPath).Inc()
		return
	}
	f, err := h.download.Open(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			http.NotFound(w, r)
			h.metrics.downloads.WithLabelValues(dlNotFound).Inc()
			return
		}
		// A symbolic link leading out of the directory lands here too.
		h.log.Warn("download: open failed", "file", rel, "error", err)
		http.Error(w, "cannot open file", http.StatusInternalServerError)
		h.metrics.downloads.WithLabelValues(dlError).Inc()
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		http.NotFound(w, r)
		h.metrics.downloads.WithLabelValues(dlNotFound).Inc()
		return
	}
	// An explicit type stops ServeContent from sniffing: these are data.
	// A gzip'd copy is sent as it is stored, without Content-Encoding: the
	// client saves NAME.gz whole and gunzips it itself (it turns off
	// curl's decoding for such downloads, client/http_curl.cpp).
	w.Header().Set("Content-Type", "application/octet-stream")
	cw := &countingWriter{ResponseWriter: w, status: http.StatusOK}
	http.ServeContent(cw, r, st.Name(), st.ModTime(), f)
	switch cw.status {
	case http.StatusOK, http.StatusPartialContent, http.StatusNotModified:
		h.metrics.downloads.WithLabelValues(dlOK).Inc()
		h.metrics.downloadBytes.Add(float64(cw.n))
	case http.StatusRequestedRangeNotSatisfiable:
		h.metrics.downloads.WithLabelValues(dlBadRange).Inc()
	default:
		h.metrics.downloads.WithLabelValues(dlOtherState).Inc()
	}
}

// downloadPath checks that p is exactly "<dir>/<name>", with a valid name
// and dir the fan-out directory of name, and returns it; nothing else in
// the download directory is served. The gzip'd copy of a file, NAME.gz, is
// kept in NAME's directory and served from there, at the URL the
// scheduler gives as the file's <gzipped_url> (NAME's URL with ".gz").
func (h *Handler) downloadPath(p string) (string, bool) {
	dir, name, ok := strings.Cut(p, "/")
	if !ok || fanout.ValidName(name) != nil {
		return "", false
	}
	if dir == fanout.Dir(name, h.opts.Fanout) {
		return dir + "/" + name, true
	}
	if orig, gz := strings.CutSuffix(name, gzSuffix); gz && orig != "" && dir == fanout.Dir(orig, h.opts.Fanout) {
		return dir + "/" + name, true
	}
	return "", false
}

// gzSuffix ends the name of a file's gzip'd copy.
const gzSuffix = ".gz"

// countingWriter records the status and counts the body bytes of a
// response. It passes ReadFrom through so that sendfile still works.
type countingWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (c *countingWriter) WriteHeader(code int) {
	c.status = code
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.ResponseWriter.(io.ReaderFrom); ok {
		n, err := rf.ReadFrom(r)
		c.n += n
		return n, err
	}
	n, err := io.Copy(struct{ io.Writer }{c.ResponseWriter}, r)
	c.n += n
	return n, err
}

// Unwrap lets http.ResponseController reach the real writer.
func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
