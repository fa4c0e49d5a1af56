package taskctl_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestTrickleSendAndList(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	ctx := context.Background()
	u := storetest.User(t, b.st, storetest.UserOptions{CreateTime: 1, EmailAddr: "a@example.org", Name: "a", Authenticator: "k"})
	h := storetest.Host(t, b.st, storetest.HostOptions{CreateTime: 1, User: u.ID})
	host := strconv.FormatInt(h.ID, 10)

	b.stdin = "<speed>2</speed>\n"
	out := b.mustRun(t, "trickle", "send", "--host", host, "--result", "wu_1_0", "--variety", "speed", "--body", "-")
	if !strings.Contains(out, "queued for host "+host) {
		t.Errorf("trickle send printed %q", out)
	}
	msgs, err := b.st.MsgToHostTake(ctx, h.ID, 10)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("queued %+v, %v; want one message", msgs, err)
	}
	want, _ := protocol.TrickleDownXML("wu_1_0", b.now.Unix(), "<speed>2</speed>")
	if msgs[0].XML != want || msgs[0].Variety != "speed" {
		t.Errorf("queued %q (%s), want %q (speed)", msgs[0].XML, msgs[0].Variety, want)
	}
	// Refused, nothing queued: an unknown host, a body the client would
	// misread.
	for _, args := range [][]string{
		{"--host", "99999", "--result", "r", "--variety", "v", "--body", "-"},
		{"--host", host, "--result", "r", "--variety", "v", "--body", "-", "--body", "/nonexistent/file"},
	} {
		if _, _, err := b.run(t, append([]string{"trickle", "send"}, args...)...); err == nil {
			t.Errorf("trickle send %v succeeded, want an error", args)
		}
	}
	b.stdin = "<time>1</time>"
	if _, _, err := b.run(t, "trickle", "send", "--host", host, "--result", "r", "--variety", "v", "--body", "-"); err == nil ||
		!strings.Contains(err.Error(), "<time>") {
		t.Errorf("trickle send of a body with a <time> line: %v, want a refusal naming it", err)
	}
	if n, _ := b.st.MsgToHostTake(ctx, h.ID, 10); len(n) != 0 {
		t.Errorf("refused sends queued %d messages", len(n))
	}

	m := protocol.NewMsgFromHost("wu_1_0", 5, "progress", "<cpu_time>3</cpu_time>")
	if _, err := b.st.MsgFromHostInsert(ctx, []row.MsgFromHost{{CreateTime: b.now.Unix(), HostID: h.ID, Variety: "progress",
		ResultName: "wu_1_0", MD5: m.MD5(), XML: m.XML}}); err != nil {
		t.Fatal(err)
	}
	out = b.mustRun(t, "trickle", "list", "--host", host)
	if !strings.Contains(out, "wu_1_0") || !strings.Contains(out, "progress") || !strings.Contains(out, "false") {
		t.Errorf("trickle list printed %q, want the unhandled progress message of wu_1_0", out)
	}
	if out := b.mustRun(t, "trickle", "list", "--json"); !strings.Contains(out, "cpu_time") {
		t.Errorf("trickle list --json printed %q, want the message's XML", out)
	}
}
