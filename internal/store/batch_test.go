package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

type batchFixture struct {
	st    *store.Store
	appID int64
}

func newBatchFixture(t *testing.T) *batchFixture {
	t.Helper()
	st := storetest.New(t)
	appID := storetest.App(t, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
	return &batchFixture{st: st, appID: appID}
}

// job is a workunit row factory with the fields the tests care about.
func (f *batchFixture) job(name string) row.Workunit {
	return row.Workunit{CreateTime: 1, AppID: f.appID, Name: name, MinQuorum: 1, TargetNResults: 1,
		MaxErrorResults: 3, MaxTotalResults: 6, MaxSuccessResults: 2, TransitionTime: 100}
}

// insert makes batch name with n jobs named <name>_<i>, for user, with key.
func (f *batchFixture) insert(t *testing.T, name string, user int64, key string, n int) row.Batch {
	t.Helper()
	var wus []row.Workunit
	for i := range n {
		wus = append(wus, f.job(fmt.Sprintf("%s_%d", name, i)))
	}
	b, created, err := f.st.BatchInsertWithJobs(context.Background(), store.BatchInsertParams{
		Batch: row.Batch{CreateTime: 10, AppID: f.appID, UserID: user, Name: name, IdempotencyKey: key}, Jobs: wus})
	if err != nil || !created {
		t.Fatalf("BatchInsertWithJobs(%s) = %+v, %v, %v; want created", name, b, created, err)
	}
	return b
}

func (f *batchFixture) jobs(t *testing.T, batch int64) []row.Workunit {
	t.Helper()
	wus, err := f.st.WorkunitListByBatch(context.Background(), batch, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return wus
}

func TestBatchInsertWithJobs(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	ctx := context.Background()
	extra := f.job("ka_1_x")
	extra.KnownAnswerID = 7
	b, created, err := f.st.BatchInsertWithJobs(ctx, store.BatchInsertParams{
		Batch: row.Batch{CreateTime: 10, AppID: f.appID, UserID: 3, Name: "b1", Description: "first", IdempotencyKey: "k1",
			State: row.BatchDone, NJobs: 99},
		Jobs:  []row.Workunit{f.job("b1_a"), f.job("b1_b")},
		Extra: []row.Workunit{extra},
	})
	if err != nil || !created || b.ID == 0 || b.NJobs != 2 || b.State != row.BatchInProgress {
		t.Fatalf("BatchInsertWithJobs = %+v, %v, %v; want created, 2 jobs, in progress", b, created, err)
	}
	got, err := f.st.BatchGet(ctx, b.ID)
	if err != nil || got != b {
		t.Fatalf("BatchGet = %+v, %v; want %+v", got, err, b)
	}
	if got, err := f.st.BatchGetByName(ctx, "b1"); err != nil || got != b {
		t.Fatalf("BatchGetByName = %+v, %v", got, err)
	}
	if got, err := f.st.BatchGetByKey(ctx, 3, "k1"); err != nil || got != b {
		t.Fatalf("BatchGetByKey = %+v, %v", got, err)
	}
	for _, tc := range []struct {
		user int64
		key  string
	}{{4, "k1"}, {3, "k2"}, {3, ""}} {
		if _, err := f.st.BatchGetByKey(ctx, tc.user, tc.key); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("BatchGetByKey(%d, %q) = %v, want ErrNotFound", tc.user, tc.key, err)
		}
	}
	wus := f.jobs(t, b.ID)
	if len(wus) != 2 || wus[0].Name != "b1_a" || wus[1].Name != "b1_b" {
		t.Fatalf("jobs of batch = %+v, want b1_a, b1_b", wus)
	}
	ka, err := f.st.WorkunitGetByName(ctx, "ka_1_x")
	if err != nil || ka.Batch != 0 || ka.KnownAnswerID != 7 {
		t.Fatalf("extra job = %+v, %v; want batch 0, known answer 7", ka, err)
	}

	// The same key again: the first batch back, nothing written.
	again, created, err := f.st.BatchInsertWithJobs(ctx, store.BatchInsertParams{
		Batch: row.Batch{CreateTime: 11, AppID: f.appID, UserID: 3, Name: "b1-retry", IdempotencyKey: "k1"},
		Jobs:  []row.Workunit{f.job("b1r_a")},
	})
	if err != nil || created || again != b {
		t.Fatalf("insert with a used key = %+v, %v, %v; want the first batch, not created", again, created, err)
	}
	if _, err := f.st.WorkunitGetByName(ctx, "b1r_a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("job of the refused retry = %v, want ErrNotFound", err)
	}
	// A taken name, or a taken job name, with a fresh key: ErrDuplicate.
	for _, p := range []store.BatchInsertParams{
		{Batch: row.Batch{AppID: f.appID, UserID: 3, Name: "b1", IdempotencyKey: "k9"}},
		{Batch: row.Batch{AppID: f.appID, UserID: 3, Name: "b2", IdempotencyKey: "k9"}, Jobs: []row.Workunit{f.job("b1_a")}},
	} {
		if _, _, err := f.st.BatchInsertWithJobs(ctx, p); !errors.Is(err, store.ErrDuplicate) {
			t.Errorf("BatchInsertWithJobs(%s with job %v) = %v, want ErrDuplicate", p.Batch.Name, p.Jobs, err)
		}
	}
	if _, err := f.st.BatchGetByName(ctx, "b2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("batch b2 after its failed insert: %v, want ErrNotFound (rolled back)", err)
	}
	// Without keys, batches of one user never collide on the key.
	f.insert(t, "nokey1", 3, "", 1)
	f.insert(t, "nokey2", 3, "", 1)
}

func TestBatchInsertConcurrentSameKeyMakesOne(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	ctx := context.Background()
	const n = 4
	var wg sync.WaitGroup
	got := make([]row.Batch, n)
	created := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			got[i], created[i], errs[i] = f.st.BatchInsertWithJobs(ctx, store.BatchInsertParams{
				Batch: row.Batch{AppID: f.appID, UserID: 5, Name: fmt.Sprintf("race%d", i), IdempotencyKey: "same"},
				Jobs:  []row.Workunit{f.job(fmt.Sprintf("race%d_a", i))},
			})
		})
	}
	wg.Wait()
	made := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("submission %d: %v", i, errs[i])
		}
		if created[i] {
			made++
		}
		if got[i] != got[0] {
			t.Fatalf("submission %d got batch %+v, submission 0 got %+v; want the same", i, got[i], got[0])
		}
	}
	if made != 1 {
		t.Fatalf("%d submissions created a batch, want exactly 1", made)
	}
	var jobs int
	if err := f.st.DB().Get(&jobs, `SELECT COUNT(*) FROM workunit`); err != nil || jobs != 1 {
		t.Fatalf("jobs after the race = %d, %v; want 1", jobs, err)
	}
}

