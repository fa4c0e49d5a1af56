package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"strings"
)

// stmtSeparator joins the statements of a packet (stmtBatch,
// txSelectSets), and splitPacket cuts a packet there.
const stmtSeparator = ";\n"

// On a Galera node a transaction can be aborted by a conflicting write
// replicated from another node (a brute-force abort). When that happens
// while the node runs a packet of several statements, MariaDB (10.11,
// seen in CI and reproduced on a two-node cluster) can roll the
// transaction back without reporting it and run the packet's remaining
// statements outside any transaction, each committed on its own: the
// client then gets no error, its COMMIT succeeds with nothing to commit,
// and the writes before the abort are lost while those after it are kept.
// A scheduler send was kept without its job's row, so a transitioner on
// the other node moved transition_time past the instance's deadline; on
// a retry the send found itself already done. Sent one statement at a
// time, an abort is reported for the statement it interrupts (or the next
// one), and the transaction is rolled back and run again as a whole. So on
// a Galera node (and with Options.SplitPackets) a packet is split back
// into its statements: a round trip each, the cost the packets saved.

// packetPart is one statement of a packet and its arguments.
type packetPart struct {
	query string
	args  []driver.NamedValue
}

// splitPacket cuts query at stmtSeparator and deals out args by the
// placeholders of each part: the driver fills every ? in order, and the
// store's statements keep ? out of their SQL text otherwise.
func splitPacket(query string, args []driver.NamedValue) ([]packetPart, error) {
	texts := strings.Split(query, stmtSeparator)
	parts := make([]packetPart, len(texts))
	for i, q := range texts {
		n := strings.Count(q, "?")
		if n > len(args) {
			return nil, errors.New("store: a statement packet has more placeholders than arguments")
		}
		parts[i] = packetPart{query: q, args: args[:n:n]}
		args = args[n:]
	}
	if len(args) > 0 {
		return nil, errors.New("store: a statement packet has more arguments than placeholders")
	}
	return parts, nil
}

// returnsRows reports whether a part is a read, run with QueryContext.
func returnsRows(q string) bool {
	q = strings.TrimLeft(q, " \t\n(")
	return len(q) >= 6 && strings.EqualFold(q[:6], "SELECT")
}

// execSplit runs a packet of writes one statement at a time and returns the
// last one's result.
func (f *failoverConn) execSplit(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	parts, err := splitPacket(query, args)
	if err != nil {
		return nil, err
	}
	var res driver.Result
	for _, p := range parts {
		if res, err = f.conn.(driver.ExecerContext).ExecContext(ctx, p.query, p.args); err != nil {
			return nil, f.refused(ctx, err, false)
		}
	}
	return res, nil
}

// querySplit runs a packet one statement at a time, as the driver reads a
// packet's results: the reads' rows are its result sets, in order, and a
// write's error stops it where it is.
func (f *failoverConn) querySplit(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	parts, err := splitPacket(query, args)
	if err != nil {
		return nil, err
	}
	r := &splitRows{ctx: ctx, f: f, parts: parts}
	if err := r.advance(); err != nil && err != io.EOF {
		return nil, err
	}
	return r, nil
}

// splitRows is the driver.Rows of a split packet: cur is the current
// read's rows, parts the statements not run yet.
type splitRows struct {
	ctx   context.Context
	f     *failoverConn
	parts []packetPart
	cur   driver.Rows
}

// advance runs the next parts up to and including the next read, whose
// rows become cur; io.EOF when no read is left (the writes are run).
func (r *splitRows) advance() error {
	r.cur = nil
	for len(r.parts) > 0 {
		p := r.parts[0]
		r.parts = r.parts[1:]
		if returnsRows(p.query) {
			rows, err := r.f.conn.(driver.QueryerContext).QueryContext(r.ctx, p.query, p.args)
			if err != nil {
				r.parts = nil // a failed statement stops the packet
				return r.f.refused(r.ctx, err, false)
			}
			r.cur = &failoverRows{Rows: rows, ctx: r.ctx, f: r.f}
			return nil
		}
		if _, err := r.f.conn.(driver.ExecerContext).ExecContext(r.ctx, p.query, p.args); err != nil {
			r.parts = nil
			return r.f.refused(r.ctx, err, false)
		}
	}
	return io.EOF
}

// Columns are the current read's.
func (r *splitRows) Columns() []string {
	if r.cur == nil {
		return nil
	}
	return r.cur.Columns()
}

// Next reads the current read's next row.
func (r *splitRows) Next(dest []driver.Value) error {
	if r.cur == nil {
		return io.EOF
	}
	return r.cur.Next(dest)
}

// HasNextResultSet reports whether a read is left.
func (r *splitRows) HasNextResultSet() bool {
	for _, p := range r.parts {
		if returnsRows(p.query) {
			return true
		}
	}
	return false
}

// NextResultSet closes the current read and runs up to the next one.
func (r *splitRows) NextResultSet() error {
	if r.cur != nil {
		if err := r.cur.Close(); err != nil {
			return err
		}
	}
	return r.advance()
}

// Close closes the current read and runs what is left, as the server runs
// the whole of a packet whatever the client reads of it.
func (r *splitRows) Close() error {
	for {
		if r.cur != nil {
			if err := r.cur.Close(); err != nil {
				return err
			}
		}
		if err := r.advance(); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}
