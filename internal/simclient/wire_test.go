package simclient

import (
	"bytes"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/protocol"
)

func TestUploadBodyMatchesRealClient(t *testing.T) {
	t.Parallel()
	fi := protocol.FileInfo{Name: "wu_upper_1_0_r0_out", MaxNbytes: 100000,
		XMLSignature: "\n2ecb3ce2\n721e27a9\n.\n"}
	b, err := uploadBody(fi, []byte("HELLO BOINC WORLD\ndone\n"), "cc4b471dacedcb39d73c6fa176272933")
	if err != nil {
		t.Fatalf("uploadBody: %v", err)
	}
	got := string(b)
	// The layout of samples/07_upload_POST_small_file.http.
	want := "<data_server_request>\n" +
		"    <core_client_major_version>7</core_client_major_version>\n" +
		"    <core_client_minor_version>20</core_client_minor_version>\n" +
		"    <core_client_release>5</core_client_release>\n" +
		"<file_upload>\n<file_info>\n<name>wu_upper_1_0_r0_out</name>\n" +
		"<xml_signature>\n2ecb3ce2\n721e27a9\n.</xml_signature>\n" +
		"<max_nbytes>100000</max_nbytes>\n</file_info>\n" +
		"<nbytes>23</nbytes>\n<md5_cksum>cc4b471dacedcb39d73c6fa176272933</md5_cksum>\n<offset>0</offset>\n<data>\n" +
		"HELLO BOINC WORLD\ndone\n"
	if got != want {
		t.Errorf("uploadBody =\n%s\nwant\n%s", got, want)
	}
	b, err = uploadBody(protocol.FileInfo{Name: "x", MaxNbytes: 10}, nil, "d41d8cd98f00b204e9800998ecf8427e")
	if unsigned := string(b); err != nil || !strings.Contains(unsigned, "<xml_signature>\n</xml_signature>\n") {
		t.Errorf("uploadBody without a certificate = %q, want an empty <xml_signature>\\n</xml_signature>", unsigned)
	}
}

func TestUploadStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body   string
		status int
		msg    string
	}{
		{"<data_server_reply>\n    <status>0</status>\n</data_server_reply>\n", 0, ""},
		{"<data_server_reply><status>-1</status><message>invalid signature</message></data_server_reply>", -1, "invalid signature"},
		{"<data_server_reply><status>1</status></data_server_reply>", 1, ""},
		{"<html>502 Bad Gateway</html>", 1, ""},
		{"<status>garbage</status>", 1, ""},
	} {
		status, msg := uploadStatus([]byte(tc.body))
		if status != tc.status || msg != tc.msg {
			t.Errorf("uploadStatus(%q) = %d, %q; want %d, %q", tc.body, status, msg, tc.status, tc.msg)
		}
	}
}

func TestDecodeReply(t *testing.T) {
	t.Parallel()
	r, err := decodeReply([]byte("<?xml version=\"1.0\"?>\n<scheduler_reply>\n<hostid>7</hostid>\n<request_delay>30</request_delay>" +
		"<unknown_tag>x</unknown_tag><result_ack><name>a</name></result_ack>\n</scheduler_reply>\n"))
	if err != nil || r.HostID != 7 || r.RequestDelay != 30 || len(r.ResultAcks) != 1 || r.ResultAcks[0].Name != "a" {
		t.Errorf("decodeReply = %+v, %v; want hostid 7, request_delay 30, one ack of a", r, err)
	}
	for _, bad := range []string{"", "<html>oops</html>", "<scheduler_reply><hostid>7</hostid>"} {
		if _, err := decodeReply([]byte(bad)); err == nil {
			t.Errorf("decodeReply(%q) = nil error, want a parse error", bad)
		}
	}
}

func TestEncodeRequestRoundTripsThroughServerParser(t *testing.T) {
	t.Parallel()
	in := &protocol.SchedulerRequest{Authenticator: "k", HostID: 3, RPCSeqno: 4, PlatformName: platformName,
		WorkReqSeconds: 2.5, CPUReqSecs: 2.5, CPUReqInstances: 1, HostInfo: protocol.HostInfo{PNCPUs: 2, PFpops: 1e10},
		Results: []protocol.ReportResult{{Name: "r1", State: 5, StderrOut: stderrOut("boom"),
			FileInfos: []protocol.ReportFileInfo{{Name: "r1_0", Nbytes: 80, MaxNbytes: 1e5, MD5Cksum: "abc", UploadURL: "http://h/u"}}}}}
	b, err := encodeRequest(in)
	if err != nil {
		t.Fatalf("encodeRequest: %v", err)
	}
	out, err := protocol.ParseSchedulerRequest(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("ParseSchedulerRequest(encodeRequest(...)): %v\n%s", err, b)
	}
	if out.Authenticator != "k" || out.HostID != 3 || out.RPCSeqno != 4 || out.WorkReqSeconds != 2.5 ||
		out.HostInfo.PNCPUs != 2 || out.PlatformName != platformName {
		t.Errorf("round trip = %+v, want the request's identity, work request and host info back", out)
	}
	if !out.HasOtherResults || len(out.OtherResults) != 0 {
		t.Errorf("round trip other_results present=%v n=%d, want an empty <other_results> (no tasks in progress)",
			out.HasOtherResults, len(out.OtherResults))
	}
	if len(out.Results) != 1 || out.Results[0].Name != "r1" || len(out.Results[0].FileInfos) != 1 ||
		out.Results[0].FileInfos[0].MD5Cksum != "abc" || !strings.Contains(out.Results[0].StderrOut, "boom") {
		t.Errorf("round trip results = %+v, want r1 with its file_info and stderr", out.Results)
	}
}

func FuzzDecodeReply(f *testing.F) {
	f.Add([]byte("<scheduler_reply><hostid>1</hostid><result><name>r</name></result></scheduler_reply>"))
	f.Add([]byte("junk<scheduler_reply></scheduler_reply>"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = decodeReply(b)
		_, _ = uploadStatus(b)
	})
}
