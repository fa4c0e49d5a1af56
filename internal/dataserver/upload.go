package dataserver

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/protocol"
)

// errBusy: another request holds the file's lock.
var errBusy = errors.New("file is being written by another request")

// serveUpload answers BOINC's upload handler protocol. The reply is always
// HTTP 200 with a <data_server_reply>; the status inside tells the client
// whether to stop (0 done, -1 give up) or retry later (1).
func (h *Handler) serveUpload(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		h.metrics.uploads.WithLabelValues(upBadMethod).Inc()
		return
	}
	br := bufio.NewReaderSize(r.Body, 32<<10)
	rep, outcome := h.upload1(br)
	h.metrics.uploads.WithLabelValues(outcome).Inc()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	// A write error means the client is gone; it will ask again.
	_ = protocol.WriteUploadReply(w, rep)
}

func permanent(msg string) protocol.UploadReply {
	return protocol.UploadReply{Status: protocol.UploadPermanent, Message: msg}
}

func transient(msg string) protocol.UploadReply {
	return protocol.UploadReply{Status: protocol.UploadTransient, Message: msg}
}

var ok = protocol.UploadReply{Status: protocol.UploadOK}

// upload1 handles one request and returns the reply and the metric outcome.
func (h *Handler) upload1(br *bufio.Reader) (protocol.UploadReply, string) {
	req, err := protocol.ReadUploadRequest(br, h.opts.MaxHeaderBytes)
	if err != nil {
		if errors.Is(err, protocol.ErrTooLarge) || errors.Is(err, protocol.ErrTooDeep) || errors.Is(err, protocol.ErrMalformed) {
			h.log.Info("upload: bad request", "error", err)
			return permanent("bad request: " + err.Error()), upBadRequest
		}
		// The body could not be read: the client went away.
		return transient("cannot read request"), upIncomplete
	}
	if err := fanout.ValidName(req.Name); err != nil {
		h.log.Info("upload: bad file name", "error", err)
		return permanent("bad file name"), upBadName
	}
	if req.GetFileSize {
		return h.fileSize(req.Name)
	}
	if msg := h.checkCertificate(req); msg != "" {
		h.log.Info("upload: certificate refused", "file", req.Name, "reason", msg)
		return permanent(msg), upBadCert
	}
	if req.HasMaxNbytes && req.Nbytes > req.MaxNbytes {
		return permanent(fmt.Sprintf("file size (%d KB) exceeds limit (%d KB)", req.Nbytes/1024, req.MaxNbytes/1024)), upTooLarge
	}
	if h.opts.MaxFileBytes > 0 && req.Nbytes > h.opts.MaxFileBytes {
		return permanent(fmt.Sprintf("file size (%d KB) exceeds server limit (%d KB)", req.Nbytes/1024, h.opts.MaxFileBytes/1024)), upTooLarge
	}
	if req.Offset > req.Nbytes {
		return permanent(fmt.Sprintf("offset %d beyond file size %d", req.Offset, req.Nbytes)), upBadRequest
	}
	return h.store(req, br)
}

// checkCertificate returns why req's upload certificate is refused, or "".
func (h *Handler) checkCertificate(req *protocol.UploadRequest) string {
	if h.certs.Empty() {
		return ""
	}
	switch {
	case req.XMLSignature == "":
		return "missing signature"
	case !req.HasMaxNbytes:
		return "missing max_nbytes"
	}
	cert := keys.UploadCertificate(req.Name, float64(req.MaxNbytes))
	if err := h.certs.Verify([]byte(cert), req.XMLSignature); err != nil {
		return "invalid signature"
	}
	return ""
}

// fileSize answers a size query: the bytes stored so far, 0 if none.
func (h *Handler) fileSize(name string) (protocol.UploadReply, string) {
	rel, err := fanout.Rel(name, h.opts.Fanout)
	if err != nil {
		return permanent("bad file name"), upBadName
	}
	st, err := h.upload.Stat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return protocol.UploadReply{Status: protocol.UploadOK, HasFileSize: true}, upSizeQuery
	case err != nil:
		h.log.Warn("upload: stat failed", "file", rel, "error", err)
		return transient("server error"), upServerError
	case !st.Mode().IsRegular():
		return permanent("not a regular file"), upBadName
	}
	return protocol.UploadReply{Status: protocol.UploadOK, FileSize: st.Size(), HasFileSize: true}, upSizeQuery
}

