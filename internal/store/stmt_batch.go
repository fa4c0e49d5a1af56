package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"
)

// stmtBatchFlushBytes is the size of a packet past which a batch is
// sent before more is added: well under the server's max_allowed_packet
// (16 MiB by default in MariaDB), which one multi-statement packet must
// fit whole.
const stmtBatchFlushBytes = 4 << 20

// stmtBatch gathers the writes of one transaction and sends them to the
// server as one multi-statement packet (or a few, past
// stmtBatchFlushBytes): one round trip instead of one per statement. A
// write whose row count is checked is followed by SELECT ROW_COUNT(), read
// back as a result set of its own. The statements run in order, and the
// first that fails stops the rest and is the error. The connection must
// allow multiple statements (Open sets it).
type stmtBatch struct {
	ctx  context.Context
	tx   *sqlx.Tx
	text strings.Builder
	args []any
	// pending lists, for each ROW_COUNT() in text, the check it counts for.
	pending []int
	checks  []stmtCheck
	// size is the packet's length so far, about: the text and the
	// arguments' bytes, which interpolation puts into it.
	size int
	err  error
}

// stmtCheck is one logical write's expected row count: the sum of the row
// counts of its statements (a multi-row write may take several).
type stmtCheck struct {
	want, got int64
}

func newStmtBatch(ctx context.Context, tx *sqlx.Tx) *stmtBatch {
	return &stmtBatch{ctx: ctx, tx: tx}
}

// add appends one statement. check is the index of the count it adds to
// (from newCheck), or -1 for none.
func (b *stmtBatch) add(check int, query string, args ...any) {
	if b.err != nil {
		return
	}
	if b.text.Len() > 0 {
		b.text.WriteString(";\n")
	}
	b.text.WriteString(query)
	b.args = append(b.args, args...)
	b.size += len(query) + 24
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			b.size += 2 * len(v) // escaped, at worst
		case string:
			b.size += 2 * len(v)
		default:
			b.size += 24
		}
	}
	if check >= 0 {
		b.text.WriteString(";\nSELECT ROW_COUNT()")
		b.pending = append(b.pending, check)
	}
	if b.size >= stmtBatchFlushBytes {
		b.err = b.flush()
	}
}

// newCheck starts a count that the statements added with its index must
// sum to want by run; want < 0 counts nothing.
func (b *stmtBatch) newCheck(want int) int {
	if want < 0 {
		return -1
	}
	b.checks = append(b.checks, stmtCheck{want: int64(want)})
	return len(b.checks) - 1
}

// flush sends the statements gathered so far.
func (b *stmtBatch) flush() error {
	if b.text.Len() == 0 {
		return nil
	}
	query, args, pending := b.text.String(), b.args, b.pending
	b.text.Reset()
	b.args, b.pending, b.size = nil, nil, 0
	if len(pending) == 0 {
		_, err := b.tx.ExecContext(b.ctx, query, args...)
		return err
	}
	rows, err := b.tx.QueryContext(b.ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for i, check := range pending {
		if i > 0 && !rows.NextResultSet() {
			return errors.Join(rows.Err(), fmt.Errorf("%w: %d row counts of %d", errBatchCount, i, len(pending)))
		}
		if !rows.Next() {
			return errors.Join(rows.Err(), fmt.Errorf("%w: no row count", errBatchCount))
		}
		var n int64
		if err := rows.Scan(&n); err != nil {
			return err
		}
		b.checks[check].got += n
	}
	// The statements after the last count (their errors come here).
	for rows.NextResultSet() {
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rows.Close()
}

// run sends what is left and checks every count.
func (b *stmtBatch) run() error {
	if b.err != nil {
		return b.err
	}
	if err := b.flush(); err != nil {
		return err
	}
	for _, c := range b.checks {
		if c.got != c.want {
			return fmt.Errorf("%w: %d, want %d", errBatchCount, c.got, c.want)
		}
	}
	return nil
}

// updateRows adds query in chunks of schedBatchMaxRows: its first %s is a
// derived table of rows (first row named by cols), its second the list of
// the rows' ids (their first column). want is the rows it must change in
// all, or -1 for no check (an update that may leave a row as it was).
//
// The queries name the updated table first, STRAIGHT_JOIN the derived
// table, and restrict the table to the ids: the server then reads the rows
// by primary key and updates each as it finds it. Joined the other way, a
// multi-table update collects the new values in a temporary table first,
// one on disk when a BLOB column is set (the reports' stderr_out): about
// half the cost of the batch.
func (b *stmtBatch) updateRows(query string, cols []string, rows [][]any, want int) {
	if len(rows) == 0 {
		return
	}
	check := b.newCheck(want)
	for len(rows) > 0 {
		n := min(len(rows), schedBatchMaxRows)
		q, args := derivedTable(cols, rows[:n])
		for _, row := range rows[:n] {
			args = append(args, row[0])
		}
		ids := strings.Repeat("?, ", n-1) + "?"
		b.add(check, fmt.Sprintf(query, q, ids), args...)
		rows = rows[n:]
	}
}

// insertRows adds a multi-row INSERT of rows of width columns: prefix, the
// rows' tuples, then suffix (an ON DUPLICATE KEY UPDATE clause, or empty)
// with its own arguments; in chunks of schedBatchMaxRows.
func (b *stmtBatch) insertRows(prefix string, width int, rows [][]any, suffix string, suffixArgs ...any) {
	for len(rows) > 0 {
		n := min(len(rows), schedBatchMaxRows)
		var q strings.Builder
		q.WriteString(prefix)
		args := make([]any, 0, n*width+len(suffixArgs))
		for i, row := range rows[:n] {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(" + strings.Repeat("?, ", width-1) + "?)")
			args = append(args, row...)
		}
		q.WriteString(suffix)
		args = append(args, suffixArgs...)
		b.add(-1, q.String(), args...)
		rows = rows[n:]
	}
}

// execRows runs updateRows' statements at once in tx.
func execRows(ctx context.Context, tx *sqlx.Tx, query string, cols []string, rows [][]any, want int) error {
	b := newStmtBatch(ctx, tx)
	b.updateRows(query, cols, rows, want)
	return b.run()
}

// insertRows runs stmtBatch.insertRows' statements at once in tx.
func insertRows(ctx context.Context, tx *sqlx.Tx, prefix string, width int, rows [][]any, suffix string, suffixArgs ...any) error {
	b := newStmtBatch(ctx, tx)
	b.insertRows(prefix, width, rows, suffix, suffixArgs...)
	return b.run()
}
