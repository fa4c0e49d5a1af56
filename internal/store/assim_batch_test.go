package store_test

import (
	"context"
	"slices"
	"testing"

	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestWorkunitListAssimilateCanonicalAndMarkBatch(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	appID := storetest.App(t, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
	job := func(name string, as state.AssimilateState) int64 {
		id := storetest.Job(t, st, storetest.JobOptions{CreateTime: 1, App: appID, Name: name, AssimilateState: as,
			TransitionTime: 1000}).ID
		return id
	}
	withCanon := job("canon", state.AssimilateReady)
	rid := storetest.Instance(t, st, storetest.InstanceOptions{CreateTime: 1, Job: withCanon, Name: "canon_0",
		ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, XMLDocIn: "<doc/>", StderrOut: "stderr"}).ID
	storetest.Exec(t, st, `UPDATE workunit SET canonical_resultid = ? WHERE id = ?`, rid, withCanon)
	failed := job("failed", state.AssimilateReady)
	job("not ready", state.AssimilateInit)
	gone := job("gone", state.AssimilateReady)
	storetest.Exec(t, st, `UPDATE workunit SET canonical_resultid = 999999 WHERE id = ?`, gone)

	got, err := st.WorkunitListAssimilateCanonical(ctx, store.WorkunitListAssimilateParams{AppID: appID, Mod: 1, Limit: 10})
	if err != nil {
		t.Fatalf("WorkunitListAssimilateCanonical: %v", err)
	}
	if len(got) != 3 || got[0].Workunit.ID != withCanon || got[1].Workunit.ID != failed || got[2].Workunit.ID != gone {
		t.Fatalf("WorkunitListAssimilateCanonical = %d jobs %+v, want canon, failed, gone by id", len(got), got)
	}
	if c := got[0].Canonical; c == nil || c.ID != rid || c.Name != "canon_0" || c.XMLDocIn != "<doc/>" || c.StderrOut != "stderr" {
		t.Errorf("canonical of job canon = %+v, want result %d, whole", c, rid)
	}
	if got[0].Workunit.Name != "canon" || got[0].Workunit.TransitionTime != 1000 {
		t.Errorf("job canon = %+v, want its row", got[0].Workunit)
	}
	if got[1].Canonical != nil || got[2].Canonical != nil {
		t.Errorf("canonical of a failed job / of a missing row = %v / %v, want nil", got[1].Canonical, got[2].Canonical)
	}

	// Someone else marks one; the batch marks the rest.
	if done, err := st.WorkunitMarkAssimilatedBatch(ctx, []int64{failed}, 5); err != nil || !slices.Equal(done, []int64{failed}) {
		t.Fatalf("WorkunitMarkAssimilatedBatch(failed) = %v, %v; want [%d]", done, err, failed)
	}
	done, err := st.WorkunitMarkAssimilatedBatch(ctx, []int64{withCanon, failed, gone}, 7)
	if err != nil {
		t.Fatalf("WorkunitMarkAssimilatedBatch: %v", err)
	}
	if want := []int64{withCanon, gone}; !slices.Equal(done, want) {
		t.Errorf("WorkunitMarkAssimilatedBatch = %v, want %v (not the job marked already)", done, want)
	}
	for _, id := range []int64{withCanon, gone} {
		wu := storetest.Workunit(t, st, id)
		if wu.AssimilateState != state.AssimilateDone || wu.TransitionTime != 7 || wu.ModTime != 7 {
			t.Errorf("job %d = %v transition_time %d mod_time %d, want done, 7, 7", id, wu.AssimilateState,
				wu.TransitionTime, wu.ModTime)
		}
	}
	if wu := storetest.Workunit(t, st, failed); wu.ModTime != 5 {
		t.Errorf("job marked by someone else was written again (mod_time %d, want 5)", wu.ModTime)
	}
	if done, err := st.WorkunitMarkAssimilatedBatch(ctx, []int64{withCanon}, 9); err != nil || len(done) != 0 {
		t.Errorf("WorkunitMarkAssimilatedBatch again = %v, %v; want none", done, err)
	}
	if got := throughputSince(t, st, 0); got.Day.Assimilated != 3 || got.Day.Reported != 0 || got.Day.Validated != 0 {
		t.Errorf("throughput = %+v, want the 3 jobs marked assimilated, once each", got)
	}
}

func TestWorkunitListAssimilateCanonicalPagesByID(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	appID := storetest.App(t, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
	var ready []int64
	for i, as := range []state.AssimilateState{state.AssimilateReady, state.AssimilateInit, state.AssimilateReady,
		state.AssimilateDone, state.AssimilateReady, state.AssimilateReady} {
		id := storetest.Job(t, st, storetest.JobOptions{CreateTime: 1, App: appID, Name: "wu" + string(rune('a'+i)),
			AssimilateState: as, ErrorMask: state.ErrCancelled}).ID
		if as == state.AssimilateReady {
			ready = append(ready, id)
		}
	}
	var got []int64
	var after int64
	for range len(ready) + 1 {
		page, err := st.WorkunitListAssimilateCanonical(ctx, store.WorkunitListAssimilateParams{AppID: appID, Mod: 1,
			AfterID: after, Limit: 3})
		if err != nil {
			t.Fatalf("WorkunitListAssimilateCanonical(after %d): %v", after, err)
		}
		for _, j := range page {
			got = append(got, j.Workunit.ID)
			after = j.Workunit.ID
		}
		if len(page) < 3 {
			break
		}
	}
	if !slices.Equal(got, ready) {
		t.Errorf("paging by 3 after the last id seen = %v, want the ready jobs %v once each, by id", got, ready)
	}
}
