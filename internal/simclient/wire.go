package simclient

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/taskserver/taskserver/internal/protocol"
)

// Client version the simulated hosts claim, the Debian client the project
// targets.
const (
	clientMajor   = 7
	clientMinor   = 20
	clientRelease = 5
	platformName  = "x86_64-pc-linux-gnu"
	userAgent     = "BOINC client (x86_64-pc-linux-gnu 7.20.5) taskserver-simclient"
	// formContentType is what libcurl puts on the real client's raw XML
	// POSTs; sending it too checks the server does not form-decode bodies.
	formContentType = "application/x-www-form-urlencoded"
)

// encodeRequest writes a scheduler request body. The host always knows its
// tasks in progress, so it always sends <other_results>, even empty: that is
// what lets the scheduler resend tasks the host lost.
func encodeRequest(req *protocol.SchedulerRequest) ([]byte, error) {
	req.HasOtherResults = true
	var b bytes.Buffer
	if err := protocol.WriteSchedulerRequest(&b, req); err != nil {
		return nil, fmt.Errorf("encode scheduler request: %w", err)
	}
	return b.Bytes(), nil
}

// decodeReply parses a scheduler reply as the real client does: whatever
// comes before <scheduler_reply> is skipped and a missing closing tag is an
// error.
func decodeReply(body []byte) (*protocol.SchedulerReply, error) {
	return protocol.ParseSchedulerReply(bytes.NewReader(body))
}

// uploadBody is a straight upload of a whole file (PROTOCOL.md §8.1): the
// client's XML header, then the raw bytes.
func uploadBody(fi protocol.FileInfo, data []byte, md5hex string) ([]byte, error) {
	var b bytes.Buffer
	err := protocol.WriteUploadRequest(&b, &protocol.UploadRequest{
		CoreClientMajorVersion: clientMajor,
		CoreClientMinorVersion: clientMinor,
		CoreClientRelease:      clientRelease,
		FileUpload:             true,
		Name:                   fi.Name,
		XMLSignature:           fi.XMLSignature,
		MaxNbytes:              int64(fi.MaxNbytes),
		HasMaxNbytes:           true,
		Nbytes:                 int64(len(data)),
		MD5Cksum:               md5hex,
	})
	if err != nil {
		return nil, err
	}
	b.Write(data)
	return b.Bytes(), nil
}

// uploadStatus reads a data server reply as the real client does: the
// integer in <status>; a reply without one is transient.
func uploadStatus(body []byte) (status int, message string) {
	rep, err := protocol.ParseUploadReply(bytes.NewReader(body))
	if err != nil {
		return protocol.UploadTransient, ""
	}
	return rep.Status, strings.TrimSpace(rep.Message)
}

// uploadURLs are the URLs an output file may be uploaded to: the explicit
// <upload_url>s, else its <url>s.
func uploadURLs(fi protocol.FileInfo) []string {
	if len(fi.UploadURLs) > 0 {
		return fi.UploadURLs
	}
	return fi.URLs
}
