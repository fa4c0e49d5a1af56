package store_test

import (
	"context"
	"slices"
	"testing"

	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// ResultNamesExisting answers by the exact name: a row in any state counts,
// a name that only collates equal (another case) or is absent does not, and
// a name asked twice comes back once.
func TestResultNamesExisting(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	for i, fds := range []state.FileDeleteState{state.FileDeleteInit, state.FileDeleteReady, state.FileDeleteDone, state.FileDeleteError} {
		name := []string{"init_r0", "ready_r0", "done_r0", "error_r0"}[i]
		storetest.Instance(t, st, storetest.InstanceOptions{CreateTime: 1, Job: 1, Name: name,
			ServerState: state.ServerOver, FileDeleteState: fds})
	}
	got, err := st.ResultNamesExisting(ctx, []string{"done_r0", "absent_r0", "INIT_R0", "init_r0", "done_r0", "error_r0", "ready_r0"})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"done_r0", "error_r0", "init_r0", "ready_r0"}; !slices.Equal(got, want) {
		t.Errorf("ResultNamesExisting = %q, want %q", got, want)
	}
	if got, err := st.ResultNamesExisting(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("ResultNamesExisting(nil) = %q, %v; want nothing", got, err)
	}
}
