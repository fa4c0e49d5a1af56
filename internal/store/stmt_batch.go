package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
		b.text.WriteString(stmtSeparator)
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

// rowsUpdate is a multi-row UPDATE of one table. Its query names each
// row's values as {name} (a column of cols) and the rows themselves as
// {keys}: each {name} becomes a CASE choosing that value by the row's key,
// and {keys} the condition that picks exactly the rows given, so the server
// reads them by primary key and sets each from its own values.
//
// One CASE per column, rather than a derived table of the rows (SELECT ?
// AS id, ... UNION ALL SELECT ...) joined to the table, because the server
// prepares and optimizes each SELECT of such a union on its own: for 23
// rows of 8 values that cost 2-2.5 times the database CPU of the CASE form
// in a benchmark of the two against each other.
type rowsUpdate struct {
	query string
	// key is the SQL of the key's columns (e.g. "r.id"); a row's first
	// len(key) values are its key.
	key []string
	// cols names each row's values, the key's first.
	cols []string
}

// expand returns u.query for rows, and its arguments in order.
func (u rowsUpdate) expand(rows [][]any) (string, []any) {
	var b strings.Builder
	var args []any
	q := u.query
	for {
		i := strings.IndexByte(q, '{')
		if i < 0 {
			b.WriteString(q)
			return b.String(), args
		}
		j := strings.IndexByte(q[i:], '}')
		b.WriteString(q[:i])
		name := q[i+1 : i+j]
		q = q[i+j+1:]
		if name == "keys" {
			args = u.keys(&b, rows, args)
			continue
		}
		col := slices.Index(u.cols, name)
		if col < 0 {
			panic(fmt.Errorf("rowsUpdate: no column %q in %q", name, u.query))
		}
		args = u.choose(&b, col, rows, args)
	}
}

// keys writes the condition that selects rows by their keys.
func (u rowsUpdate) keys(b *strings.Builder, rows [][]any, args []any) []any {
	if len(u.key) == 1 {
		b.WriteString(u.key[0] + " IN (" + strings.Repeat("?, ", len(rows)-1) + "?)")
		for _, r := range rows {
			args = append(args, r[0])
		}
		return args
	}
	b.WriteString("(")
	for i, r := range rows {
		if i > 0 {
			b.WriteString(" OR ")
		}
		for k, c := range u.key {
			if k > 0 {
				b.WriteString(" AND ")
			}
			b.WriteString(c + " = ?")
			args = append(args, r[k])
		}
	}
	b.WriteString(")")
	return args
}

// choose writes a CASE giving each row's value of column col. A float64
// column gets "+ 0e0" in its first branch so that the CASE is a DOUBLE
// whatever literals the other rows have.
func (u rowsUpdate) choose(b *strings.Builder, col int, rows [][]any, args []any) []any {
	b.WriteString("CASE")
	if len(u.key) == 1 {
		b.WriteString(" " + u.key[0])
	}
	for i, r := range rows {
		if len(u.key) == 1 {
			b.WriteString(" WHEN ?")
			args = append(args, r[0])
		} else {
			for k, c := range u.key {
				if k == 0 {
					b.WriteString(" WHEN ")
				} else {
					b.WriteString(" AND ")
				}
				b.WriteString(c + " = ?")
				args = append(args, r[k])
			}
		}
		b.WriteString(" THEN ?")
		if _, ok := r[col].(float64); ok && i == 0 {
			b.WriteString(" + 0e0")
		}
		args = append(args, schedArg(r[col]))
	}
	b.WriteString(" END")
	return args
}

// updateRows adds u for rows, in chunks of schedBatchMaxRows. want is the
// rows it must change in all, or -1 for no check (an update that may leave
// a row as it was).
func (b *stmtBatch) updateRows(u rowsUpdate, rows [][]any, want int) {
	if len(rows) == 0 {
		return
	}
	check := b.newCheck(want)
	for len(rows) > 0 {
		n := min(len(rows), schedBatchMaxRows)
		q, args := u.expand(rows[:n])
		b.add(check, q, args...)
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
func execRows(ctx context.Context, tx *sqlx.Tx, u rowsUpdate, rows [][]any, want int) error {
	b := newStmtBatch(ctx, tx)
	b.updateRows(u, rows, want)
	return b.run()
}

// insertRows runs stmtBatch.insertRows' statements at once in tx.
func insertRows(ctx context.Context, tx *sqlx.Tx, prefix string, width int, rows [][]any, suffix string, suffixArgs ...any) error {
	b := newStmtBatch(ctx, tx)
	b.insertRows(prefix, width, rows, suffix, suffixArgs...)
	return b.run()
}