func TestBatchListAndCounts(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	ctx := context.Background()
	b1 := f.insert(t, "b1", 1, "", 6)
	b2 := f.insert(t, "b2", 2, "", 1)
	b3 := f.insert(t, "b3", 1, "", 0)
	wus := f.jobs(t, b1.ID)
	// b1_0 done and assimilated, b1_1 failed, b1_2 cancelled, b1_3 held,
	// b1_4 and b1_5 pending.
	mustExec(t, f.st, `UPDATE workunit SET canonical_resultid = 1, canonical_credit = 2.5, assimilate_state = ? WHERE id = ?`,
		state.AssimilateDone, wus[0].ID)
	mustExec(t, f.st, `UPDATE workunit SET error_mask = ? WHERE id = ?`, state.ErrTooManyErrorResults, wus[1].ID)
	mustExec(t, f.st, `UPDATE workunit SET error_mask = ? WHERE id = ?`, state.ErrCancelled, wus[2].ID)
	mustExec(t, f.st, `UPDATE workunit SET hold_reason = ? WHERE id = ?`, state.ErrTooManyTotalResults, wus[3].ID)
	for i, s := range []state.ServerState{state.ServerUnsent, state.ServerInProgress, state.ServerInProgress, state.ServerOver} {
		storetest.Instance(t, f.st, storetest.InstanceOptions{CreateTime: 1, Job: wus[4].ID, Name: fmt.Sprintf("r%d", i),
			ServerState: s, Batch: b1.ID})
	}

	counts, err := f.st.BatchCountJobs(ctx, []int64{b1.ID, b2.ID, b3.ID})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]store.BatchCounts{
		b1.ID: {Jobs: 6, Done: 1, Errored: 2, Cancelled: 1, Held: 1, Pending: 2, Assimilated: 1, Credit: 2.5,
			Unsent: 1, InProgress: 2, Over: 1},
		b2.ID: {Jobs: 1, Pending: 1},
		b3.ID: {},
	}
	for id, w := range want {
		if counts[id] != w {
			t.Errorf("BatchCountJobs[%d] = %+v, want %+v", id, counts[id], w)
		}
	}
	if c, err := f.st.BatchCountJobs(ctx, nil); err != nil || len(c) != 0 {
		t.Errorf("BatchCountJobs(nil) = %v, %v; want empty", c, err)
	}

	mustExec(t, f.st, `UPDATE batch SET state = ? WHERE id = ?`, row.BatchDone, b3.ID)
	for _, tc := range []struct {
		name string
		p    store.BatchListParams
		want []int64
	}{
		{"all users", store.BatchListParams{AllUsers: true}, []int64{b1.ID, b2.ID, b3.ID}},
		{"one user", store.BatchListParams{UserID: 1}, []int64{b1.ID, b3.ID}},
		{"one state", store.BatchListParams{AllUsers: true, State: row.BatchDone}, []int64{b3.ID}},
		{"paged", store.BatchListParams{AllUsers: true, AfterID: b1.ID, Limit: 1}, []int64{b2.ID}},
	} {
		got, err := f.st.BatchList(ctx, tc.p)
		var ids []int64
		for _, b := range got {
			ids = append(ids, b.ID)
		}
		if err != nil || fmt.Sprint(ids) != fmt.Sprint(tc.want) {
			t.Errorf("BatchList(%s) = %v, %v; want %v", tc.name, ids, err, tc.want)
		}
	}
}

