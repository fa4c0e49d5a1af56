package protocol

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Upload handler reply statuses (PROTOCOL.md §8.3).
const (
	// UploadOK: done; for a size query, FileSize is valid.
	UploadOK = 0
	// UploadTransient: the client retries later with back-off.
	UploadTransient = 1
	// UploadPermanent: the client gives up on the file.
	UploadPermanent = -1
)

// DefaultMaxUploadHeader bounds the XML header of an upload request. The
// real client's header is about 700 bytes.
const DefaultMaxUploadHeader = 16 << 10

// dataMarker ends the header of an upload; the file bytes follow the end of
// its line.
const dataMarker = "<data>"

// UploadRequest is the XML header of a request to the upload handler
// (<data_server_request>, PROTOCOL.md §8.1–§8.2): either a size query or
// an upload, whose file bytes follow the header.
type UploadRequest struct {
	CoreClientMajorVersion int
	CoreClientMinorVersion int
	CoreClientRelease      int
	// GetFileSize marks a size query (<get_file_size>NAME</get_file_size>).
	GetFileSize bool
	// FileUpload marks an upload (<file_upload>); Nbytes-Offset bytes of the
	// file follow the header.
	FileUpload bool
	// Name is the file, for both kinds.
	Name string
	// XMLSignature is the upload certificate the client copied from the
	// output's file_info, unchecked; empty if there was none.
	XMLSignature string
	// MaxNbytes is the limit from the file_info, valid if HasMaxNbytes.
	MaxNbytes    int64
	HasMaxNbytes bool
	// Nbytes is the size of the whole file.
	Nbytes int64
	// MD5Cksum is the md5 of the whole file.
	MD5Cksum string
	// Offset is where the bytes that follow start in the file.
	Offset int64
}

// ReadUploadRequest reads an upload request's header from br, leaving br at
// the first file byte: for an upload, the header ends with the line holding
// <data>; a size query has no data and ends with the body. Errors wrap
// ErrTooLarge (header over maxHeader bytes) or ErrMalformed, or are read
// errors from br.
func ReadUploadRequest(br *bufio.Reader, maxHeader int) (*UploadRequest, error) {
	var head []byte
	for {
		line, err := br.ReadSlice('\n')
		from := max(0, len(head)-len(dataMarker))
		head = append(head, line...)
		if len(head) > maxHeader {
			return nil, fmt.Errorf("parse upload request: %w: header over %d bytes", ErrTooLarge, maxHeader)
		}
		if bytes.Contains(head[from:], []byte(dataMarker)) {
			// The rest of the <data> line is not file data either.
			n := len(head)
			for err == bufio.ErrBufferFull {
				line, err = br.ReadSlice('\n')
				if n += len(line); n > maxHeader {
					return nil, fmt.Errorf("parse upload request: %w: header over %d bytes", ErrTooLarge, maxHeader)
				}
			}
			if err != nil && err != io.EOF {
				return nil, fmt.Errorf("read upload request: %w", err)
			}
			break
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read upload request: %w", err)
		}
	}
	return ParseUploadHeader(head)
}

// ParseUploadHeader parses an upload request header held in memory: the
// body up to and including the <data> line, or a whole size query.
func ParseUploadHeader(header []byte) (*UploadRequest, error) {
	req, err := parseUploadHeader(header)
	if err != nil {
		return nil, fmt.Errorf("parse upload request: %w", err)
	}
	return req, nil
}

func parseUploadHeader(header []byte) (*UploadRequest, error) {
	doc, err := scan(string(header), Limits{MaxBytes: int64(len(header)), MaxDepth: 16, MaxElements: 1000})
	if err != nil {
		return nil, err
	}
	// The client never closes <file_upload> or <data_server_request>, so
	// the elements of an upload nest oddly; look them up anywhere.
	root := doc.find("data_server_request", nil)
	if root == nil {
		return nil, fmt.Errorf("%w: no <data_server_request>", ErrMalformed)
	}
	req := &UploadRequest{}
	text := func(name string, skip func(*node) bool) (string, bool) {
		if n := root.find(name, skip); n != nil {
			return n.text(), true
		}
		return "", false
	}
	if s, ok := text("core_client_major_version", nil); ok {
		req.CoreClientMajorVersion = int(parseInt(s, 32))
	}
	if s, ok := text("core_client_minor_version", nil); ok {
		req.CoreClientMinorVersion = int(parseInt(s, 32))
	}
	if s, ok := text("core_client_release", nil); ok {
		req.CoreClientRelease = int(parseInt(s, 32))
	}
	if s, ok := text("get_file_size", nil); ok {
		req.GetFileSize = true
		req.Name = s
		return req, nil
	}
	if root.find("file_upload", nil) == nil {
		return nil, fmt.Errorf("%w: neither <get_file_size> nor <file_upload>", ErrMalformed)
	}
	req.FileUpload = true
	fi := root.find("file_info", nil)
	if fi == nil {
		return nil, fmt.Errorf("%w: upload without <file_info>", ErrMalformed)
	}
	if n := fi.find("name", nil); n != nil {
		req.Name = n.text()
	}
	if n := fi.find("xml_signature", nil); n != nil {
		req.XMLSignature = n.text()
	}
	if n := fi.find("max_nbytes", nil); n != nil {
		if req.MaxNbytes, err = parseSize("max_nbytes", n.text()); err != nil {
			return nil, err
		}
		req.HasMaxNbytes = true
	}
	outside := func(n *node) bool { return n == fi }
	s, ok := text("nbytes", outside)
	if !ok {
		return nil, fmt.Errorf("%w: upload without <nbytes>", ErrMalformed)
	}
	if req.Nbytes, err = parseSize("nbytes", s); err != nil {
		return nil, err
	}
	req.MD5Cksum, _ = text("md5_cksum", outside)
	if s, ok := text("offset", outside); ok {
		if req.Offset, err = parseSize("offset", s); err != nil {
			return nil, err
		}
	}
	if root.find("data", nil) == nil {
		return nil, fmt.Errorf("%w: upload without <data>; the request was cut off", ErrMalformed)
	}
	return req, nil
}

