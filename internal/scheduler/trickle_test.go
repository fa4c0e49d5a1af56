package scheduler

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// withTrickles returns r's body with msgs (<msg_from_host> contents) in it,
// as the client writes them.
func (f *fixture) withTrickles(r request, msgs ...string) string {
	if r.auth == "" {
		r.auth = f.user.Authenticator
	}
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "  <msg_from_host>%s  </msg_from_host>\n", m)
	}
	return strings.Replace(r.body(), "</scheduler_request>", b.String()+"</scheduler_request>", 1)
}

func clientTrickle(result string, t int64, variety, body string) string {
	return fmt.Sprintf("\n      <result_name>%s</result_name>\n      <time>%d</time>\n<variety>%s</variety>\n%s\n",
		result, t, variety, body)
}

func (f *fixture) rpcBody(body string) *protocol.SchedulerReply {
	f.t.Helper()
	code, text := f.post(body)
	if code != 200 {
		f.t.Fatalf("POST /scheduler = %d %q, want 200", code, text)
	}
	rep, err := protocol.ParseSchedulerReply(strings.NewReader(text))
	if err != nil {
		f.t.Fatalf("ParseSchedulerReply: %v\n%s", err, text)
	}
	return rep
}

func (f *fixture) trickleUps(hostID int64) []row.MsgFromHost {
	f.t.Helper()
	msgs, err := f.st.MsgFromHostListRecent(f.ctx, hostID, 100)
	if err != nil {
		f.t.Fatal(err)
	}
	return msgs
}

func TestTrickleUpsStoredOnceAndAcked(t *testing.T) {
	f := setup(t)
	hostID := f.rpc(request{dontSend: true}).HostID
	r := request{hostID: hostID, seqno: 1, dontSend: true}
	msgs := []string{clientTrickle("wu_1_0", t0-60, "progress", "<cpu_time>3600</cpu_time>"),
		clientTrickle("wu_1_0", t0-30, "progress", "<cpu_time>3660</cpu_time>")}
	rep := f.rpcBody(f.withTrickles(r, msgs...))
	if rep.MessageAck == nil {
		t.Fatal("reply to a request with trickle-ups has no <message_ack/>")
	}
	stored := f.trickleUps(hostID)
	if len(stored) != 2 {
		t.Fatalf("stored %d trickle-ups, want 2: %+v", len(stored), stored)
	}
	for _, m := range stored {
		if m.ResultName != "wu_1_0" || m.Variety != "progress" || m.Handled || !strings.Contains(m.XML, "<cpu_time>") {
			t.Errorf("stored trickle-up %+v, want task wu_1_0, variety progress, unhandled, with the app's text", m)
		}
	}
	// The ack was lost: the client sends both again, with a new one. Each
	// is stored once, and all are acked.
	r.seqno = 2
	rep = f.rpcBody(f.withTrickles(r, append(msgs, clientTrickle("wu_1_0", t0, "done", ""))...))
	if rep.MessageAck == nil {
		t.Fatal("reply to a request sending trickle-ups again has no <message_ack/>")
	}
	if got := len(f.trickleUps(hostID)); got != 3 {
		t.Errorf("after sending two again and one new, %d trickle-ups stored, want 3", got)
	}
	// Without trickle-ups, no ack.
	r.seqno = 3
	if rep := f.rpc(r); rep.MessageAck != nil {
		t.Error("reply to a request without trickle-ups has <message_ack/>")
	}
}

func TestTrickleUpsPastBoundsRefusedWhole(t *testing.T) {
	f := setup(t)
	hostID := f.rpc(request{dontSend: true}).HostID
	r := request{hostID: hostID, seqno: 1, dontSend: true}
	big := clientTrickle("wu_2_0", t0, "dump", strings.Repeat("x", MaxTrickleUpBytes))
	rep := f.rpcBody(f.withTrickles(r, clientTrickle("wu_2_0", t0-1, "progress", ""), big))
	if rep.MessageAck != nil {
		t.Error("a request with a trickle-up past the size bound was acked")
	}
	if len(rep.Messages) == 0 || !strings.Contains(rep.Messages[len(rep.Messages)-1].Text, "Trickle-up messages not accepted") {
		t.Errorf("reply messages %+v, want one saying the trickle-ups were not accepted", rep.Messages)
	}
	if got := f.trickleUps(hostID); len(got) != 0 {
		t.Errorf("a refused request stored %d trickle-ups, want none", len(got))
	}
}

// failingTrickles fails the trickle-up insert, as a database in trouble
// would.
type failingTrickles struct{ *store.Store }

func (failingTrickles) MsgFromHostInsert(context.Context, []row.MsgFromHost) (int64, error) {
	return 0, fmt.Errorf("insert: %w", io.ErrUnexpectedEOF)
}

func TestTrickleUpsNotStoredNotAcked(t *testing.T) {
	f := setup(t, func(o *Options) { o.Store = failingTrickles{o.Store.(*store.Store)} })
	hostID := f.rpc(request{dontSend: true}).HostID
	rep := f.rpcBody(f.withTrickles(request{hostID: hostID, seqno: 1, dontSend: true}, clientTrickle("wu_3_0", t0, "progress", "")))
	if rep.MessageAck != nil {
		t.Error("trickle-ups that could not be stored were acked")
	}
}

func TestTrickleDownDeliveredOnce(t *testing.T) {
	f := setup(t, func(o *Options) { o.TrickleDown = true })
	hostID := f.rpc(request{dontSend: true}).HostID
	other := f.rpc(request{dontSend: true}).HostID
	xml, err := protocol.TrickleDownXML("wu_4_0", t0, "<speed>2</speed>")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []int64{hostID, other} {
		if _, err := f.st.MsgToHostInsert(f.ctx, row.MsgToHost{CreateTime: t0, HostID: h, Variety: "speed", XML: xml}); err != nil {
			t.Fatal(err)
		}
	}
	rep := f.rpc(request{hostID: hostID, seqno: 1, dontSend: true})
	if len(rep.TrickleDowns) != 1 {
		t.Fatalf("reply has %d trickle-downs, want 1", len(rep.TrickleDowns))
	}
	if td := rep.TrickleDowns[0]; td.ResultName != "wu_4_0" || td.Time != t0 || td.Body != "<speed>2</speed>\n" {
		t.Errorf("trickle-down %+v, want task wu_4_0, time %d, body <speed>2</speed>", td, t0)
	}
	if rep := f.rpc(request{hostID: hostID, seqno: 2, dontSend: true}); len(rep.TrickleDowns) != 0 {
		t.Errorf("second reply has %d trickle-downs, want none: each is delivered once", len(rep.TrickleDowns))
	}
	// The other host's message waits for that host.
	if rep := f.rpc(request{hostID: other, seqno: 1, dontSend: true}); len(rep.TrickleDowns) != 1 {
		t.Errorf("the other host got %d trickle-downs, want its own one", len(rep.TrickleDowns))
	}
}
