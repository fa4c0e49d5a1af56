package dataserver

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/protocol"
)

// Messages of upload replies. The client shows <message> in the
// volunteer's event log ("Error reported by file upload server: ..."), so
// each is a short sentence a volunteer can act on (or can see needs
// nothing from them); why a request was refused goes to the server log.
const (
	msgBadRequest  = "The upload request could not be read. Please update BOINC if this keeps happening."
	msgBadName     = "The file name is not valid on this project; the task will be reported as failed."
	msgNotAllowed  = "This upload is not authorised by the project; the task will be reported as failed."
	msgExpired     = "The deadline for uploading this file has passed; the task will be reported as failed."
	msgClosed      = "This file was already uploaded or closed and can no longer be changed."
	msgServerError = "The project's server has a problem; the upload will be retried later."
	msgBusy        = "This file is being uploaded by another connection; the upload will be retried later."
	msgIncomplete  = "The upload was interrupted; it will be retried later."
	msgResume      = "The upload will resume from the part the server already has."
)

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
			return permanent(msgBadRequest), upBadRequest
		}
		// The body could not be read: the client went away.
		return transient(msgIncomplete), upIncomplete
	}
	if err := fanout.ValidName(req.Name); err != nil {
		h.log.Info("upload: bad file name", "error", err)
		return permanent(msgBadName), upBadName
	}
	if req.GetFileSize {
		return h.fileSize(req.Name)
	}
	permitted, rep, outcome := h.checkPermit(req)
	if outcome != "" {
		return rep, outcome
	}
	if !permitted {
		if msg, why := h.checkCertificate(req); msg != "" {
			h.log.Info("upload: certificate refused", "file", req.Name, "reason", why)
			return permanent(msg), upBadCert
		}
	}
	if req.HasMaxNbytes && req.Nbytes > req.MaxNbytes {
		return permanent(fmt.Sprintf("file size (%d KB) exceeds limit (%d KB)", req.Nbytes/1024, req.MaxNbytes/1024)), upTooLarge
	}
	if h.opts.MaxFileBytes > 0 && req.Nbytes > h.opts.MaxFileBytes {
		return permanent(fmt.Sprintf("file size (%d KB) exceeds server limit (%d KB)", req.Nbytes/1024, h.opts.MaxFileBytes/1024)), upTooLarge
	}
	if req.Offset > req.Nbytes {
		h.log.Info("upload: offset beyond the file's size", "file", req.Name, "offset", req.Offset, "nbytes", req.Nbytes)
		return permanent(msgBadRequest), upBadRequest
	}
	return h.store(req, br)
}

// checkPermit lets an upload without a certificate through under an import
// permit (outputfile.Permit): only when the data server checks
// certificates at all, the request carries none, and a permit names the
// file. The permit's size limit then replaces a larger one the request
// claims, and its expiry refuses the upload once past. A non-empty outcome
// means the request is answered with rep now.
func (h *Handler) checkPermit(req *protocol.UploadRequest) (permitted bool, rep protocol.UploadReply, outcome string) {
	if h.certs.Empty() || strings.TrimSpace(req.XMLSignature) != "" {
		return false, rep, ""
	}
	p, found, err := outputfile.FindPermit(h.upload, h.opts.Fanout, req.Name)
	switch {
	case err != nil:
		h.log.Warn("upload: cannot read the upload permits", "file", req.Name, "error", err)
		return false, transient(msgServerError), upServerError
	case !found:
		return false, rep, "" // checkCertificate refuses it: no certificate
	case time.Now().Unix() > p.Expires:
		h.log.Info("upload: permit expired", "file", req.Name, "expired", p.Expires)
		return false, permanent(msgExpired), upBadCert
	}
	if !req.HasMaxNbytes || req.MaxNbytes > p.MaxNbytes {
		req.MaxNbytes, req.HasMaxNbytes = p.MaxNbytes, true
	}
	h.metrics.permitted.Inc()
	return true, rep, ""
}

