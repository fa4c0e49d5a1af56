package store_test

import (
	"context"
	"testing"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// What a host has (CPU features, coprocessors, client version) is stored
// on insert, read by every host read, written by the scheduler's host_info
// update and left alone by its RPC-only update; a row from before schema 6
// (coprocs NULL) reads as none.
func TestHostHardwareColumns(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	u := storetest.User(t, st, storetest.UserOptions{})
	const coprocs = `[{"Type":"NVIDIA","Count":1}]`
	h := storetest.Host(t, st, storetest.HostOptions{User: u.ID, HostCPID: "cpid1", PFeatures: "sse2 avx2", Coprocs: coprocs,
		ClientVersion: 72002})
	check := func(when string, want row.Host) {
		t.Helper()
		got, err := st.HostGet(ctx, h.ID)
		if err != nil || got.PFeatures != want.PFeatures || got.Coprocs != want.Coprocs || got.ClientVersion != want.ClientVersion {
			t.Fatalf("%s: HostGet = %q %q %d, %v; want %q %q %d", when, got.PFeatures, got.Coprocs, got.ClientVersion, err,
				want.PFeatures, want.Coprocs, want.ClientVersion)
		}
		byCPID, err := st.HostGetByCPID(ctx, u.ID, "cpid1")
		if err != nil || byCPID != got {
			t.Fatalf("%s: HostGetByCPID = %+v, %v; want %+v", when, byCPID, err, got)
		}
		joined, err := st.UserHostGet(ctx, u.Authenticator, h.ID)
		if err != nil || !joined.HostFound || joined.Host != got {
			t.Fatalf("%s: UserHostGet host = %+v, %v, %v; want %+v", when, joined.Host, joined.HostFound, err, got)
		}
	}
	check("inserted", h)

	// The RPC-only update leaves them.
	h.RPCSeqno, h.RPCTime = 1, 100
	other := h
	other.PFeatures, other.Coprocs, other.ClientVersion = "x", "y", 1
	if _, err := st.SchedulerCommit(ctx, store.SchedBatch{Hosts: []store.SchedHost{{Host: other}}}); err != nil {
		t.Fatal(err)
	}
	check("after an RPC-only update", h)

	// The host_info update writes them.
	h.RPCSeqno, h.PFeatures, h.Coprocs, h.ClientVersion = 2, "sse2 avx2 avx512f", `[{"Type":"ATI","Count":2}]`, 80000
	if _, err := st.SchedulerCommit(ctx, store.SchedBatch{Hosts: []store.SchedHost{{Host: h, Info: true}}}); err != nil {
		t.Fatal(err)
	}
	check("after a host_info update", h)

	storetest.Exec(t, st, `UPDATE host SET coprocs = NULL WHERE id = ?`, h.ID)
	h.Coprocs = ""
	check("with coprocs NULL", h)
}
