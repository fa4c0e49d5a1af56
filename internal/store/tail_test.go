package store_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

const tailNow = 1_700_000_000

// tailBundle is a test database with one app, and helpers to make batches,
// jobs and instances.
type tailBundle struct {
	st    *store.Store
	appID int64
	n     int
}

func tailSetup(t *testing.T) *tailBundle {
	t.Helper()
	st := storetest.New(t)
	appID := storetest.App(t, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
	return &tailBundle{st: st, appID: appID}
}

func (b *tailBundle) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	storetest.Exec(t, b.st, q, args...)
}

func (b *tailBundle) batch(t *testing.T, st row.BatchState) int64 {
	t.Helper()
	b.n++
	res, err := b.st.DB().ExecContext(context.Background(),
		`INSERT INTO batch (create_time, appid, name, state) VALUES (?, ?, ?, ?)`, 1, b.appID, fmt.Sprintf("b%d", b.n), st)
	if err != nil {
		t.Fatalf("insert batch: %v", err)
	}
	id, _ := res.LastInsertId()
	return id
}

// job inserts an unfinished job of batch with quorum 1, delay_bound 1000.
func (b *tailBundle) job(t *testing.T, batch int64, mod ...func(*storetest.JobOptions)) int64 {
	t.Helper()
	b.n++
	wu := storetest.JobOptions{CreateTime: 1, App: b.appID, Name: fmt.Sprintf("j%d", b.n), Batch: batch, DelayBound: 1000,
		MinQuorum: 1, TargetNResults: 1, MaxErrorResults: 3, MaxTotalResults: 6, MaxSuccessResults: 3,
		TransitionTime: state.NoTransition}
	for _, m := range mod {
		m(&wu)
	}
	id := storetest.Job(t, b.st, wu).ID
	return id
}

// instance inserts an instance of job wuID in server state ss sent at sent.
func (b *tailBundle) instance(t *testing.T, wuID int64, ss state.ServerState, sent int64) {
	t.Helper()
	b.n++
	storetest.Instance(t, b.st, storetest.InstanceOptions{CreateTime: 1, Job: wuID, ServerState: ss,
		Name: fmt.Sprintf("r%d", b.n), SentTime: sent, ReportDeadline: sent + 1000})
}

