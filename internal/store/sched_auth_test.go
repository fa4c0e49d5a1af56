package store_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// TestUserHostHeldGet checks that the joined read returns what UserHostGet
// and ResultListHostInProgress return apart, with and without prepared
// statements.
func TestUserHostHeldGet(t *testing.T) {
	t.Parallel()
	for _, prepared := range []bool{false, true} {
		t.Run(map[bool]string{false: "interpolated", true: "prepared"}[prepared], func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st, err := store.Open(ctx, storetest.NewDatabase(t), store.Options{MaxOpenConns: 2, Prepared: prepared})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			appID := storetest.App(t, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
			uid := storetest.User(t, st, storetest.UserOptions{CreateTime: 1, EmailAddr: "a@example.com", Name: "a", Authenticator: "k"}).ID
			busy := storetest.Host(t, st, storetest.HostOptions{CreateTime: 1, User: uid, OSName: "Linux", PFpops: 1e9}).ID
			idle := storetest.Host(t, st, storetest.HostOptions{CreateTime: 1, User: uid}).ID
			wu := storetest.Job(t, st, storetest.JobOptions{CreateTime: 1, App: appID, Name: "wu",
				TransitionTime: state.NoTransition, DelayBound: 100, RscFpopsEst: 1e9}).ID
			for i, s := range []state.ServerState{state.ServerInProgress, state.ServerOver, state.ServerInProgress} {
				id := storetest.Instance(t, st, storetest.InstanceOptions{CreateTime: 1, Job: wu, ServerState: s,
					Name: "wu_" + string(rune('0'+i)), XMLDocIn: "<file_info/>"}).ID
				storetest.Exec(t, st, `UPDATE result SET hostid = ?, sent_time = 5, report_deadline = 105 WHERE id = ?`, busy, id)
			}
			// Versions the busy host ran, one anonymous-platform (negative
			// id), with values that need a double's full precision.
			storetest.Exec(t, st, `INSERT INTO host_app_version (host_id, app_version_id, et_n, et_avg, et_var,
et_median, turnaround_n, turnaround_avg, consecutive_valid, max_jobs_per_day, n_jobs_today, day, n_errors, n_valid)
VALUES (?, 3, 12, 1.2345678901234567e-10, 3.3e-21, 1.0000000000000002e-10, 11, 3600.5, 4, 7, 2, 20000, 1, 11),
(?, -7000002, 1, 2e-9, 0, 2e-9, 0, 0, 0, 0, 0, 0, 0, 0)`, busy, busy)

			for _, tc := range []struct {
				name   string
				hostID int64
				limit  int
			}{{"busy host", busy, 1000}, {"busy host, limit 1", busy, 1}, {"idle host", idle, 1000},
				{"no such host", 9999, 1000}, {"no host", 0, 1000}} {
				got, err := st.UserHostHeldGet(ctx, "k", tc.hostID, tc.limit)
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				u, h, found, held := got.User, got.Host, got.HostFound, got.Held
				if !got.UserFound {
					t.Errorf("%s: UserFound false for a known key", tc.name)
				}
				wantHAV, err := st.HostAppVersionListByHost(ctx, tc.hostID)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.HostAppVersions, wantHAV) {
					t.Errorf("%s: host_app_version rows %+v, HostAppVersionListByHost says %+v", tc.name,
						got.HostAppVersions, wantHAV)
				}
				if tc.hostID == busy && len(wantHAV) != 2 {
					t.Errorf("%s: %d host_app_version rows, want 2", tc.name, len(wantHAV))
				}
				list, err := st.UserHostHeldList(ctx, []store.AuthHost{{Auth: "k", HostID: tc.hostID, WantHeld: true}}, tc.limit)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(list[0].HostAppVersions, wantHAV) {
					t.Errorf("%s: UserHostHeldList host_app_version rows %+v, want %+v", tc.name, list[0].HostAppVersions, wantHAV)
				}
				w, err := st.UserHostGet(ctx, "k", tc.hostID)
				if err != nil {
					t.Fatal(err)
				}
				wu, wh, wfound := w.User, w.Host, w.HostFound
				if u != wu || h != wh || found != wfound {
					t.Errorf("%s: user, host, found = %+v, %+v, %v; UserHostGet says %+v, %+v, %v", tc.name, u, h, found, wu, wh, wfound)
				}
				want, err := st.ResultListHostInProgress(ctx, tc.hostID, tc.limit)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(held, want) {
					t.Errorf("%s: held = %+v, want %+v", tc.name, held, want)
				}
			}
			if _, err := st.UserHostHeldGet(ctx, "nosuch", busy, 1000); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("unknown authenticator: err = %v, want ErrNotFound", err)
			}
		})
	}
}

