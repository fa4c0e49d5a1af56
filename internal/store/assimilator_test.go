package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestWorkunitListAssimilatePagesByID(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	appID, err := st.AppInsert(ctx, row.App{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1})
	if err != nil {
		t.Fatalf("AppInsert: %v", err)
	}
	var ready []int64
	for i, as := range []state.AssimilateState{state.AssimilateReady, state.AssimilateInit, state.AssimilateReady,
		state.AssimilateDone, state.AssimilateReady, state.AssimilateReady} {
		id, err := st.WorkunitInsert(ctx, row.Workunit{CreateTime: 1, AppID: appID, Name: "wu" + string(rune('a'+i)),
			AssimilateState: as, ErrorMask: state.ErrCancelled})
		if err != nil {
			t.Fatalf("WorkunitInsert: %v", err)
		}
		if as == state.AssimilateReady {
			ready = append(ready, id)
		}
	}
	var got []int64
	var after int64
	for range len(ready) + 1 {
		page, err := st.WorkunitListAssimilate(ctx, store.WorkunitListAssimilateParams{AppID: appID, Mod: 1,
			AfterID: after, Limit: 3})
		if err != nil {
			t.Fatalf("WorkunitListAssimilate(after %d): %v", after, err)
		}
		for _, wu := range page {
			got = append(got, wu.ID)
			after = wu.ID
		}
		if len(page) < 3 {
			break
		}
	}
	if !slices.Equal(got, ready) {
		t.Errorf("paging by 3 after the last id seen = %v, want the ready jobs %v once each, by id", got, ready)
	}
	if err := st.WorkunitMarkAssimilated(ctx, ready[0], 5); err != nil {
		t.Fatalf("WorkunitMarkAssimilated: %v", err)
	}
	if err := st.WorkunitMarkAssimilated(ctx, ready[0], 5); !errors.Is(err, store.ErrConflict) {
		t.Errorf("WorkunitMarkAssimilated of a done job = %v, want ErrConflict", err)
	}
}
