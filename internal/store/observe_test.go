package store_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// recorder is an Observer keeping every call.
type recorder struct {
	mu    sync.Mutex
	calls []call
}

type call struct {
	op  string
	d   time.Duration
	err error
}

func (r *recorder) observe(op string, d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call{op, d, err})
}

// take returns the calls so far and forgets them.
func (r *recorder) take() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

func openObserved(t *testing.T) (*store.Store, *recorder) {
	t.Helper()
	dsn := storetest.NewDatabase(t)
	rec := &recorder{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, dsn, store.Options{MaxOpenConns: 2, Observer: rec.observe})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st, rec
}

func TestObserverNamesTheStoreMethod(t *testing.T) {
	t.Parallel()
	st, rec := openObserved(t)
	ctx := context.Background()
	appID := storetest.App(t, st, storetest.AppOptions{Name: "obs", UserFriendlyName: "Obs", Weight: 1}).ID
	rec.take()
	_, err := st.AppGetByName(ctx, "no such app")
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("AppGetByName(unknown) = %v, want ErrNotFound", err)
	}
	_, _ = st.WorkunitCountDue(ctx, store.BacklogCountParams{Now: 1, Limit: 10})
	if err := st.WorkunitInsertBatch(ctx, []row.Workunit{{AppID: appID, Name: "obs_wu", TransitionTime: 1}}, nil); err != nil {
		t.Fatal(err)
	}
	// A streaming query and a transaction.
	if _, err := st.WorkunitListDue(ctx, store.WorkunitListDueParams{Now: 2, Mod: 1, Limit: 10}); err != nil {
		t.Fatal(err)
	}
	calls := rec.take()
	var ops []string
	for _, c := range calls {
		ops = append(ops, c.op)
		if c.d <= 0 {
			t.Errorf("call %s took %v, want > 0", c.op, c.d)
		}
	}
	got := strings.Join(ops, ",")
	for _, want := range []string{"AppGetByName", "WorkunitCountDue", "WorkunitInsertBatch", "WorkunitListDue"} {
		if !strings.Contains(got, want) {
			t.Errorf("observed ops %q lack %s", got, want)
		}
	}
	if strings.Contains(got, store.OpOther) {
		t.Errorf("observed ops %q: a call was not traced to its Store method", got)
	}
	if calls[0].op != "AppGetByName" || store.QueryFailed(calls[0].err) || calls[0].err == nil {
		t.Errorf("first call = %s err %v, want AppGetByName with a not-found error that QueryFailed rejects", calls[0].op, calls[0].err)
	}
}

func TestObserverCountsFailures(t *testing.T) {
	t.Parallel()
	st, rec := openObserved(t)
	ctx := context.Background()
	storetest.Exec(t, st, "DROP TABLE workunit")
	rec.take()
	if _, err := st.WorkunitCountDue(ctx, store.BacklogCountParams{Now: 1, Limit: 10}); err == nil {
		t.Fatal("WorkunitCountDue on a dropped table succeeded")
	}
	calls := rec.take()
	if len(calls) != 1 || calls[0].op != "WorkunitCountDue" || !store.QueryFailed(calls[0].err) || !store.IsDBError(calls[0].err) {
		t.Fatalf("calls = %+v, want one failed WorkunitCountDue with a database error", calls)
	}
}