func TestBatchListProgress(t *testing.T) {
	t.Parallel()
	b := tailSetup(t)
	ctx := context.Background()
	mixed := b.batch(t, row.BatchInProgress)
	b.job(t, mixed)
	b.job(t, mixed, func(wu *storetest.JobOptions) { wu.CanonicalResultID = 99; wu.AssimilateState = state.AssimilateReady })
	b.job(t, mixed, func(wu *storetest.JobOptions) { wu.AssimilateState = state.AssimilateDone })
	b.job(t, mixed, func(wu *storetest.JobOptions) { wu.HoldReason = state.ErrTooManyErrorResults })
	b.job(t, mixed, func(wu *storetest.JobOptions) { wu.ErrorMask = state.ErrCancelled })
	empty := b.batch(t, row.BatchInProgress)
	done := b.batch(t, row.BatchDone)
	b.job(t, done, func(wu *storetest.JobOptions) { wu.AssimilateState = state.AssimilateDone })
	finished := b.batch(t, row.BatchInProgress)
	b.job(t, finished, func(wu *storetest.JobOptions) { wu.AssimilateState = state.AssimilateDone })
	b.job(t, 0) // no batch

	got, err := b.st.BatchListProgress(ctx, store.BatchListProgressParams{Limit: 10})
	if err != nil {
		t.Fatalf("BatchListProgress: %v", err)
	}
	want := []store.BatchProgress{
		{ID: mixed, NJobs: 5, Unfinished: 1, Assimilated: 1},
		{ID: empty},
		{ID: finished, NJobs: 1, Assimilated: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("BatchListProgress = %+v, want %+v (the done batch left out)", got, want)
	}

	first, err := b.st.BatchListProgress(ctx, store.BatchListProgressParams{Limit: 2})
	if err != nil || len(first) != 2 || first[1].ID != empty {
		t.Fatalf("BatchListProgress(limit 2) = %+v, %v; want the first two batches", first, err)
	}
	rest, err := b.st.BatchListProgress(ctx, store.BatchListProgressParams{AfterID: first[1].ID, Limit: 2})
	if err != nil || len(rest) != 1 || rest[0].ID != finished {
		t.Fatalf("BatchListProgress(after %d) = %+v, %v; want the last batch only", first[1].ID, rest, err)
	}
}

func TestBatchMarkDone(t *testing.T) {
	t.Parallel()
	b := tailSetup(t)
	ctx := context.Background()
	finished := b.batch(t, row.BatchInProgress)
	b.job(t, finished, func(wu *storetest.JobOptions) {
		wu.AssimilateState = state.AssimilateDone
		wu.ErrorMask = state.ErrCancelled
	})
	b.job(t, finished, func(wu *storetest.JobOptions) { wu.AssimilateState = state.AssimilateDone })
	open := b.batch(t, row.BatchInProgress)
	b.job(t, open, func(wu *storetest.JobOptions) { wu.AssimilateState = state.AssimilateDone })
	b.job(t, open, func(wu *storetest.JobOptions) { wu.AssimilateState = state.AssimilateReady })
	empty := b.batch(t, row.BatchInProgress)

	if err := b.st.BatchMarkDone(ctx, finished, tailNow); err != nil {
		t.Fatalf("BatchMarkDone(every job assimilated) = %v, want nil", err)
	}
	var got struct {
		State          row.BatchState `db:"state"`
		CompletionTime int64          `db:"completion_time"`
	}
	if err := b.st.DB().GetContext(ctx, &got, `SELECT state, completion_time FROM batch WHERE id = ?`, finished); err != nil {
		t.Fatal(err)
	}
	if got.State != row.BatchDone || got.CompletionTime != tailNow {
		t.Errorf("batch after BatchMarkDone = %v at %d, want done at %d", got.State, got.CompletionTime, tailNow)
	}
	for _, tc := range []struct {
		name string
		id   int64
	}{{"already done", finished}, {"a job not assimilated", open}, {"no jobs", empty}} {
		if err := b.st.BatchMarkDone(ctx, tc.id, tailNow); !errors.Is(err, store.ErrConflict) {
			t.Errorf("BatchMarkDone(%s) = %v, want ErrConflict", tc.name, err)
		}
	}
}

func TestWorkunitListTail(t *testing.T) {
	t.Parallel()
	b := tailSetup(t)
	ctx := context.Background()
	batch := b.batch(t, row.BatchInProgress)
	old := int64(tailNow - 600) // out for 0.6 × delay_bound
	recent := int64(tailNow - 400)

	slow := b.job(t, batch)
	b.instance(t, slow, state.ServerInProgress, old)
	b.instance(t, slow, state.ServerOver, old)

	mixed := b.job(t, batch, func(wu *storetest.JobOptions) { wu.TargetNResults, wu.MinQuorum = 2, 2 })
	b.instance(t, mixed, state.ServerInProgress, recent)
	b.instance(t, mixed, state.ServerInProgress, old)

	// Jobs that do not qualify, by why not.
	for _, mod := range map[string]func(*storetest.JobOptions){
		"accelerated already": func(wu *storetest.JobOptions) { wu.TailCopies = 1 },
		"held":                func(wu *storetest.JobOptions) { wu.HoldReason = state.ErrTooManyTotalResults },
		"failed":              func(wu *storetest.JobOptions) { wu.ErrorMask = state.ErrCancelled },
		"canonical":           func(wu *storetest.JobOptions) { wu.CanonicalResultID = 5; wu.AssimilateState = state.AssimilateReady },
		"at max total":        func(wu *storetest.JobOptions) { wu.MaxTotalResults = 1 },
	} {
		id := b.job(t, batch, mod)
		b.instance(t, id, state.ServerInProgress, old)
	}
	withUnsent := b.job(t, batch)
	b.instance(t, withUnsent, state.ServerInProgress, old)
	b.instance(t, withUnsent, state.ServerUnsent, 0)
	onlyRecent := b.job(t, batch)
	b.instance(t, onlyRecent, state.ServerInProgress, recent)
	b.job(t, batch) // nothing sent yet
	other := b.job(t, b.batch(t, row.BatchInProgress))
	b.instance(t, other, state.ServerInProgress, old)

	got, err := b.st.WorkunitListTail(ctx, store.WorkunitListTailParams{Batch: batch, Now: tailNow, After: 0.5, Limit: 10})
	if err != nil {
		t.Fatalf("WorkunitListTail: %v", err)
	}
	var ids []int64
	for _, c := range got {
		ids = append(ids, c.ID)
	}
	if want := []int64{slow, mixed}; !reflect.DeepEqual(ids, want) {
		t.Errorf("WorkunitListTail(after 0.5) = jobs %v, want %v: only unfinished, unaccelerated jobs with an "+
			"instance out past half the delay bound, none unsent, room under the total", ids, want)
	}
	got, err = b.st.WorkunitListTail(ctx, store.WorkunitListTailParams{Batch: batch, Now: tailNow, After: 0.5, Limit: 1})
	if err != nil || len(got) != 1 || got[0].ID != slow {
		t.Errorf("WorkunitListTail(limit 1) = %d jobs, %v; want job %d", len(got), err, slow)
	}
	got, err = b.st.WorkunitListTail(ctx, store.WorkunitListTailParams{Batch: batch, Now: tailNow, After: 0.7, Limit: 10})
	if err != nil || len(got) != 0 {
		t.Errorf("WorkunitListTail(after 0.7) = %d jobs, %v; want none", len(got), err)
	}
}

func TestWorkunitAddTailCopy(t *testing.T) {
	t.Parallel()
	b := tailSetup(t)
	ctx := context.Background()
	id := b.job(t, 0, func(wu *storetest.JobOptions) { wu.TransitionTime = tailNow + 500; wu.TargetNResults = 2 })
	if err := b.st.WorkunitAddTailCopy(ctx, id, 0, tailNow); err != nil {
		t.Fatalf("WorkunitAddTailCopy = %v, want nil", err)
	}
	wu, err := b.st.WorkunitGet(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if wu.TargetNResults != 3 || wu.TailCopies != 1 || wu.TransitionTime != tailNow || wu.ModTime != tailNow {
		t.Errorf("job after WorkunitAddTailCopy = target %d tail_copies %d transition_time %d mod_time %d; want 3, 1, %d, %d",
			wu.TargetNResults, wu.TailCopies, wu.TransitionTime, wu.ModTime, tailNow, tailNow)
	}
	if err := b.st.WorkunitAddTailCopy(ctx, id, 0, tailNow); !errors.Is(err, store.ErrConflict) {
		t.Errorf("WorkunitAddTailCopy with a stale tail_copies = %v, want ErrConflict", err)
	}
	done := b.job(t, 0, func(wu *storetest.JobOptions) { wu.CanonicalResultID = 1; wu.AssimilateState = state.AssimilateReady })
	if err := b.st.WorkunitAddTailCopy(ctx, done, 0, tailNow); !errors.Is(err, store.ErrConflict) {
		t.Errorf("WorkunitAddTailCopy on a finished job = %v, want ErrConflict", err)
	}
}