func mustExec(t *testing.T, st *store.Store, q string, args ...any) {
	t.Helper()
	if _, err := st.DB().Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func TestWorkunitCancel(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	ctx := context.Background()
	b := f.insert(t, "b", 1, "", 4)
	wus := f.jobs(t, b.ID)
	mustExec(t, f.st, `UPDATE workunit SET hold_reason = ?, transition_time = ? WHERE id = ?`,
		state.ErrTooManyErrorResults, state.NoTransition, wus[0].ID)
	mustExec(t, f.st, `UPDATE workunit SET canonical_resultid = 9 WHERE id = ?`, wus[1].ID)
	mustExec(t, f.st, `UPDATE workunit SET assimilate_state = ? WHERE id = ?`, state.AssimilateReady, wus[2].ID)

	if err := f.st.WorkunitCancel(ctx, wus[0].ID, 500); err != nil {
		t.Fatalf("WorkunitCancel(held job): %v", err)
	}
	got, _ := f.st.WorkunitGet(ctx, wus[0].ID)
	if got.ErrorMask != state.ErrCancelled || got.HoldReason != 0 || got.TransitionTime != 500 || got.ModTime != 500 {
		t.Fatalf("cancelled held job = mask %v hold %v transition %d; want cancelled, not held, triggered at 500",
			got.ErrorMask, got.HoldReason, got.TransitionTime)
	}
	if err := f.st.WorkunitCancel(ctx, wus[3].ID, 500); err != nil {
		t.Fatalf("WorkunitCancel(pending job): %v", err)
	}
	if got, _ := f.st.WorkunitGet(ctx, wus[3].ID); got.TransitionTime != 99 {
		t.Fatalf("cancelled job due at 100 has transition_time %d, want 99 (moved, so the transitioner's guard sees it)",
			got.TransitionTime)
	}
	for _, tc := range []struct {
		name string
		id   int64
	}{{"with a canonical result", wus[1].ID}, {"ready for assimilation", wus[2].ID}, {"cancelled already", wus[0].ID}} {
		if err := f.st.WorkunitCancel(ctx, tc.id, 600); !errors.Is(err, store.ErrConflict) {
			t.Errorf("WorkunitCancel(job %s) = %v, want ErrConflict", tc.name, err)
		}
	}
}

func TestBatchCancel(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	ctx := context.Background()
	b := f.insert(t, "b", 1, "", 1203) // more than two chunks
	other := f.insert(t, "other", 1, "", 2)
	wus := f.jobs(t, b.ID)
	mustExec(t, f.st, `UPDATE workunit SET canonical_resultid = 9 WHERE id = ?`, wus[7].ID)

	n, err := f.st.BatchCancel(ctx, b.ID, 500)
	if err != nil || n != 1202 {
		t.Fatalf("BatchCancel = %d, %v; want 1202 jobs", n, err)
	}
	got, _ := f.st.BatchGet(ctx, b.ID)
	if got.State != row.BatchCancelled || got.CancelTime != 500 {
		t.Fatalf("batch after cancel = %+v; want cancelled at 500", got)
	}
	c, _ := f.st.BatchCountJobs(ctx, []int64{b.ID, other.ID})
	if c[b.ID].Cancelled != 1202 || c[other.ID].Cancelled != 0 {
		t.Fatalf("cancelled counts = %d in the batch, %d in another; want 1202, 0", c[b.ID].Cancelled, c[other.ID].Cancelled)
	}
	// Again: allowed, changes nothing, keeps the first cancel time.
	if n, err := f.st.BatchCancel(ctx, b.ID, 700); err != nil || n != 0 {
		t.Fatalf("second BatchCancel = %d, %v; want 0, nil", n, err)
	}
	if got, _ := f.st.BatchGet(ctx, b.ID); got.CancelTime != 500 {
		t.Fatalf("cancel time after a second cancel = %d, want 500", got.CancelTime)
	}
	mustExec(t, f.st, `UPDATE batch SET state = ? WHERE id = ?`, row.BatchDone, other.ID)
	if _, err := f.st.BatchCancel(ctx, other.ID, 700); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("BatchCancel(done batch) = %v, want ErrConflict", err)
	}
	if _, err := f.st.BatchCancel(ctx, other.ID+1000, 700); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("BatchCancel(missing batch) = %v, want ErrNotFound", err)
	}
}