func TestBacklogCounts(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	app1 := storetest.App(t, st, storetest.AppOptions{Name: "a1", UserFriendlyName: "A1", Weight: 1}).ID
	app2 := storetest.App(t, st, storetest.AppOptions{Name: "a2", UserFriendlyName: "A2", Weight: 1}).ID
	wu := func(app int64, name string, tt int64, nv bool, as state.AssimilateState, fd state.FileDeleteState) int64 {
		id := storetest.Job(t, st, storetest.JobOptions{App: app, Name: name, TransitionTime: tt, NeedValidate: nv,
			AssimilateState: as, FileDeleteState: fd}).ID
		return id
	}
	w1 := wu(app1, "w1", 100, true, state.AssimilateReady, state.FileDeleteInit)
	wu(app1, "w2", 200, true, state.AssimilateInit, state.FileDeleteReady)
	wu(app1, "w3", 300, false, state.AssimilateReady, state.FileDeleteReady)
	wu(app2, "w4", 1<<30, true, state.AssimilateReady, state.FileDeleteReady)
	for i, ss := range []state.ServerState{state.ServerUnsent, state.ServerUnsent, state.ServerInProgress} {
		fd := state.FileDeleteInit
		if i == 2 {
			fd = state.FileDeleteReady
		}
		storetest.Instance(t, st, storetest.InstanceOptions{Job: w1, App: app1, Name: "r" + string(rune('a'+i)),
			ServerState: ss, FileDeleteState: fd})
	}
	for _, tc := range []struct {
		name  string
		count func(store.BacklogCountParams) (int64, error)
		p     store.BacklogCountParams
		want  int64
	}{
		{"due by 250", func(p store.BacklogCountParams) (int64, error) { return st.WorkunitCountDue(ctx, p) }, store.BacklogCountParams{Now: 250, Limit: 100}, 2},
		{"due, capped", func(p store.BacklogCountParams) (int64, error) { return st.WorkunitCountDue(ctx, p) }, store.BacklogCountParams{Now: 250, Limit: 1}, 1},
		{"unsent", func(p store.BacklogCountParams) (int64, error) { return st.ResultCountUnsent(ctx, p) }, store.BacklogCountParams{Limit: 100}, 2},
		{"need validate app1", func(p store.BacklogCountParams) (int64, error) { return st.WorkunitCountNeedValidate(ctx, p) }, store.BacklogCountParams{AppID: app1, Limit: 100}, 2},
		{"assimilate ready app1", func(p store.BacklogCountParams) (int64, error) { return st.WorkunitCountAssimilateReady(ctx, p) }, store.BacklogCountParams{AppID: app1, Limit: 100}, 2},
		{"workunit files", func(p store.BacklogCountParams) (int64, error) { return st.WorkunitCountFileDeleteReady(ctx, p) }, store.BacklogCountParams{Limit: 100}, 3},
		{"result files", func(p store.BacklogCountParams) (int64, error) { return st.ResultCountFileDeleteReady(ctx, p) }, store.BacklogCountParams{Limit: 100}, 1},
	} {
		got, err := tc.count(tc.p)
		if err != nil || got != tc.want {
			t.Errorf("%s: count(%+v) = %d, %v; want %d", tc.name, tc.p, got, err, tc.want)
		}
	}
	if _, err := st.ResultCountUnsent(ctx, store.BacklogCountParams{}); err == nil {
		t.Error("ResultCountUnsent with limit 0 succeeded, want an error")
	}
}

// TestBacklogCountsReadOnlyAnIndex keeps the backlog gauges cheap: each
// count must be answered from an index alone, never a scan of the table.
func TestBacklogCountsReadOnlyAnIndex(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	for _, tc := range []struct{ query, key string }{
		{`SELECT 1 FROM workunit WHERE transition_time <= 5 LIMIT 1000`, "wu_transition_time"},
		{`SELECT 1 FROM result WHERE server_state = 2 LIMIT 1000`, "res_"},
		{`SELECT 1 FROM workunit WHERE appid = 1 AND need_validate = 1 LIMIT 1000`, "wu_need_validate"},
		{`SELECT 1 FROM workunit WHERE appid = 1 AND assimilate_state = 1 LIMIT 1000`, "wu_assimilate"},
		{`SELECT 1 FROM workunit WHERE file_delete_state = 1 LIMIT 1000`, "wu_"},
		{`SELECT 1 FROM result WHERE file_delete_state = 1 LIMIT 1000`, "res_file_delete"},
	} {
		rows, err := st.DB().Queryx("EXPLAIN " + tc.query)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			m := map[string]any{}
			if err := rows.MapScan(m); err != nil {
				t.Fatal(err)
			}
			key, _ := m["key"].([]byte)
			extra, _ := m["Extra"].([]byte)
			if !strings.HasPrefix(string(key), tc.key) || !strings.Contains(string(extra), "Using index") {
				t.Errorf("EXPLAIN %s: key %q extra %q, want key %s* and Using index", tc.query, key, extra, tc.key)
			}
		}
		rows.Close()
	}
}
