package protocol

import (
	"bytes"
	"encoding/xml"
	"reflect"
	"strings"
	"testing"
)

// stickyList is the list of sticky files as the 7.20 client writes it
// after its reports (client/cs_scheduler.cpp, "report sticky files"): one
// file present, one still downloading, one that failed.
const stickyList = "    <file_info>\n        <name>sf_db_eae797ff01dd963522f1b6a54ac3242a</name>\n" +
	"        <nbytes>1000000.000000</nbytes>\n        <status>1</status>\n    </file_info>\n" +
	"    <file_info>\n        <name>sf_model_0f0f</name>\n        <nbytes>4096.000000</nbytes>\n" +
	"        <status>0</status>\n    </file_info>\n" +
	"    <file_info>\n        <name>sf_bad_1</name>\n        <nbytes>10.000000</nbytes>\n" +
	"        <status>-119</status>\n    </file_info>\n"

var stickyWant = []HostFile{
	{Name: "sf_db_eae797ff01dd963522f1b6a54ac3242a", Nbytes: 1e6, Status: FilePresent},
	{Name: "sf_model_0f0f", Nbytes: 4096, Status: 0},
	{Name: "sf_bad_1", Nbytes: 10, Status: -119},
}

// TestRequestListsStickyFiles reads a recorded request with the sticky
// files the client holds added where the client writes them: the streaming
// parser and encoding/xml (whose tags the types carry) read the same list,
// the output files of the report inside it are not taken for held files,
// and the list survives the client-side writer.
func TestRequestListsStickyFiles(t *testing.T) {
	t.Parallel()
	head, report, tail := sampleParts(t)
	body := head + report + stickyList + tail
	req, err := ParseSchedulerRequest(strings.NewReader(body))
	if err != nil {
		t.Fatalf("ParseSchedulerRequest(sample 09 with sticky files) error %v", err)
	}
	if !reflect.DeepEqual(req.HostFiles, stickyWant) {
		t.Errorf("HostFiles = %+v, want %+v", req.HostFiles, stickyWant)
	}
	if len(req.Results) != 1 || len(req.Results[0].FileInfos) != 1 || req.Results[0].FileInfos[0].Name != sampleOut {
		t.Errorf("report = %+v, want its one output file %s", req.Results, sampleOut)
	}

	// encoding/xml on a well-formed request of the same shape.
	small := "<scheduler_request>\n<hostid>3</hostid>\n<result>\n<name>r_1</name>\n<file_info>\n<name>r_1_0</name>\n" +
		"<nbytes>5</nbytes>\n</file_info>\n</result>\n" + stickyList + "<app_versions>\n</app_versions>\n</scheduler_request>\n"
	var viaXML SchedulerRequest
	if err := xml.Unmarshal([]byte(small), &viaXML); err != nil {
		t.Fatal(err)
	}
	viaStream, err := ParseSchedulerRequest(strings.NewReader(small))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(viaStream.HostFiles, viaXML.HostFiles) || !reflect.DeepEqual(viaXML.HostFiles, stickyWant) {
		t.Errorf("HostFiles: streaming parser %+v, encoding/xml %+v, want %+v", viaStream.HostFiles, viaXML.HostFiles, stickyWant)
	}

	var b bytes.Buffer
	if err := WriteSchedulerRequest(&b, req); err != nil {
		t.Fatal(err)
	}
	again, err := ParseSchedulerRequest(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again.HostFiles, stickyWant) {
		t.Errorf("HostFiles after WriteSchedulerRequest = %+v, want %+v", again.HostFiles, stickyWant)
	}
}
