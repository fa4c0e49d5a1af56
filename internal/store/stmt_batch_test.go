package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// stmtTable makes a scratch table of rows (id, v) = (1, 0) .. (n, 0).
func stmtTable(t *testing.T, st *store.Store, n int) {
	t.Helper()
	storetest.Exec(t, st, `CREATE TABLE stmt_t (id INT NOT NULL PRIMARY KEY, v INT NOT NULL DEFAULT 0, s MEDIUMBLOB)`)
	for i := 1; i <= n; i++ {
		storetest.Exec(t, st, `INSERT INTO stmt_t (id) VALUES (?)`, i)
	}
}

// stmtModes are a store that sends a batch as one packet and one that
// splits it into its statements, as on a Galera node (Options.SplitPackets):
// a batch must mean the same either way.
func stmtModes(t *testing.T) map[string]*store.Store {
	return map[string]*store.Store{
		"packet": storetest.New(t),
		"split":  open(t, storetest.NewDatabase(t), store.Options{SplitPackets: true, MaxOpenConns: 2}),
	}
}

func stmtSum(t *testing.T, st *store.Store) int {
	t.Helper()
	var v int
	if err := st.DB().Get(&v, `SELECT COALESCE(SUM(v), 0) FROM stmt_t`); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestStmtBatchSumsCountsPerCheck: the row counts of a check's statements
// are summed; statements without a check run uncounted; a check that comes
// out other than wanted fails the batch, and the transaction writes nothing.
func TestStmtBatchSumsCountsPerCheck(t *testing.T) {
	t.Parallel()
	for mode, st := range stmtModes(t) {
		t.Run(mode, func(t *testing.T) { stmtBatchSumsCountsPerCheck(t, st) })
	}
}

func stmtBatchSumsCountsPerCheck(t *testing.T, st *store.Store) {
	ctx := context.Background()
	stmtTable(t, st, 5)
	err := st.InTxForTest(ctx, func(tx *sqlx.Tx) error {
		b := store.NewStmtBatchForTest(ctx, tx)
		c := b.NewCheck(3)
		b.Add(c, `UPDATE stmt_t SET v = v + 1 WHERE id IN (?, ?)`, 1, 2)
		b.Add(-1, `UPDATE stmt_t SET v = v + 10 WHERE id = ?`, 5)
		b.Add(c, `UPDATE stmt_t SET v = v + 1 WHERE id = ?`, 3)
		return b.Run()
	})
	if err != nil {
		t.Fatalf("batch with the counts it wants: %v", err)
	}
	if got := stmtSum(t, st); got != 13 {
		t.Fatalf("sum after the batch = %d, want 13", got)
	}
	err = st.InTxForTest(ctx, func(tx *sqlx.Tx) error {
		b := store.NewStmtBatchForTest(ctx, tx)
		b.Add(b.NewCheck(1), `UPDATE stmt_t SET v = v + 1 WHERE id = ?`, 4)
		b.Add(b.NewCheck(1), `UPDATE stmt_t SET v = v + 1 WHERE id = ?`, 99)
		return b.Run()
	})
	if !errors.Is(err, store.ErrBatchCount) {
		t.Fatalf("batch with a check of 0 rows, want 1 = %v, want ErrBatchCount", err)
	}
	if got := stmtSum(t, st); got != 13 {
		t.Fatalf("sum after the refused batch = %d, want 13 (nothing written)", got)
	}
}

// TestStmtBatchStopsAtTheFirstError: a statement that fails is the batch's
// error (as the server gave it: a duplicate key stays recognisable), and the
// statements after it do not run.
func TestStmtBatchStopsAtTheFirstError(t *testing.T) {
	t.Parallel()
	for mode, st := range stmtModes(t) {
		t.Run(mode, func(t *testing.T) { stmtBatchStopsAtTheFirstError(t, st) })
	}
}

func stmtBatchStopsAtTheFirstError(t *testing.T, st *store.Store) {
	ctx := context.Background()
	stmtTable(t, st, 2)
	for _, counted := range []bool{false, true} {
		var after int
		err := st.InTxForTest(ctx, func(tx *sqlx.Tx) error {
			b := store.NewStmtBatchForTest(ctx, tx)
			check := -1
			if counted {
				check = b.NewCheck(2)
			}
			b.Add(check, `UPDATE stmt_t SET v = v + 1 WHERE id = ?`, 1)
			b.Add(-1, `INSERT INTO stmt_t (id) VALUES (?)`, 2)
			b.Add(check, `UPDATE stmt_t SET v = v + 1 WHERE id = ?`, 2)
			err := b.Run()
			if gerr := tx.Get(&after, `SELECT v FROM stmt_t WHERE id = 2`); gerr != nil {
				return gerr
			}
			return err
		})
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1062 {
			t.Fatalf("counted %v: batch with a duplicate insert = %v, want the server's 1062", counted, err)
		}
		if after != 0 {
			t.Errorf("counted %v: the statement after the failing one ran", counted)
		}
	}
	if got := stmtSum(t, st); got != 0 {
		t.Fatalf("sum after failed batches = %d, want 0", got)
	}
}

// TestStmtBatchSplitsLargePackets: a batch whose arguments outgrow
// StmtBatchFlushBytes is sent in several packets, each under the server's
// max_allowed_packet, and every statement runs and is counted.
func TestStmtBatchSplitsLargePackets(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	var maxPacket int
	if err := st.DB().Get(&maxPacket, `SELECT @@max_allowed_packet`); err != nil {
		t.Fatal(err)
	}
	blob := []byte(strings.Repeat("x", store.StmtBatchFlushBytes/8))
	// More arguments in all than one packet may hold.
	rows := maxPacket/len(blob) + 4
	if rows > 300 {
		t.Skipf("max_allowed_packet %d: too large to outgrow here", maxPacket)
	}
	stmtTable(t, st, rows)
	err := st.InTxForTest(ctx, func(tx *sqlx.Tx) error {
		b := store.NewStmtBatchForTest(ctx, tx)
		c := b.NewCheck(rows)
		for i := 1; i <= rows; i++ {
			b.Add(c, `UPDATE stmt_t SET v = 1, s = ? WHERE id = ?`, blob, i)
		}
		return b.Run()
	})
	if err != nil {
		t.Fatalf("large batch: %v", err)
	}
	if got := stmtSum(t, st); got != rows {
		t.Fatalf("rows written = %d, want %d", got, rows)
	}
}

// TestRowsUpdateSetsEachRowItsOwnValues: a multi-row update by single and
// composite keys writes each listed row's own values exactly (doubles that
// need all their digits, a first row whose double looks like an integer,
// binary text), counts the rows it changed, and leaves every other row, even
// one that shares part of a composite key, alone.
func TestRowsUpdateSetsEachRowItsOwnValues(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	storetest.Exec(t, st, `CREATE TABLE rows_t (a INT NOT NULL, b INT NOT NULL, v INT NOT NULL DEFAULT 0,
		f DOUBLE NOT NULL DEFAULT 0, s BLOB, PRIMARY KEY (a, b))`)
	for a := 1; a <= 3; a++ {
		for b := 1; b <= 2; b++ {
			storetest.Exec(t, st, `INSERT INTO rows_t (a, b) VALUES (?, ?)`, a, b)
		}
	}
	third := 1.0 / 3
	err := st.InTxForTest(ctx, func(tx *sqlx.Tx) error {
		b := store.NewStmtBatchForTest(ctx, tx)
		// Keyed on a alone, restricted to b = 1 by the query.
		b.UpdateRows(`UPDATE rows_t t SET t.v = t.v + {v}, t.f = {f}, t.s = {s} WHERE {keys} AND t.b = 1`,
			[]string{"t.a"}, []string{"a", "v", "f", "s"},
			[][]any{{int64(1), int64(10), 2.0, []byte("x\x00'y")}, {int64(3), int64(30), third, []byte("z")}}, 2)
		// Composite key: (2, 2) only, not (2, 1).
		b.UpdateRows(`UPDATE rows_t t SET t.v = {v}, t.f = {f} WHERE {keys}`,
			[]string{"t.a", "t.b"}, []string{"a", "b", "v", "f"},
			[][]any{{int64(2), int64(2), int64(22), 1e300}}, 1)
		return b.Run()
	})
	if err != nil {
		t.Fatalf("batch: %v", err)
	}
	type row struct {
		A, B, V int
		F       float64
		S       []byte
	}
	var got []row
	if err := st.DB().Select(&got, `SELECT a, b, v, f, s FROM rows_t ORDER BY a, b`); err != nil {
		t.Fatal(err)
	}
	want := []row{{1, 1, 10, 2, []byte("x\x00'y")}, {1, 2, 0, 0, nil}, {2, 1, 0, 0, nil}, {2, 2, 22, 1e300, nil},
		{3, 1, 30, third, []byte("z")}, {3, 2, 0, 0, nil}}
	if len(got) != len(want) {
		t.Fatalf("rows = %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.A != w.A || g.B != w.B || g.V != w.V || g.F != w.F || string(g.S) != string(w.S) {
			t.Fatalf("row %d = %+v, want %+v", i, g, w)
		}
	}
}
