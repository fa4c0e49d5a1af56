package dbpurge_test

import (
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/dbpurge"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

func TestPurgeOldHandledTrickles(t *testing.T) {
	b := setup(t)
	now := b.now.Unix()
	old, recent := now-31*86400, now-86400
	// Trickle-ups: old handled, old unhandled, recent handled.
	var ups []row.MsgFromHost
	for i, created := range []int64{old, old, recent} {
		m := protocol.NewMsgFromHost("wu", int64(i), "v", "")
		ups = append(ups, row.MsgFromHost{CreateTime: created, HostID: 1, Variety: "v", ResultName: "wu", MD5: m.MD5(), XML: m.XML})
	}
	if _, err := b.st.MsgFromHostInsert(b.ctx, ups); err != nil {
		t.Fatal(err)
	}
	msgs, err := b.st.MsgFromHostListUnhandled(b.ctx, store.MsgFromHostListParams{Mod: 1, Limit: 10})
	if err != nil || len(msgs) != 3 {
		t.Fatalf("stored %d, %v", len(msgs), err)
	}
	for _, i := range []int{0, 2} {
		if _, err := b.st.MsgFromHostMarkHandled(b.ctx, store.MsgHandled{ID: msgs[i].ID, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	// Trickle-downs: old delivered, old queued.
	for _, h := range []int64{2, 3} {
		if _, err := b.st.MsgToHostInsert(b.ctx, row.MsgToHost{CreateTime: old, HostID: h, Variety: "v", XML: "<trickle_down/>"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.st.MsgToHostTake(b.ctx, 2, 10); err != nil {
		t.Fatal(err)
	}

	svc := b.service(t, nil, dbpurge.Config{TrickleRetention: 30 * 24 * time.Hour})
	if _, err := svc.RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	var up, down []int64
	if err := b.st.DB().SelectContext(b.ctx, &up, `SELECT id FROM msg_from_host ORDER BY id`); err != nil {
		t.Fatal(err)
	}
	if err := b.st.DB().SelectContext(b.ctx, &down, `SELECT hostid FROM msg_to_host ORDER BY id`); err != nil {
		t.Fatal(err)
	}
	if len(up) != 2 || up[0] != msgs[1].ID || up[1] != msgs[2].ID {
		t.Errorf("trickle-ups left %v, want the old unhandled %d and the recent %d", up, msgs[1].ID, msgs[2].ID)
	}
	if len(down) != 1 || down[0] != 3 {
		t.Errorf("trickle-downs left for hosts %v, want only host 3's undelivered one", down)
	}
}
