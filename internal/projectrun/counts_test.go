package projectrun

import (
	"context"
	"testing"

	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// TestCountLive seeds the demo app and a few jobs and instances in every
// state the progress lines show, and reads them back as counts and as
// records.
func TestCountLive(t *testing.T) {
	st := storetest.New(t)
	ctx := context.Background()
	appID, err := SeedDemoApp(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if auths, err := SeedUsers(ctx, st, 3, "volunteer"); err != nil || len(auths) != 3 || auths[0] == auths[1] {
		t.Fatalf("SeedUsers = %v, %v; want three distinct authenticators", auths, err)
	}
	var wuIDs []int64
	for _, w := range []storetest.JobOptions{
		{Name: "a", NeedValidate: true},
		{Name: "b", AssimilateState: state.AssimilateDone},
		{Name: "c", AssimilateState: state.AssimilateReady},
	} {
		w.App = appID
		id := storetest.Job(t, st, w).ID
		wuIDs = append(wuIDs, id)
	}
	for _, r := range []storetest.InstanceOptions{
		{Name: "r1", ServerState: state.ServerUnsent},
		{Name: "r2", ServerState: state.ServerInProgress},
		{Name: "r3", ServerState: state.ServerInProgress},
		{Name: "r4", ServerState: state.ServerOver},
	} {
		r.Job, r.App = wuIDs[0], appID
		storetest.Instance(t, st, r)
	}
	got, err := CountLive(ctx, st.DB())
	if err != nil {
		t.Fatal(err)
	}
	want := Counts{Jobs: 3, Unassimilated: 2, NeedValidate: 1, Instances: 4, Unsent: 1, InProgress: 2, Over: 1}
	if got != want || got.NotOver() != 3 {
		t.Fatalf("CountLive = %+v (not over %d), want %+v (not over 3)", got, got.NotOver(), want)
	}
	recs, err := LiveRecords(ctx, st.DB(), "workunit", []string{"name", "assimilate_state"})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]int64{}
	for _, r := range recs {
		byName[r["name"]] = r.Int("assimilate_state")
	}
	if len(recs) != 3 || byName["b"] != int64(state.AssimilateDone) || byName["c"] != int64(state.AssimilateReady) {
		t.Fatalf("LiveRecords = %v, want a, b and c with their assimilate states", recs)
	}
}
