package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/taskserver/taskserver/db/schema"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestSchemaApplyIsIdempotentAndChecked(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	if err := st.SchemaCheck(ctx); err != nil {
		t.Fatalf("SchemaCheck after apply: %v", err)
	}
	applied, err := st.SchemaApply(ctx, time.Now())
	if err != nil || len(applied) != 0 {
		t.Fatalf("second SchemaApply = %v, %v; want nothing applied, no error", applied, err)
	}
	if v, _ := st.SchemaVersion(ctx); v != schema.Latest() {
		t.Fatalf("SchemaVersion = %d, want %d", v, schema.Latest())
	}
}

func TestRowsRoundTrip(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	appID := storetest.App(t, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
	wuID := storetest.Job(t, st, storetest.JobOptions{CreateTime: 1, App: appID, Name: "wu1",
		MinQuorum: 2, TargetNResults: 2, ErrorMask: state.ErrCancelled, TransitionTime: 5}).ID
	wu, err := st.WorkunitGet(ctx, wuID)
	if err != nil || wu.Name != "wu1" || wu.ErrorMask != state.ErrCancelled || wu.MinQuorum != 2 {
		t.Fatalf("WorkunitGet = %+v, %v", wu, err)
	}
	rid := storetest.Instance(t, st, storetest.InstanceOptions{CreateTime: 1, Job: wuID, ServerState: state.ServerUnsent, Name: "wu1_0"}).ID
	r, err := st.ResultGet(ctx, rid)
	if err != nil || r.ServerState != state.ServerUnsent || r.WorkunitID != wuID {
		t.Fatalf("ResultGet = %+v, %v", r, err)
	}
	if _, err := st.ResultGet(ctx, rid+1000); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ResultGet(missing) error = %v, want ErrNotFound", err)
	}
}
