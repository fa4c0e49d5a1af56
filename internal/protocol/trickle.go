package protocol

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// MsgFromHost is a trickle-up message in a scheduler request's
// <msg_from_host>. The client writes the task's name and the time the
// application sent it, then the file the application wrote
// (boinc_send_trickle_up): a <variety> line and the application's own text
// (client/cs_trickle.cpp, api/boinc_api.cpp):
//
//	<msg_from_host>
//	    <result_name>wu_1_0</result_name>
//	    <time>1700000000</time>
//	<variety>progress</variety>
//	<cpu_time>3600</cpu_time>
//	</msg_from_host>
//
// A client whose RPC reply was lost sends the same message again, byte for
// byte, so its MD5 identifies it.
type MsgFromHost struct {
	// XML is the element's content as received.
	XML string `xml:",innerxml"`
	// ResultName, Time and Variety are read from XML by the parser.
	ResultName string `xml:"-"`
	Time       int64  `xml:"-"`
	Variety    string `xml:"-"`
}

// NewMsgFromHost returns the message a client sends for a trickle-up that
// the application of task resultName sent at time t, as variety with body
// (the simulated client uses it).
func NewMsgFromHost(resultName string, t int64, variety, body string) MsgFromHost {
	xml := fmt.Sprintf("\n<result_name>%s</result_name>\n<time>%d</time>\n<variety>%s</variety>\n%s\n",
		resultName, t, variety, body)
	return MsgFromHost{XML: xml, ResultName: resultName, Time: t, Variety: variety}
}

// MD5 is the hex MD5 of the message as received: the same for a message
// the client sends again.
func (m MsgFromHost) MD5() string {
	sum := md5.Sum([]byte(m.XML))
	return hex.EncodeToString(sum[:])
}

// readMsgFields sets m's fields read from its XML. Like BOINC's parser
// (sched/sched_types.cpp) it takes the first of each element and ignores
// the rest of the application's text.
func (m *MsgFromHost) readMsgFields() {
	doc, err := scan(m.XML, Limits{MaxBytes: int64(len(m.XML)), MaxDepth: 64, MaxElements: 1 << 20})
	if err != nil {
		return
	}
	if n := doc.child("result_name"); n != nil {
		m.ResultName = strings.TrimSpace(n.text())
	}
	if n := doc.child("time"); n != nil {
		m.Time = parseInt(strings.TrimSpace(n.text()), 64)
	}
	if n := doc.child("variety"); n != nil {
		m.Variety = strings.TrimSpace(n.text())
	}
}

// TrickleDown is a trickle-down message in a scheduler reply's
// <trickle_down>: text for the running application of task ResultName,
// which the client writes to the task's slot directory as trickle_down_TIME
// (client/cs_trickle.cpp, handle_trickle_down). The server writes stored
// messages verbatim (SchedulerReply.Raw, as made by TrickleDownXML); this
// type is how ParseSchedulerReply reads them.
type TrickleDown struct {
	// XML is the element's content as received.
	XML string `xml:",innerxml"`
	// ResultName, Time and Body are read from XML by ParseSchedulerReply:
	// Body is every line but the result name and time, as the client
	// keeps it.
	ResultName string `xml:"-"`
	Time       int64  `xml:"-"`
	Body       string `xml:"-"`
}

// readTrickleFields sets t's fields read from its XML line by line, as the
// client does.
func (t *TrickleDown) readTrickleFields() {
	var body strings.Builder
	for _, line := range strings.SplitAfter(t.XML, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
			continue
		case strings.HasPrefix(trimmed, "<result_name>") && strings.HasSuffix(trimmed, "</result_name>"):
			t.ResultName = unescape(strings.TrimSuffix(strings.TrimPrefix(trimmed, "<result_name>"), "</result_name>"))
		case strings.HasPrefix(trimmed, "<time>") && strings.HasSuffix(trimmed, "</time>"):
			t.Time, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(trimmed, "<time>"), "</time>"), 10, 64)
		default:
			body.WriteString(line)
		}
	}
	t.Body = body.String()
}

// TrickleDownXML returns the <trickle_down> element that delivers body to
// the application of task resultName, sent at time t, in the form the
// client reads (line by line: the name and time each on its own line, the
// body's lines kept as they are). A body the client would misread (one with
// its own <result_name>, <time> or </trickle_down> line) or a task name
// that is not one line of plain text is refused.
func TrickleDownXML(resultName string, t int64, body string) (string, error) {
	if resultName == "" || strings.ContainsAny(resultName, "<>&\r\n") || len(resultName) > 254 {
		return "", fmt.Errorf("trickle-down task name %q: want 1 to 254 characters of one line without <, > or &", resultName)
	}
	for _, line := range strings.Split(body, "\n") {
		for _, tag := range []string{"<result_name>", "<time>", "</trickle_down>"} {
			if strings.Contains(line, tag) {
				return "", fmt.Errorf("trickle-down body line %q contains %s, which the client would take for its own", line, tag)
			}
		}
	}
	if body != "" && !strings.HasSuffix(body, "\n") {
		body += "\n"
	}
	return fmt.Sprintf("<trickle_down>\n<result_name>%s</result_name>\n<time>%d</time>\n%s</trickle_down>", resultName, t, body), nil
}
