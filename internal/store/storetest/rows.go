package storetest

import (
	"context"
	"testing"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// Workunit returns job id, failing the test if it cannot.
func Workunit(t testing.TB, st *store.Store, id int64) row.Workunit {
	t.Helper()
	wu, err := st.WorkunitGet(context.Background(), id)
	if err != nil {
		t.Fatalf("WorkunitGet(%d): %v", id, err)
	}
	return wu
}

// Result returns instance id, failing the test if it cannot.
func Result(t testing.TB, st *store.Store, id int64) row.Result {
	t.Helper()
	r, err := st.ResultGet(context.Background(), id)
	if err != nil {
		t.Fatalf("ResultGet(%d): %v", id, err)
	}
	return r
}

// Results returns every instance of job wuID by id, failing the test if it
// cannot.
func Results(t testing.TB, st *store.Store, wuID int64) []row.Result {
	t.Helper()
	rs, err := st.ResultListByWorkunit(context.Background(), wuID)
	if err != nil {
		t.Fatalf("ResultListByWorkunit(%d): %v", wuID, err)
	}
	return rs
}

// Exec runs one statement a test needs to set up a state no program would
// write, failing the test if it cannot.
func Exec(t testing.TB, st *store.Store, query string, args ...any) {
	t.Helper()
	if _, err := st.DB().ExecContext(context.Background(), query, args...); err != nil {
		t.Fatalf("exec %q: %v", query, err)
	}
}
