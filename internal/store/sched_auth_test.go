package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"

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
			must := func(id int64, err error) int64 {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
				return id
			}
			appID := must(st.AppInsert(ctx, store.App{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1}))
			uid := must(st.UserInsert(ctx, store.User{CreateTime: 1, EmailAddr: "a@example.com", Name: "a", Authenticator: "k"}))
			busy := must(st.HostInsert(ctx, store.Host{CreateTime: 1, UserID: uid, OSName: "Linux", PFpops: 1e9}))
			idle := must(st.HostInsert(ctx, store.Host{CreateTime: 1, UserID: uid}))
			wu := must(st.WorkunitInsert(ctx, store.Workunit{CreateTime: 1, AppID: appID, Name: "wu",
				TransitionTime: state.NoTransition, DelayBound: 100, RscFpopsEst: 1e9}))
			for i, s := range []state.ServerState{state.ServerInProgress, state.ServerOver, state.ServerInProgress} {
				id := must(st.ResultInsert(ctx, store.Result{CreateTime: 1, WorkunitID: wu, ServerState: s,
					Name: "wu_" + string(rune('0'+i)), XMLDocIn: "<file_info/>"}))
				storetest.Exec(t, st, `UPDATE result SET hostid = ?, sent_time = 5, report_deadline = 105 WHERE id = ?`, busy, id)
			}

			for _, tc := range []struct {
				name   string
				hostID int64
				limit  int
			}{{"busy host", busy, 1000}, {"busy host, limit 1", busy, 1}, {"idle host", idle, 1000},
				{"no such host", 9999, 1000}, {"no host", 0, 1000}} {
				u, h, found, held, err := st.UserHostHeldGet(ctx, "k", tc.hostID, tc.limit)
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				wu, wh, wfound, err := st.UserHostGet(ctx, "k", tc.hostID)
				if err != nil {
					t.Fatal(err)
				}
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
			if _, _, _, _, err := st.UserHostHeldGet(ctx, "nosuch", busy, 1000); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("unknown authenticator: err = %v, want ErrNotFound", err)
			}
		})
	}
}