// checkCertificate returns the reply message and the logged reason when
// req's upload certificate is refused, or "".
func (h *Handler) checkCertificate(req *protocol.UploadRequest) (msg, why string) {
	if h.certs.Empty() {
		return "", ""
	}
	switch {
	case req.XMLSignature == "":
		return msgNotAllowed, "missing signature"
	case !req.HasMaxNbytes:
		return msgNotAllowed, "missing max_nbytes"
	}
	// The expiry is what refuses a certificate whose result is over once
	// the file deleter removed the file (see keys.UploadCertificate).
	expires, err := keys.UploadExpiry(req.XMLSignature)
	if errors.Is(err, keys.ErrNoExpiry) {
		// Signed before certificates expired: an instance sent before the
		// upgrade, which must still upload (keys.LegacyUploadCertificate).
		if err := h.certs.Verify([]byte(keys.LegacyUploadCertificate(req.Name, float64(req.MaxNbytes))), req.XMLSignature); err != nil {
			return msgNotAllowed, "invalid signature"
		}
		return "", ""
	}
	if err != nil {
		return msgNotAllowed, err.Error()
	}
	cert := keys.UploadCertificate(req.Name, float64(req.MaxNbytes), expires)
	if err := h.certs.Verify([]byte(cert), req.XMLSignature); err != nil {
		return msgNotAllowed, "invalid signature"
	}
	if time.Now().Unix() > expires {
		return msgExpired, fmt.Sprintf("certificate expired at %d", expires)
	}
	return "", ""
}

// fileSize answers a size query: the bytes stored so far, 0 if none.
func (h *Handler) fileSize(name string) (protocol.UploadReply, string) {
	rel, err := fanout.Rel(name, h.opts.Fanout)
	if err != nil {
		return permanent(msgBadName), upBadName
	}
	st, err := h.upload.Stat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return protocol.UploadReply{Status: protocol.UploadOK, HasFileSize: true}, upSizeQuery
	case err != nil:
		h.log.Warn("upload: stat failed", "file", rel, "error", err)
		return transient(msgServerError), upServerError
	case !st.Mode().IsRegular():
		h.log.Warn("upload: not a regular file", "file", rel)
		return permanent(msgBadName), upBadName
	}
	return protocol.UploadReply{Status: protocol.UploadOK, FileSize: st.Size(), HasFileSize: true}, upSizeQuery
}

// resumeThreshold is the real client's FILE_SIZE_CHECK_THRESHOLD
// (client/file_xfer.h): it asks for the stored size before it resumes an
// upload only for files of at least this many bytes, and sends smaller
// ones from offset 0 every time.
const resumeThreshold = 8192