func TestWorkunitRequeue(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	ctx := context.Background()
	b := f.insert(t, "b", 1, "", 4)
	other := f.insert(t, "other", 1, "", 1)
	wus := append(f.jobs(t, b.ID), f.jobs(t, other.ID)...)
	hold := func(i int, reason state.ErrorMask) {
		mustExec(t, f.st, `UPDATE workunit SET hold_reason = ?, hold_time = 50, transition_time = ? WHERE id = ?`,
			reason, state.NoTransition, wus[i].ID)
	}
	hold(0, state.ErrTooManyErrorResults)
	hold(1, state.ErrTooManyTotalResults)
	hold(2, state.ErrTooManyErrorResults|state.ErrTooManyTotalResults)
	hold(4, state.ErrTooManyErrorResults)

	if err := f.st.WorkunitRequeue(ctx, wus[0].ID, 500); err != nil {
		t.Fatalf("WorkunitRequeue(held): %v", err)
	}
	got, _ := f.st.WorkunitGet(ctx, wus[0].ID)
	if got.HoldReason != 0 || got.HoldTime != 0 || got.MaxErrorResults != 6 || got.MaxTotalResults != 12 ||
		got.MaxSuccessResults != 4 || got.TransitionTime != 500 {
		t.Fatalf("requeued job = %+v; want released, limits doubled, triggered at 500", got)
	}
	if err := f.st.WorkunitRequeue(ctx, wus[3].ID, 500); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("WorkunitRequeue(not held) = %v, want ErrConflict", err)
	}

	// By reason within the batch: job 2 has the bit too; job 4 is elsewhere.
	n, err := f.st.WorkunitRequeueBatch(ctx, b.ID, state.ErrTooManyTotalResults, 600)
	if err != nil || n != 2 {
		t.Fatalf("WorkunitRequeueBatch(too many total) = %d, %v; want 2", n, err)
	}
	if n, err := f.st.WorkunitRequeueBatch(ctx, b.ID, 0, 600); err != nil || n != 0 {
		t.Fatalf("WorkunitRequeueBatch(any) after all were released = %d, %v; want 0", n, err)
	}
	if n, err := f.st.WorkunitRequeueReason(ctx, state.ErrTooManyErrorResults, 600); err != nil || n != 1 {
		t.Fatalf("WorkunitRequeueReason(too many errors) = %d, %v; want 1 (the other batch's job)", n, err)
	}
	if got, _ := f.st.WorkunitGet(ctx, wus[4].ID); got.HoldReason != 0 || got.MaxErrorResults != 6 {
		t.Fatalf("job requeued by reason = %+v", got)
	}
	if _, err := f.st.WorkunitRequeueReason(ctx, 0, 600); err == nil {
		t.Fatal("WorkunitRequeueReason(0) succeeded, want an error")
	}
}