// maxSize is the largest size accepted: float64 holds integers exactly up
// to here, and the client computes sizes in doubles.
const maxSize = 1 << 53

// parseSize reads a byte count, which the client writes with "%.0f".
func parseSize(what, s string) (int64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f < 0 || f > maxSize || f != math.Trunc(f) {
		return 0, fmt.Errorf("%w: <%s> %q is not a byte count", ErrMalformed, what, s)
	}
	return int64(f), nil
}

// WriteUploadRequest writes req's header as the 7.20 client does, ending
// with the <data> line for an upload; the caller then writes
// Nbytes-Offset file bytes. Like the client it does not escape the name.
// The simulated client uses it.
func WriteUploadRequest(w io.Writer, req *UploadRequest) error {
	if req.GetFileSize == req.FileUpload {
		return errors.New("write upload request: exactly one of GetFileSize and FileUpload must be set")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<data_server_request>\n"+
		"    <core_client_major_version>%d</core_client_major_version>\n"+
		"    <core_client_minor_version>%d</core_client_minor_version>\n"+
		"    <core_client_release>%d</core_client_release>\n",
		req.CoreClientMajorVersion, req.CoreClientMinorVersion, req.CoreClientRelease)
	if req.GetFileSize {
		fmt.Fprintf(&b, "    <get_file_size>%s</get_file_size>\n</data_server_request>\n", req.Name)
	} else {
		fmt.Fprintf(&b, "<file_upload>\n<file_info>\n<name>%s</name>\n<xml_signature>\n", req.Name)
		// The client trims the certificate and ends it with no newline.
		b.WriteString(strings.TrimSpace(req.XMLSignature))
		b.WriteString("</xml_signature>\n")
		if req.HasMaxNbytes {
			fmt.Fprintf(&b, "<max_nbytes>%d</max_nbytes>\n", req.MaxNbytes)
		}
		fmt.Fprintf(&b, "</file_info>\n<nbytes>%d</nbytes>\n<md5_cksum>%s</md5_cksum>\n<offset>%d</offset>\n%s\n",
			req.Nbytes, req.MD5Cksum, req.Offset, dataMarker)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write upload request: %w", err)
	}
	return nil
}

// UploadReply is the upload handler's <data_server_reply>.
type UploadReply struct {
	// Status is UploadOK, UploadTransient or UploadPermanent.
	Status int
	// Message is shown in the client's log as the server's error.
	Message string
	// FileSize answers a size query, written if HasFileSize.
	FileSize    int64
	HasFileSize bool
}

// WriteUploadReply writes rep as BOINC's upload handler does.
func WriteUploadReply(w io.Writer, rep UploadReply) error {
	var b strings.Builder
	fmt.Fprintf(&b, "<data_server_reply>\n    <status>%d</status>\n", rep.Status)
	if rep.Message != "" {
		fmt.Fprintf(&b, "    <message>%s</message>\n", escapeText(rep.Message))
	}
	if rep.HasFileSize {
		fmt.Fprintf(&b, "    <file_size>%d</file_size>\n", rep.FileSize)
	}
	b.WriteString("</data_server_reply>\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write upload reply: %w", err)
	}
	return nil
}

// ParseUploadReply reads a <data_server_reply> as the client does: the
// first <status> counts, and a reply without one is a transient error. The
// simulated client uses it.
func ParseUploadReply(r io.Reader) (*UploadReply, error) {
	b, err := io.ReadAll(io.LimitReader(r, DefaultMaxUploadHeader+1))
	if err != nil {
		return nil, fmt.Errorf("read upload reply: %w", err)
	}
	if len(b) > DefaultMaxUploadHeader {
		return nil, fmt.Errorf("parse upload reply: %w: over %d bytes", ErrTooLarge, DefaultMaxUploadHeader)
	}
	doc, err := scan(string(b), Limits{MaxBytes: int64(len(b)), MaxDepth: 16, MaxElements: 1000})
	if err != nil {
		return nil, fmt.Errorf("parse upload reply: %w", err)
	}
	rep := &UploadReply{Status: UploadTransient}
	if n := doc.find("status", nil); n != nil {
		if v, err := strconv.Atoi(n.text()); err == nil {
			rep.Status = v
		}
	}
	if n := doc.find("message", nil); n != nil {
		rep.Message = n.text()
	}
	if n := doc.find("file_size", nil); n != nil {
		if v, err := parseSize("file_size", n.text()); err == nil {
			rep.FileSize, rep.HasFileSize = v, true
		}
	}
	return rep, nil
}