// store appends the bytes that follow the header to the file, and marks it
// finished when it reaches Nbytes. A write is accepted only as an append
// at the stored size: nothing is ever overwritten, and another offset gets
// a transient reply with the stored size, after which the client asks
// for the size and resumes (pers_file_xfer.cpp sets upload_offset to -1
// after a failed transfer). A file that is no longer Writable (finished,
// or closed because its result is over) takes no bytes at all.
//
// Bytes written stay when the body ends early, for the client to resume,
// except for a file under resumeThreshold: that client will send it from
// offset 0 again, which is an append only if those bytes are gone.
func (h *Handler) store(req *protocol.UploadRequest, body io.Reader) (protocol.UploadReply, string) {
	rel, err := fanout.Rel(req.Name, h.opts.Fanout)
	if err != nil {
		return permanent(msgBadName), upBadName
	}
	if err := h.upload.MkdirAll(fanout.Dir(req.Name, h.opts.Fanout), 0o755); err != nil {
		h.log.Warn("upload: cannot make directory", "file", rel, "error", err)
		return transient(msgServerError), upServerError
	}
	f, err := h.openForUpload(rel)
	if err != nil {
		h.log.Warn("upload: cannot open file", "file", rel, "error", err)
		return transient(msgServerError), upServerError
	}
	defer f.Close()
	if err := outputfile.Lock(f); err != nil {
		if errors.Is(err, outputfile.ErrBusy) {
			return transient(msgBusy), upBusy
		}
		h.log.Warn("upload: cannot lock file", "file", rel, "error", err)
		return transient(msgServerError), upServerError
	}
	st, err := f.Stat()
	if err != nil {
		h.log.Warn("upload: stat failed", "file", rel, "error", err)
		return transient(msgServerError), upServerError
	}
	if !st.Mode().IsRegular() {
		h.log.Warn("upload: not a regular file", "file", rel)
		return permanent(msgBadName), upBadName
	}
	size := st.Size()
	if !outputfile.Writable(st.Mode()) {
		if outputfile.Finished(st.Mode()) && req.Nbytes <= size {
			// A retry after a reply that was lost: the file is already here.
			return ok, upComplete
		}
		// Finished outputs may already be validated and hard-linked into
		// the assimilated results, closed ones belong to a result that is
		// over: their bytes never change again.
		h.log.Info("upload: write to a finished or closed file refused", "file", rel, "mode", st.Mode().Perm().String(),
			"size", size, "nbytes", req.Nbytes, "offset", req.Offset)
		return permanent(msgClosed), upRewrite
	}
	switch {
	case size == req.Nbytes:
		// Complete but not marked (the server stopped between the last
		// write and the mark): mark it now, its bytes synced first.
		if err := finish(f); err != nil {
			h.log.Warn("upload: cannot mark file finished", "file", rel, "error", err)
			return transient(msgServerError), upServerError
		}
		return ok, upComplete
	case size > req.Nbytes:
		// Only a client that changed its mind about the file's size gets
		// here; the bytes stored are not its file.
		h.log.Info("upload: more bytes stored than the upload declares", "file", rel, "size", size, "nbytes", req.Nbytes)
		return permanent(msgClosed), upRewrite
	case req.Offset != size:
		h.log.Info("upload: not an append; the client is told the stored size", "file", rel, "size", size,
			"offset", req.Offset)
		return protocol.UploadReply{Status: protocol.UploadTransient, Message: msgResume, FileSize: size,
			HasFileSize: true}, upNotAppend
	}
	if _, err := f.Seek(size, io.SeekStart); err != nil {
		h.log.Warn("upload: seek failed", "file", rel, "error", err)
		return transient(msgServerError), upServerError
	}
	want := req.Nbytes - size
	n, readErr, writeErr := copyN(f, body, want)
	h.metrics.uploadBytes.Add(float64(n))
	if writeErr != nil || n < want {
		if req.Nbytes < resumeThreshold && n > 0 {
			if err := f.Truncate(size); err != nil {
				h.log.Error("upload: cannot drop the bytes of an interrupted small upload", "file", rel, "error", err)
			}
		}
	}
	if writeErr != nil {
		// Disk full or an I/O error: the client keeps its copy and retries.
		h.log.Error("upload: write failed", "file", rel, "offset", size, "written", n, "error", writeErr)
		return transient(msgServerError), upServerError
	}
	if n < want {
		h.log.Debug("upload: body ended early", "file", rel, "got", n, "want", want, "error", readErr)
		return transient(msgIncomplete), upIncomplete
	}
	// The client deletes its copy once told the upload is done, so the bytes
	// must be on disk first.
	if err := finish(f); err != nil {
		h.log.Error("upload: cannot mark file finished", "file", rel, "error", err)
		return transient(msgServerError), upServerError
	}
	return ok, upOK
}

// finish marks f finished once its bytes are durable, and makes the mark
// durable before the client is told: the client then deletes its copy and
// reports, and an output left unmarked by a crash would never count.
func finish(f *os.File) error {
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Chmod(outputfile.FinishedMode); err != nil {
		return err
	}
	return f.Sync()
}

// openForUpload opens the file at rel for writing, creating it. A file
// that is not Writable is opened read-only instead (opening it for
// writing fails for non-root users, and it is never written): store then
// sees its mode and refuses or acknowledges without writing.
func (h *Handler) openForUpload(rel string) (*os.File, error) {
	if st, err := h.upload.Lstat(rel); err == nil && st.Mode().IsRegular() && !outputfile.Writable(st.Mode()) {
		return h.upload.Open(rel)
	}
	return h.upload.OpenFile(rel, os.O_WRONLY|os.O_CREATE, outputfile.WritingMode)
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
