package protocol

import (
	"bytes"
	"encoding/xml"
	"reflect"
	"strings"
	"testing"
)

// clientTrickleRequest is a request with two trickle-ups as the 7.20 client
// writes them (client/cs_trickle.cpp): the task name and time, then the
// application's file as it is, not escaped.
const clientTrickleRequest = `<scheduler_request>
    <authenticator>a</authenticator>
    <hostid>7</hostid>
  <msg_from_host>
      <result_name>wu_1_0</result_name>
      <time>1700000000</time>
<variety>progress</variety>
<cpu_time>3600</cpu_time>
  </msg_from_host>
  <msg_from_host>
      <result_name>wu_2_1</result_name>
      <time>1700000100</time>
<variety>checkpoint</variety>

  </msg_from_host>
    <other_results>
    </other_results>
</scheduler_request>
`

func TestParseTrickleUps(t *testing.T) {
	t.Parallel()
	req, err := ParseSchedulerRequest(strings.NewReader(clientTrickleRequest))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name, variety string
		time          int64
	}{{"wu_1_0", "progress", 1700000000}, {"wu_2_1", "checkpoint", 1700000100}}
	if len(req.MsgsFromHost) != len(want) {
		t.Fatalf("parsed %d trickle-ups, want %d: %+v", len(req.MsgsFromHost), len(want), req.MsgsFromHost)
	}
	for i, w := range want {
		m := req.MsgsFromHost[i]
		if m.ResultName != w.name || m.Variety != w.variety || m.Time != w.time {
			t.Errorf("trickle-up %d = %q %q %d, want %q %q %d", i, m.ResultName, m.Variety, m.Time, w.name, w.variety, w.time)
		}
	}
	if !strings.Contains(req.MsgsFromHost[0].XML, "<cpu_time>3600</cpu_time>") {
		t.Errorf("trickle-up 0 XML = %q, want the application's text kept", req.MsgsFromHost[0].XML)
	}
	if req.MsgsFromHost[0].MD5() == req.MsgsFromHost[1].MD5() {
		t.Error("two different messages have one MD5")
	}

	// encoding/xml, reading the struct tags, finds the same messages: the
	// types and the streaming parser agree.
	var std SchedulerRequest
	if err := xml.Unmarshal([]byte(clientTrickleRequest), &std); err != nil {
		t.Fatal(err)
	}
	if len(std.MsgsFromHost) != len(req.MsgsFromHost) {
		t.Fatalf("encoding/xml read %d trickle-ups, the parser %d", len(std.MsgsFromHost), len(req.MsgsFromHost))
	}
	for i := range std.MsgsFromHost {
		if std.MsgsFromHost[i].XML != req.MsgsFromHost[i].XML {
			t.Errorf("trickle-up %d: encoding/xml %q, parser %q", i, std.MsgsFromHost[i].XML, req.MsgsFromHost[i].XML)
		}
	}

	// What the simulated client writes reads back the same, MD5 included.
	sent := &SchedulerRequest{Authenticator: "a", MsgsFromHost: []MsgFromHost{
		NewMsgFromHost("wu_3_0", 1700000200, "progress", "<cpu_time>60</cpu_time>")}}
	var b bytes.Buffer
	if err := WriteSchedulerRequest(&b, sent); err != nil {
		t.Fatal(err)
	}
	got, err := ParseSchedulerRequest(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.MsgsFromHost, sent.MsgsFromHost) {
		t.Errorf("round trip: got %+v, want %+v", got.MsgsFromHost, sent.MsgsFromHost)
	}
}

func TestTrickleDownReply(t *testing.T) {
	t.Parallel()
	td, err := TrickleDownXML("wu_1_0", 1700000300, "<command>faster</command>\nline two")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteSchedulerReply(&b, &SchedulerReply{MessageAck: &Empty{}, Raw: []string{td}}); err != nil {
		t.Fatal(err)
	}
	// The client reads the element line by line: the name, time and close
	// tag each on a line of their own.
	for _, line := range []string{"<result_name>wu_1_0</result_name>\n", "<time>1700000300</time>\n", "\n</trickle_down>\n", "<message_ack/>\n"} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("reply %q lacks the line %q", b.String(), line)
		}
	}
	rep, err := ParseSchedulerReply(&b)
	if err != nil {
		t.Fatal(err)
	}
	if rep.MessageAck == nil || len(rep.TrickleDowns) != 1 {
		t.Fatalf("parsed reply ack %v, trickle-downs %+v; want an ack and one", rep.MessageAck, rep.TrickleDowns)
	}
	got := rep.TrickleDowns[0]
	if got.ResultName != "wu_1_0" || got.Time != 1700000300 || got.Body != "<command>faster</command>\nline two\n" {
		t.Errorf("trickle-down = %q %d %q", got.ResultName, got.Time, got.Body)
	}
	for _, bad := range []struct{ name, body string }{
		{"", "x"}, {"a<b", "x"}, {"a\nb", "x"}, {"r", "<time>3</time>"}, {"r", "x</trickle_down>"},
	} {
		if _, err := TrickleDownXML(bad.name, 1, bad.body); err == nil {
			t.Errorf("TrickleDownXML(%q, %q) = nil error, want a refusal", bad.name, bad.body)
		}
	}
}
