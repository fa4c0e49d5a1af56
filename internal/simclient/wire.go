package simclient

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"strconv"
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

// encodeRequest writes a scheduler request body.
func encodeRequest(req *protocol.SchedulerRequest) ([]byte, error) {
	b, err := xml.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode scheduler request: %w", err)
	}
	return b, nil
}

// decodeReply parses a scheduler reply. Like the real client it skips
// whatever comes before <scheduler_reply> and fails when the closing tag is
// missing.
func decodeReply(body []byte) (*protocol.SchedulerReply, error) {
	i := bytes.Index(body, []byte("<scheduler_reply"))
	if i < 0 {
		return nil, errors.New("parse scheduler reply: no <scheduler_reply>")
	}
	if !bytes.Contains(body[i:], []byte("</scheduler_reply>")) {
		return nil, errors.New("parse scheduler reply: no close tag")
	}
	var r protocol.SchedulerReply
	if err := xml.Unmarshal(body[i:], &r); err != nil {
		return nil, fmt.Errorf("parse scheduler reply: %w", err)
	}
	return &r, nil
}

// uploadBody is a straight upload of a whole file (PROTOCOL.md §8.1): the
// client's XML header, then the raw bytes. The certificate is copied from
// the output's file_info with surrounding white space trimmed, as the real
// client does.
func uploadBody(fi protocol.FileInfo, data []byte, md5hex string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "<data_server_request>\n"+
		"    <core_client_major_version>%d</core_client_major_version>\n"+
		"    <core_client_minor_version>%d</core_client_minor_version>\n"+
		"    <core_client_release>%d</core_client_release>\n"+
		"<file_upload>\n<file_info>\n<name>%s</name>\n<xml_signature>\n",
		clientMajor, clientMinor, clientRelease, fi.Name)
	if sig := strings.TrimSpace(fi.XMLSignature); sig != "" {
		b.WriteString(sig)
	}
	fmt.Fprintf(&b, "</xml_signature>\n<max_nbytes>%.0f</max_nbytes>\n</file_info>\n"+
		"<nbytes>%d</nbytes>\n<md5_cksum>%s</md5_cksum>\n<offset>0</offset>\n<data>\n",
		fi.MaxNbytes, len(data), md5hex)
	b.Write(data)
	return b.Bytes()
}

// uploadStatus reads a data server reply as the real client does: the
// integer in the first <status> element; a missing status is transient (1).
func uploadStatus(body []byte) (status int, message string) {
	status = 1
	if v, ok := element(body, "status"); ok {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
			status = n
		}
	}
	message, _ = element(body, "message")
	return status, strings.TrimSpace(message)
}

// element returns the text between the first <tag> and the next </tag>.
func element(body []byte, tag string) (string, bool) {
	open, closing := "<"+tag+">", "</"+tag+">"
	i := bytes.Index(body, []byte(open))
	if i < 0 {
		return "", false
	}
	rest := body[i+len(open):]
	j := bytes.Index(rest, []byte(closing))
	if j < 0 {
		return "", false
	}
	return string(rest[:j]), true
}