// BenchmarkUserHostHeldGet measures the database server's CPU for the
// scheduler's one read per request, prepared or not, from 16 goroutines:
//
//	TEST_MYSQL_DSN='root@tcp(127.0.0.1:3316)/' go test -run '^$' -bench UserHostHeldGet ./internal/store
func BenchmarkUserHostHeldGet(b *testing.B) {
	storetest.SkipWithoutServer(b)
	for _, prepared := range []bool{false, true} {
		b.Run(map[bool]string{false: "interpolated", true: "prepared"}[prepared], func(b *testing.B) {
			ctx := context.Background()
			dsn := storetest.NewDatabase(b)
			st, err := store.Open(ctx, dsn, store.Options{MaxOpenConns: 16, Prepared: prepared})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			uid := storetest.User(b, st, storetest.UserOptions{CreateTime: 1, EmailAddr: "a@example.com", Name: "a", Authenticator: "k"}).ID
			hid := storetest.Host(b, st, storetest.HostOptions{CreateTime: 1, User: uid}).ID
			wu := storetest.Job(b, st, storetest.JobOptions{CreateTime: 1, App: 1, Name: "wu", TransitionTime: state.NoTransition}).ID
			id := storetest.Instance(b, st, storetest.InstanceOptions{CreateTime: 1, Job: wu, ServerState: state.ServerInProgress,
				Name: "wu_0", XMLDocIn: strings.Repeat("x", 300)}).ID
			storetest.Exec(b, st, `UPDATE result SET hostid = ? WHERE id = ?`, hid, id)
			// Three versions learnt: a CPU, a GPU and a multi-threaded one.
			storetest.Exec(b, st, `INSERT INTO host_app_version (host_id, app_version_id, et_n, et_avg, et_median)
VALUES (?, 1, 40, 1.1e-9, 1e-9), (?, 2, 40, 1.1e-11, 1e-11), (?, 3, 40, 3.1e-10, 3e-10)`, hid, hid, hid)
			m := storetest.NewMeter(b, st.DB().DB)
			b.SetParallelism(8)
			b.StopTimer()
			b.ResetTimer()
			m.Start(b)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if f, err := st.UserHostHeldGet(ctx, "k", hid, 1000); err != nil || len(f.Held) != 1 {
						b.Error(err, len(f.Held))
						return
					}
				}
			})
			m.Stop(b)
			m.Report(b, b.N, "op")
		})
	}
}

