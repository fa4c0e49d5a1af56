package store_test

import (
	"context"
	"reflect"
	"sort"
	"testing"

	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

func TestResultListByNames(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	ctx := context.Background()
	if err := f.send(t, store.SchedSend{ResultID: f.r1, WorkunitID: f.wuID, HostID: f.host1,
		UserID: f.user, ReportDeadline: 500, Now: 400}); err != nil {
		t.Fatalf("send: %v", err)
	}
	if _, err := f.st.DB().ExecContext(ctx, `UPDATE workunit SET canonical_resultid = ?, error_mask = ? WHERE id = ?`,
		f.r2, state.ErrTooManyErrorResults, f.wuID); err != nil {
		t.Fatal(err)
	}

	got, err := f.st.ResultListByNames(ctx, []string{"wu_1", "nosuch", "wu_0"})
	if err != nil {
		t.Fatalf("ResultListByNames: %v", err)
	}
	sort.Slice(got, func(i, j int) bool { return got[i].Name < got[j].Name })
	want := []store.ResultByName{
		{Name: "wu_0", HostID: f.host1, UserID: f.user, ServerState: state.ServerInProgress, ReportDeadline: 500,
			CanonicalResultID: f.r2, ErrorMask: state.ErrTooManyErrorResults},
		{Name: "wu_1", ServerState: state.ServerUnsent, CanonicalResultID: f.r2, ErrorMask: state.ErrTooManyErrorResults},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ResultListByNames(wu_1, nosuch, wu_0) =\n %+v\nwant\n %+v", got, want)
	}

	if got, err := f.st.ResultListByNames(ctx, nil); got != nil || err != nil {
		t.Fatalf("ResultListByNames(nil) = %v, %v; want nil, nil", got, err)
	}
	if _, err := f.st.ResultListByNames(ctx, make([]string, store.MaxResultNames+1)); err == nil {
		t.Fatalf("ResultListByNames(%d names) succeeded; want an error", store.MaxResultNames+1)
	}
}

func TestResultListReported(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t)
	ctx := context.Background()
	if err := f.send(t, store.SchedSend{ResultID: f.r1, WorkunitID: f.wuID, HostID: f.host1,
		UserID: f.user, ReportDeadline: 500, Now: 400}); err != nil {
		t.Fatalf("send: %v", err)
	}
	got, err := f.st.ResultListReported(ctx, []string{"wu_0", "nosuch"})
	if err != nil {
		t.Fatalf("ResultListReported: %v", err)
	}
	if len(got) != 1 || got[0].ID != f.r1 || got[0].Name != "wu_0" || got[0].WorkunitID != f.wuID ||
		got[0].HostID != f.host1 || got[0].UserID != f.user || got[0].ServerState != state.ServerInProgress ||
		got[0].SentTime != 400 {
		t.Fatalf("ResultListReported(wu_0, nosuch) = %+v", got)
	}
	if _, err := f.st.ResultListReported(ctx, make([]string, store.MaxReportedNames+1)); err == nil {
		t.Fatalf("ResultListReported(%d names) succeeded; want an error", store.MaxReportedNames+1)
	}
}
