package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// TestStmtBatchChecksEachStatementsCount: the statements of a group
// commit's writes go in one round trip, and each count check is on its own
// statements' changed rows, not on the total: two checks whose counts are
// swapped fail the batch, and nothing of it is kept. A failing statement
// stops the batch with its own error.
func TestStmtBatchChecksEachStatementsCount(t *testing.T) {
	st := storetest.New(t)
	ctx := context.Background()
	if _, err := st.DB().Exec(`CREATE TABLE sb (id INT PRIMARY KEY, v INT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().Exec(`INSERT INTO sb (id, v) VALUES (1, 0), (2, 0), (3, 0)`); err != nil {
		t.Fatal(err)
	}
	queries := []string{`UPDATE sb SET v = ? WHERE id IN (?, ?)`, `INSERT INTO sb (id, v) VALUES (?, ?)`,
		`UPDATE sb SET v = ? WHERE id = ?`}
	args := [][]any{{1, 1, 2}, {4, 0}, {2, 3}}
	sum := func() (n int) {
		t.Helper()
		if err := st.DB().Get(&n, `SELECT SUM(v) FROM sb`); err != nil {
			t.Fatal(err)
		}
		return n
	}
	err := store.StmtBatchExec(ctx, st, queries, args, []int{0, -1, 1}, []int{1, 2})
	if !errors.Is(err, store.ErrBatchCount) {
		t.Fatalf("batch with the counts swapped = %v, want ErrBatchCount", err)
	}
	if n := sum(); n != 0 {
		t.Fatalf("refused batch left SUM(v) = %d, want 0", n)
	}
	// The second statement now meets a duplicate key: the third never runs.
	if _, err := st.DB().Exec(`INSERT INTO sb (id, v) VALUES (4, 0)`); err != nil {
		t.Fatal(err)
	}
	err = store.StmtBatchExec(ctx, st, queries, args, []int{0, -1, 1}, []int{2, 1})
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1062 {
		t.Fatalf("batch meeting a duplicate key = %v, want error 1062", err)
	}
	if n := sum(); n != 0 {
		t.Fatalf("failed batch left SUM(v) = %d, want 0", n)
	}
	if _, err := st.DB().Exec(`DELETE FROM sb WHERE id = 4`); err != nil {
		t.Fatal(err)
	}
	if err := store.StmtBatchExec(ctx, st, queries, args, []int{0, -1, 1}, []int{2, 1}); err != nil {
		t.Fatalf("batch = %v", err)
	}
	if n := sum(); n != 4 {
		t.Fatalf("SUM(v) = %d after the batch, want 4", n)
	}
}