// TestUserHostHeldList checks that the shared read gives every key what
// UserHostHeldGet gives it alone, whatever the other keys in the batch.
func TestUserHostHeldList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.NewDatabase(t), store.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	appID := storetest.App(t, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
	wu := storetest.Job(t, st, storetest.JobOptions{CreateTime: 1, App: appID, Name: "wu",
		TransitionTime: state.NoTransition, DelayBound: 100, RscFpopsEst: 1e9}).ID
	var hosts []int64
	for _, a := range []string{"ka", "kb"} {
		uid := storetest.User(t, st, storetest.UserOptions{CreateTime: 1, EmailAddr: a + "@example.com", Name: a, Authenticator: a}).ID
		for h := 0; h < 2; h++ {
			hid := storetest.Host(t, st, storetest.HostOptions{CreateTime: 1, User: uid, PNCPUs: h + 1}).ID
			hosts = append(hosts, hid)
			// Host h holds h+1 instances in progress and one over.
			for i := 0; i <= h+1; i++ {
				s := state.ServerInProgress
				if i == 0 {
					s = state.ServerOver
				}
				id := storetest.Instance(t, st, storetest.InstanceOptions{CreateTime: 1, Job: wu, ServerState: s,
					Name: a + string(rune('0'+h)) + "_" + string(rune('0'+i)), XMLDocIn: "<file_info/>"}).ID
				storetest.Exec(t, st, `UPDATE result SET hostid = ?, sent_time = 5, report_deadline = 105 WHERE id = ?`, hid, id)
			}
		}
	}
	keys := []store.AuthHost{
		{Auth: "ka", HostID: hosts[0], WantHeld: true},
		{Auth: "ka", HostID: hosts[1], WantHeld: true},
		{Auth: "kb", HostID: hosts[3], WantHeld: true},
		{Auth: "kb", HostID: hosts[0], WantHeld: true}, // another user's host
		{Auth: "kb", HostID: hosts[2]},                 // no instances asked
		{Auth: "ka", HostID: 0, WantHeld: true},
		{Auth: "ka", HostID: 99999, WantHeld: true},
		{Auth: "nosuch", HostID: hosts[1], WantHeld: true},
		{Auth: "KA", HostID: hosts[1], WantHeld: true}, // the collation ignores case
	}
	got, err := st.UserHostHeldList(ctx, keys, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(keys) {
		t.Fatalf("%d answers for %d keys", len(got), len(keys))
	}
	for i, k := range keys {
		one, err := st.UserHostHeldGet(ctx, k.Auth, k.HostID, 1000)
		u, h, found, held := one.User, one.Host, one.HostFound, one.Held
		if errors.Is(err, store.ErrNotFound) {
			if got[i].UserFound {
				t.Errorf("key %d %+v: user found, UserHostHeldGet says none", i, k)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if !k.WantHeld {
			held = nil
		}
		g := got[i]
		if !g.UserFound || g.User != u || g.Host != h || g.HostFound != found || !slices.Equal(g.Held, held) {
			t.Errorf("key %d %+v: got %+v, UserHostHeldGet says %+v %+v %v %+v", i, k, g, u, h, found, held)
		}
	}
	limited, err := st.UserHostHeldList(ctx, keys[1:3], 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range limited {
		if len(g.Held) != 1 {
			t.Errorf("limit 1, key %d: %d instances", i, len(g.Held))
		}
	}
}

// TestReadsSayWhetherTrickleDownsWait: the account reads a scheduler
// request starts with say whether trickle-down messages wait for the host
// (queued, not yet delivered), so that a host with none costs no read of
// them; a host not found has none.
func TestReadsSayWhetherTrickleDownsWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.NewDatabase(t), store.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	uid := storetest.User(t, st, storetest.UserOptions{CreateTime: 1, EmailAddr: "a@example.com", Name: "a", Authenticator: "k"}).ID
	waiting := storetest.Host(t, st, storetest.HostOptions{CreateTime: 1, User: uid}).ID
	delivered := storetest.Host(t, st, storetest.HostOptions{CreateTime: 1, User: uid}).ID
	none := storetest.Host(t, st, storetest.HostOptions{CreateTime: 1, User: uid}).ID
	for _, h := range []int64{waiting, delivered} {
		if _, err := st.MsgToHostInsert(ctx, row.MsgToHost{CreateTime: 1, HostID: h, Variety: "v", XML: "<trickle_down/>"}); err != nil {
			t.Fatal(err)
		}
	}
	if msgs, err := st.MsgToHostTake(ctx, delivered, 10); err != nil || len(msgs) != 1 {
		t.Fatalf("MsgToHostTake = %d messages, %v; want the one queued", len(msgs), err)
	}
	want := map[int64]bool{waiting: true, delivered: false, none: false, 99999: false}
	var keys []store.AuthHost
	for h := range want {
		keys = append(keys, store.AuthHost{Auth: "k", HostID: h, WantHeld: h != none})
	}
	list, err := st.UserHostHeldList(ctx, keys, 100)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		one, err := st.UserHostHeldGet(ctx, "k", k.HostID, 100)
		if err != nil {
			t.Fatal(err)
		}
		plain, err := st.UserHostGet(ctx, "k", k.HostID)
		if err != nil {
			t.Fatal(err)
		}
		for name, got := range map[string]bool{"UserHostHeldList": list[i].TrickleDownQueued,
			"UserHostHeldGet": one.TrickleDownQueued, "UserHostGet": plain.TrickleDownQueued} {
			if got != want[k.HostID] {
				t.Errorf("%s, host %d: TrickleDownQueued = %v, want %v", name, k.HostID, got, want[k.HostID])
			}
		}
	}
}