func TestKnownAnswers(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	ctx := context.Background()
	id1, err := f.st.KnownAnswerInsert(ctx, row.KnownAnswer{CreateTime: 1, AppID: f.appID, Name: "k1",
		Input: []byte("in1"), Output: []byte("out1")})
	if err != nil {
		t.Fatal(err)
	}
	id2, err := f.st.KnownAnswerInsert(ctx, row.KnownAnswer{CreateTime: 2, AppID: f.appID, Name: "k2"})
	if err != nil {
		t.Fatalf("KnownAnswerInsert with empty input and output: %v", err)
	}
	if _, err := f.st.KnownAnswerInsert(ctx, row.KnownAnswer{AppID: f.appID, Name: "k1"}); !errors.Is(err, store.ErrDuplicate) {
		t.Fatalf("KnownAnswerInsert(name taken) = %v, want ErrDuplicate", err)
	}
	list, err := f.st.KnownAnswerList(ctx, f.appID)
	if err != nil || len(list) != 2 || list[0].ID != id1 || list[0].Name != "k1" || list[0].Input != nil || list[1].ID != id2 {
		t.Fatalf("KnownAnswerList = %+v, %v; want k1, k2 without blobs", list, err)
	}
	if list, err := f.st.KnownAnswerList(ctx, f.appID+1); err != nil || len(list) != 0 {
		t.Fatalf("KnownAnswerList(other app) = %+v, %v; want none", list, err)
	}
	in, err := f.st.KnownAnswerListInputs(ctx, []int64{id1, id2 + 100})
	if err != nil || len(in) != 1 || string(in[0].Input) != "in1" || in[0].Output != nil {
		t.Fatalf("KnownAnswerListInputs = %+v, %v; want k1's input only", in, err)
	}
}

func TestAppUpdateAndSubmitAllowed(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	ctx := context.Background()
	a, err := f.st.AppGet(ctx, f.appID)
	if err != nil || a.Name != "demo" {
		t.Fatalf("AppGet = %+v, %v", a, err)
	}
	a.AdaptiveReplication, a.CreditPolicy, a.HoldFailedJobs, a.KnownAnswerFraction = true, row.CreditMedian, true, 0.25
	a.HomogeneousRedundancy, a.Weight = 2, 3
	if err := f.st.AppUpdate(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.st.AppGet(ctx, f.appID); got != a {
		t.Fatalf("app after AppUpdate = %+v, want %+v", got, a)
	}
	if err := f.st.AppUpdate(ctx, a); err != nil {
		t.Fatalf("AppUpdate changing nothing: %v", err)
	}
	a.ID += 100
	if err := f.st.AppUpdate(ctx, a); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("AppUpdate(missing) = %v, want ErrNotFound", err)
	}
	if _, err := f.st.AppGet(ctx, a.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("AppGet(missing) = %v, want ErrNotFound", err)
	}

	uid := storetest.User(t, f.st, storetest.UserOptions{CreateTime: 1, EmailAddr: "a@example.org", Name: "A", Authenticator: "x"}).ID
	if err := f.st.UserSetSubmitAllowed(ctx, uid, true); err != nil {
		t.Fatal(err)
	}
	if u, _ := f.st.UserGet(ctx, uid); !u.SubmitAllowed {
		t.Fatal("submit_allowed not set")
	}
	if err := f.st.UserSetSubmitAllowed(ctx, uid+100, true); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("UserSetSubmitAllowed(missing) = %v, want ErrNotFound", err)
	}
}