// store writes the bytes that follow the header at req.Offset. It reads at
// most Nbytes-Offset of them and never makes the file longer than Nbytes.
// Bytes written stay even when the body ends early: the client then asks
// for the size and sends the rest.
func (h *Handler) store(req *protocol.UploadRequest, body io.Reader) (protocol.UploadReply, string) {
	rel, err := fanout.Rel(req.Name, h.opts.Fanout)
	if err != nil {
		return permanent("bad file name"), upBadName
	}
	if err := h.upload.MkdirAll(fanout.Dir(req.Name, h.opts.Fanout), 0o755); err != nil {
		h.log.Warn("upload: cannot make directory", "file", rel, "error", err)
		return transient("server error"), upServerError
	}
	f, err := h.openForUpload(rel)
	if err != nil {
		h.log.Warn("upload: cannot open file", "file", rel, "error", err)
		return transient("server error"), upServerError
	}
	defer f.Close()
	if err := lockFile(f); err != nil {
		if errors.Is(err, errBusy) {
			return transient("file is being uploaded by another request"), upBusy
		}
		h.log.Warn("upload: cannot lock file", "file", rel, "error", err)
		return transient("server error"), upServerError
	}
	st, err := f.Stat()
	if err != nil {
		h.log.Warn("upload: stat failed", "file", rel, "error", err)
		return transient("server error"), upServerError
	}
	if !st.Mode().IsRegular() {
		return permanent("not a regular file"), upBadName
	}
	size := st.Size()
	if completed(st.Mode()) {
		if req.Nbytes <= size {
			// A retry after a reply that was lost: the file is already here.
			return ok, upComplete
		}
		// A finished output may already be validated and hard-linked into
		// the assimilated results: its bytes must never change again.
		h.log.Info("upload: rewrite of a completed file refused", "file", rel, "size", size, "nbytes", req.Nbytes, "offset", req.Offset)
		return permanent(fmt.Sprintf("file already uploaded (%d bytes); it cannot be changed", size)), upRewrite
	}
	if size >= req.Nbytes {
		// Complete but not marked (the server stopped between the last
		// write and the mark): mark it now.
		if err := markCompleted(f); err != nil {
			h.log.Warn("upload: cannot mark file complete", "file", rel, "error", err)
			return transient("server error"), upServerError
		}
		return ok, upComplete
	}
	if size < req.Offset {
		// The client's idea of what is stored is wrong (a file deleted in
		// between?); a retry starts with a size query.
		return transient(fmt.Sprintf("offset %d beyond the %d bytes stored", req.Offset, size)), upBadRequest
	}
	if _, err := f.Seek(req.Offset, io.SeekStart); err != nil {
		h.log.Warn("upload: seek failed", "file", rel, "error", err)
		return transient("server error"), upServerError
	}
	want := req.Nbytes - req.Offset
	n, readErr, writeErr := copyN(f, body, want)
	h.metrics.uploadBytes.Add(float64(n))
	if writeErr != nil {
		// Disk full or an I/O error: the client keeps its copy and retries.
		h.log.Error("upload: write failed", "file", rel, "offset", req.Offset, "written", n, "error", writeErr)
		return transient("server error"), upServerError
	}
	if n < want {
		h.log.Debug("upload: body ended early", "file", rel, "got", n, "want", want, "error", readErr)
		return transient(fmt.Sprintf("got %d of %d bytes", n, want)), upIncomplete
	}
	// The client deletes its copy once told the upload is done, so the bytes
	// must be on disk first.
	if err := f.Sync(); err != nil {
		h.log.Error("upload: sync failed", "file", rel, "error", err)
		return transient("server error"), upServerError
	}
	if err := markCompleted(f); err != nil {
		h.log.Error("upload: cannot mark file complete", "file", rel, "error", err)
		return transient("server error"), upServerError
	}
	return ok, upOK
}

// Modes of an upload being written and of one completed. Completion is
// recorded in the file's mode, not in a side file or an extended
// attribute: the mode goes with the inode into every hard link (the
// assimilated results), is set and read with the file open and locked so
// it cannot race with a writer, works on every file system, and also stops
// other programs running as non-root users from writing to the file.
const (
	partialMode  fs.FileMode = 0o644
	finishedMode fs.FileMode = 0o444
)

// completed reports whether an upload's file was marked complete: a file
// that reached the nbytes of a request the server answered with success.
// The test is the owner's write bit, so a file an administrator made
// read-only counts as finished too.
func completed(m fs.FileMode) bool {
	return m.IsRegular() && m.Perm()&0o200 == 0
}

// markCompleted records that f is complete; the change of mode is made
// durable with the file's data (f was synced) by the next sync of its
// inode, and a crash before that leaves a complete, unmarked file, which
// the next request for it marks.
func markCompleted(f *os.File) error {
	return f.Chmod(finishedMode)
}

// openForUpload opens the file at rel for writing, creating it. A completed
// file is opened read-only instead (opening it for writing fails for
// non-root users, and it is never written): store then sees its mode and
// refuses or acknowledges without writing.
func (h *Handler) openForUpload(rel string) (*os.File, error) {
	if st, err := h.upload.Lstat(rel); err == nil && completed(st.Mode()) {
		return h.upload.Open(rel)
	}
	return h.upload.OpenFile(rel, os.O_WRONLY|os.O_CREATE, partialMode)
}

// copyN copies up to n bytes from r to w and says which side failed.
func copyN(w io.Writer, r io.Reader, n int64) (written int64, readErr, writeErr error) {
	buf := make([]byte, 32<<10)
	for written < n {
		m, err := r.Read(buf[:min(int64(len(buf)), n-written)])
		if m > 0 {
			k, werr := w.Write(buf[:m])
			written += int64(k)
			if werr == nil && k < m {
				werr = io.ErrShortWrite
			}
			if werr != nil {
				return written, nil, werr
			}
		}
		if err != nil {
			if err == io.EOF {
				return written, nil, nil
			}
			return written, err, nil
		}
	}
	return written, nil, nil
}
