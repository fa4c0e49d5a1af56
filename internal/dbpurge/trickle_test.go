package dbpurge_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/dbpurge"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
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

// TestPassFoldsTheCountTables: a pass of replica 0 folds the status page's
// count rows into one per key, more than one fold's batch of them, and the
// counts still match the rows; replica 1 leaves them.
func TestPassFoldsTheCountTables(t *testing.T) {
	b := setup(t)
	wu := storetest.Job(t, b.st, storetest.JobOptions{CreateTime: 1, App: b.appID, TransitionTime: 100})
	n := store.CountsFoldLimit + 5000
	storetest.Exec(t, b.st, fmt.Sprintf(`INSERT INTO result (create_time, workunitid, server_state, name, appid)
SELECT 1, ?, 2, CONCAT('r', seq), ? FROM seq_1_to_%d`, n), wu.ID, b.appID)
	storetest.Exec(t, b.st, `UPDATE result SET server_state = 4 WHERE id % 2 = 0`)
	countRows := func() (rows int) {
		if err := b.st.DB().GetContext(b.ctx, &rows, `SELECT (SELECT COUNT(*) FROM result_count) + (SELECT COUNT(*) FROM workunit_count)`); err != nil {
			t.Fatal(err)
		}
		return rows
	}
	before := countRows()
	if _, err := b.service(t, nil, dbpurge.Config{Mod: 2, ModIndex: 1}).RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	if got := countRows(); got != before {
		t.Errorf("replica 1 changed the count rows: %d, was %d", got, before)
	}
	if _, err := b.service(t, nil, dbpurge.Config{Mod: 2}).RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	if got := countRows(); got > 3 {
		t.Errorf("%d count rows after replica 0's pass (were %d), want one per key (3)", got, before)
	}
	if off, err := b.st.CountsRecount(b.ctx); err != nil || len(off) != 0 {
		t.Errorf("counts after the fold: %v, %v; want them to match the rows", off, err)
	}
}
