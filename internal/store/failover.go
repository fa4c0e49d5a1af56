package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
)

// A program may know several database addresses (the nodes of a Galera
// cluster). The pool's connector opens every new connection on the current
// node and, when that node cannot be reached or is not ready, moves on to
// the next one: a failover. A connection that a node refuses to serve
// (error 1047, "WSREP has not yet prepared node for application use"), or
// that died, is discarded, and the statement runs again on a new
// connection where that is safe: see withRetry and inTx.

// Events is told of what the store does to get past a failing node; a
// daemon counts them (db_retries_total, db_failovers_total). Its methods
// run on the caller's goroutine and must be quick.
type Events interface {
	// Retry is called once for each statement or transaction the store
	// runs again, with why: "1213" (deadlock or certification conflict),
	// "1205" (lock-wait timeout), "1047" (node not ready), "1180" (COMMIT
	// refused), "1064" (a table copy that failed to load its triggers) or
	// "conn" (the connection or every node was unreachable).
	Retry(code string)
	// Failover is called when new connections move to another address.
	Failover()
}

// Retry codes, the label values Events.Retry receives.
const (
	RetryDeadlock = "1213"
	RetryLockWait = "1205"
	RetryNotReady = "1047"
	// RetryCommitFailed is a COMMIT the server failed and rolled back:
	// on Galera, a node that left the primary component while the
	// transaction was being replicated ("Error while appending streaming
	// replication fragment (provider status: Not connected to Primary
	// Component)").
	RetryCommitFailed = "1180"
	// RetryTriggers is a write refused because the server's cached copy
	// of the table had failed to load its triggers (see reloadTriggers).
	RetryTriggers = "1064"
	RetryConn     = "conn"
)

// RetryCodes lists every code Events.Retry may receive, for a metric that
// shows each at 0 before its first retry.
var RetryCodes = []string{RetryDeadlock, RetryLockWait, RetryNotReady, RetryCommitFailed, RetryTriggers, RetryConn}

// DefaultRetries is the Options.Retries of a zero Options.
const DefaultRetries = 5

// DefaultRetryBackoff is the Options.RetryBackoff of a zero Options: long
// enough for a Galera cluster to evict a dead node (its suspect timeout
// is 5 s) within a few attempts, short enough that a request is not held
// for long.
const DefaultRetryBackoff = 5 * time.Second

// dialTimeout bounds the TCP connect to one address unless its DSN sets
// timeout: an address that swallows packets would otherwise hold a new
// connection for the system's minutes-long connect timeout before the next
// address is tried.
const dialTimeout = 5 * time.Second

// erNotReady is MariaDB's ER_UNKNOWN_COM_ERROR, the error a Galera node
// that is not part of a primary, synced component answers to everything.
const erNotReady = 1047

// erCommitFailed is ER_ERROR_DURING_COMMIT: the engine or, on Galera, the
// replication failed the COMMIT, and the transaction was rolled back.
const erCommitFailed = 1180

// NodesDownError is returned when no address gave a usable connection:
// each was unreachable, refused us or was not ready. Nothing was sent to
// any node, so running the statement again later is safe.
type NodesDownError struct {
	errs []error
}

func (e *NodesDownError) Error() string {
	if len(e.errs) == 1 {
		return "database " + e.errs[0].Error()
	}
	msgs := make([]string, len(e.errs))
	for i, err := range e.errs {
		msgs[i] = err.Error()
	}
	return fmt.Sprintf("every database address failed (%d): %s", len(e.errs), strings.Join(msgs, "; "))
}

// Unwrap gives each address's error, so errors.As finds a server's
// refusal (a wrong password) among them.
func (e *NodesDownError) Unwrap() []error { return e.errs }

// NotReadyError means a Galera node answered but is not serving: it is not
// in a primary component (wsrep_ready) or not synced with it
// (wsrep_local_state_comment, e.g. "Joining" or "Donor/Desynced").
type NotReadyError struct {
	Ready, State string
}

func (e *NotReadyError) Error() string {
	return fmt.Sprintf("node not ready: wsrep_ready=%s wsrep_local_state_comment=%s", e.Ready, e.State)
}

// refusedError is a statement's error that proves the statement did not
// take effect: the node refused it (1047) or failed its COMMIT (1180), a
// table copy it was handed had failed to load (reloadTriggers), the driver
// found the connection dead before sending it, or it was a read whose
// connection died, which is safe to run again. It is a driver.ErrBadConn, so database/sql discards the
// connection and runs a statement outside a transaction again on another
// (a new one when the others fail too), and withRetry runs a transaction
// again. The wrapping connection that made it has already counted the
// retry.
type refusedError struct {
	code string
	err  error
}

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// Is makes the error a driver.ErrBadConn to database/sql.
func (e *refusedError) Is(target error) bool { return target == driver.ErrBadConn }

// txAbortedError is a transaction's error from before its COMMIT that
// came from its connection dying: the server rolls back a transaction
// whose connection ends, so it is safe to run it again.
type txAbortedError struct{ err error }

func (e *txAbortedError) Error() string { return e.err.Error() }
func (e *txAbortedError) Unwrap() error { return e.err }

// connLost reports whether err is a connection that failed under a
// statement: the driver's bad or invalid connection, or a network error.
// A context that ended is not one: it looks like a network timeout.
func connLost(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) || errors.As(err, &ne)
}

// retryCode classifies err for withRetry: the code of a retry ("" for an
// error not safe or not worth retrying) and whether it was counted where it
// was seen.
func retryCode(err error) (code string, counted bool) {
	var re *refusedError
	if errors.As(err, &re) {
		return re.code, true
	}
	var nd *NodesDownError
	var ta *txAbortedError
	if errors.As(err, &nd) || errors.As(err, &ta) {
		return RetryConn, false
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1213, 1205, erNotReady, erCommitFailed:
			return strconv.Itoa(int(me.Number)), false
		}
	}
	return "", false
}

// retryable reports whether withRetry would run the statement again after
// err.
func retryable(err error) bool {
	code, _ := retryCode(err)
	return code != ""
}

// nodeCode reports whether a retry code is a node's fault (lost,
// unreachable, out of its primary component) rather than a conflict with
// another transaction.
func nodeCode(code string) bool {
	return code == RetryConn || code == RetryNotReady || code == RetryCommitFailed
}

// retryPause is how long withRetry waits before attempt number attempt+1.
// A deadlock or lock wait is another transaction in the way: a few
// milliseconds, jittered so the two do not meet again. A node or a
// connection lost wants time for the cluster to settle: doubling from
// 50 ms up to max.
func retryPause(code string, attempt int, max time.Duration) time.Duration {
	if code == RetryDeadlock || code == RetryLockWait {
		return time.Duration(5+rand.IntN(20*(attempt+1))) * time.Millisecond
	}
	d := min(50*time.Millisecond<<min(attempt, 16), max)
	return d/2 + rand.N(d/2+1)
}

// connector is the pool's driver.Connector over every address.
type connector struct {
	nodes []driver.Connector
	addrs []string // host:port of each node, for errors: a DSN may hold a password
	cur   atomic.Int64
	// syncReads sets wsrep_sync_wait on each new connection (Options.SyncReads).
	syncReads bool
	events    Events
	// reloading is set while a reloadTriggers flush runs, so that writes
	// refused at once by the same broken table flush it once; reloads
	// tracks the flushes for Close; reloadErr is the last one's outcome.
	reloading atomic.Bool
	reloads   sync.WaitGroup
	reloadMu  sync.Mutex
	reloadErr error
	// splitPackets splits statement packets on every connection, not only
	// on a Galera node's (Options.SplitPackets).
	splitPackets bool
}

// Close is called by the pool's Close: it waits for a reloadTriggers
// flush under way.
func (c *connector) Close() error {
	c.reloads.Wait()
	return nil
}

// Driver is the go-sql-driver/mysql driver.
func (c *connector) Driver() driver.Driver { return c.nodes[0].Driver() }

// Connect opens a connection on the current node, or on the next that
// works, round the list once. Trying each address once and returning is
// what keeps a call's wait bounded; the pauses between rounds are
// withRetry's and Open's.
func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	start := int(c.cur.Load())
	var errs []error
	for i := range c.nodes {
		idx := (start + i) % len(c.nodes)
		conn, err := c.open(ctx, idx)
		if err == nil {
			if idx != start && c.cur.CompareAndSwap(int64(start), int64(idx)) && c.events != nil {
				c.events.Failover()
			}
			return conn, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", c.addrs[idx], err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, &NodesDownError{errs: errs}
}

// sessionIsolation sets a connection's isolation level (prepare).
const sessionIsolation = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"

// open connects to node idx and checks it is ready.
func (c *connector) open(ctx context.Context, idx int) (driver.Conn, error) {
	conn, err := c.nodes[idx].Connect(ctx)
	if err != nil {
		return nil, err
	}
	galera, err := c.prepare(ctx, conn)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return &failoverConn{conn: conn, c: c, node: idx, split: galera || c.splitPackets}, nil
}

// prepare checks a new connection's node is ready and sets what the
// session needs. A server without Galera (wsrep_on OFF or absent, as on
// MySQL) is always ready. It costs two round trips, three on a cluster,
// four with syncReads, once per connection.
func (c *connector) prepare(ctx context.Context, conn driver.Conn) (galera bool, err error) {
	vars, err := showValues(ctx, conn, "SHOW VARIABLES WHERE Variable_name IN ('wsrep_on', 'wsrep_sync_wait')")
	if err != nil {
		return false, err
	}
	galera = vars["wsrep_on"] == "ON"
	if galera {
		st, err := showValues(ctx, conn,
			"SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_ready', 'wsrep_local_state_comment')")
		if err != nil {
			return false, err
		}
		if err := nodeReady(st); err != nil {
			return false, err
		}
	}
	// READ COMMITTED for the session, in the syntax MySQL, MariaDB and TiDB
	// share: every transaction (inTx) runs at it without a SET TRANSACTION
	// round trip of its own, and a single statement never reads rows
	// another program's transaction may still roll back.
	if _, err := conn.(driver.ExecerContext).ExecContext(ctx, sessionIsolation, nil); err != nil {
		return false, err
	}
	if _, ok := vars["wsrep_sync_wait"]; ok && c.syncReads {
		// 1: a read waits until this node has applied every write the
		// cluster committed before it began. MySQL has no such variable.
		if _, err := conn.(driver.ExecerContext).ExecContext(ctx, "SET SESSION wsrep_sync_wait = 1", nil); err != nil {
			return false, err
		}
	}
	return galera, nil
}

// nodeReady judges a Galera node by its status variables: it serves
// only in a primary component (wsrep_ready ON) and once it holds every
// write of it (Synced); a joiner, a donor or a node cut off from the
// majority refuses or would serve stale rows.
func nodeReady(status map[string]string) error {
	if status["wsrep_ready"] != "ON" || status["wsrep_local_state_comment"] != "Synced" {
		return &NotReadyError{Ready: status["wsrep_ready"], State: status["wsrep_local_state_comment"]}
	}
	return nil
}

// showValues runs a SHOW statement of (name, value) rows on conn and
// returns them as a map.
func showValues(ctx context.Context, conn driver.Conn, query string) (map[string]string, error) {
	out := map[string]string{}
	err := driverRows(ctx, conn, query, func(row []driver.Value) {
		if len(row) >= 2 {
			out[asString(row[0])] = asString(row[1])
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// driverRows runs query on a driver connection, outside the pool, and
// calls fn with each row.
func driverRows(ctx context.Context, conn driver.Conn, query string, fn func(row []driver.Value)) error {
	rows, err := conn.(driver.QueryerContext).QueryContext(ctx, query, nil)
	if err != nil {
		return err
	}
	defer rows.Close()
	dest := make([]driver.Value, len(rows.Columns()))
	for {
		err := rows.Next(dest)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		fn(dest)
	}
}

// asString is a text column's value as the driver gives it.
func asString(v driver.Value) string {
	switch x := v.(type) {
	case []byte:
		return string(x)
	case string:
		return x
	case nil:
		return ""
	default:
		return fmt.Sprint(x)
	}
}

// failoverConn is a driver connection that turns the errors proving a
// statement did not run into refusedError, and is discarded by the pool
// once its node refused it: IsValid and ResetSession say so.
type failoverConn struct {
	conn driver.Conn
	c    *connector
	node int // index of the address it was opened on
	// split sends a packet of several statements one statement at a
	// time: see splitPacket.
	split bool
	// bad is set once the node refused a statement; database/sql uses a
	// connection from one goroutine at a time.
	bad bool
}

// refused turns err into a refusedError when the statement did not run or,
// for a read (idempotent), when the connection died under it, and counts
// the retry that database/sql or withRetry will make. A write refused for
// its table's broken triggers first has them reloaded (reloadTriggers).
func (f *failoverConn) refused(ctx context.Context, err error, read bool) error {
	if err == nil {
		return nil
	}
	var me *mysql.MySQLError
	var code string
	switch {
	case errors.As(err, &me) && (me.Number == erNotReady || me.Number == erCommitFailed):
		// A node that refuses, or fails a COMMIT, is most likely out of
		// its cluster's primary component: a new connection is checked.
		code = strconv.Itoa(int(me.Number))
	case brokenTables(err):
		code = RetryTriggers
		if rerr := f.c.lastReloadError(); rerr != nil {
			err = fmt.Errorf("%w (the last reload of the tables failed: %w)", err, rerr)
		}
		f.c.reloadTriggers(f.node)
	case errors.Is(err, driver.ErrBadConn):
		// The driver found the connection dead before sending anything.
		code = RetryConn
	case read && connLost(err):
		code = RetryConn
	default:
		return err
	}
	f.bad = true
	if f.c.events != nil {
		f.c.events.Retry(code)
	}
	return &refusedError{code: code, err: err}
}

// Prepare is PrepareContext without a context.
func (f *failoverConn) Prepare(query string) (driver.Stmt, error) {
	return f.PrepareContext(context.Background(), query)
}

// PrepareContext prepares on the wrapped connection; the statement's
// errors are classified like the connection's.
func (f *failoverConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	st, err := f.conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, f.refused(ctx, err, false)
	}
	return &failoverStmt{stmt: st, f: f}, nil
}

// Close closes the wrapped connection.
func (f *failoverConn) Close() error { return f.conn.Close() }

// Begin is BeginTx with default options.
func (f *failoverConn) Begin() (driver.Tx, error) {
	return f.BeginTx(context.Background(), driver.TxOptions{})
}

// BeginTx starts a transaction whose COMMIT is classified too: a node
// that left its component refuses it with 1047, and nothing committed.
func (f *failoverConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := f.conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, f.refused(ctx, err, false)
	}
	return &failoverTx{tx: tx, f: f}, nil
}

// ExecContext runs a write. A connection lost after it was sent is not
// turned into a retry: the write may have committed.
func (f *failoverConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if f.split && strings.Contains(query, stmtSeparator) {
		return f.execSplit(ctx, query, args)
	}
	res, err := f.conn.(driver.ExecerContext).ExecContext(ctx, query, args)
	return res, f.refused(ctx, err, false)
}

// QueryContext runs a read: every query the store sends this way is a
// SELECT or SHOW, so a connection lost under it is a retry.
func (f *failoverConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if f.split && strings.Contains(query, stmtSeparator) {
		return f.querySplit(ctx, query, args)
	}
	rows, err := f.conn.(driver.QueryerContext).QueryContext(ctx, query, args)
	if err != nil {
		return nil, f.refused(ctx, err, true)
	}
	return &failoverRows{Rows: rows, ctx: ctx, f: f}, nil
}

// Ping checks the wrapped connection.
func (f *failoverConn) Ping(ctx context.Context) error {
	return f.refused(ctx, f.conn.(driver.Pinger).Ping(ctx), true)
}

// ResetSession refuses a connection whose node refused it, so the pool
// takes another.
func (f *failoverConn) ResetSession(ctx context.Context) error {
	if f.bad {
		return driver.ErrBadConn
	}
	return f.conn.(driver.SessionResetter).ResetSession(ctx)
}

// IsValid is false once the node refused the connection, so the pool
// closes it rather than keep it.
func (f *failoverConn) IsValid() bool {
	return !f.bad && f.conn.(driver.Validator).IsValid()
}

// CheckNamedValue lets the driver convert arguments as it does unwrapped.
func (f *failoverConn) CheckNamedValue(nv *driver.NamedValue) error {
	return f.conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

// failoverTx classifies a transaction's COMMIT.
type failoverTx struct {
	tx driver.Tx
	f  *failoverConn
}

// Commit commits; a 1047 is a refusal (nothing committed). A connection
// lost during COMMIT is left as it is: its outcome is unknown.
func (t *failoverTx) Commit() error {
	return t.f.refused(context.Background(), t.tx.Commit(), false)
}

// Rollback rolls back.
func (t *failoverTx) Rollback() error { return t.tx.Rollback() }

// failoverStmt is a prepared statement whose errors are classified like
// its connection's.
type failoverStmt struct {
	stmt driver.Stmt
	f    *failoverConn
}

// Close closes the statement.
func (s *failoverStmt) Close() error { return s.stmt.Close() }

// NumInput is the statement's parameter count.
func (s *failoverStmt) NumInput() int { return s.stmt.NumInput() }

// Exec is the legacy form database/sql does not call when ExecContext exists.
func (s *failoverStmt) Exec(args []driver.Value) (driver.Result, error) {
	return nil, errors.New("store: Stmt.Exec without a context is not supported")
}

// Query is the legacy form database/sql does not call when QueryContext exists.
func (s *failoverStmt) Query(args []driver.Value) (driver.Rows, error) {
	return nil, errors.New("store: Stmt.Query without a context is not supported")
}

// ExecContext runs the prepared write.
func (s *failoverStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	res, err := s.stmt.(driver.StmtExecContext).ExecContext(ctx, args)
	return res, s.f.refused(ctx, err, false)
}

// QueryContext runs the prepared read.
func (s *failoverStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := s.stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
	if err != nil {
		return nil, s.f.refused(ctx, err, true)
	}
	return &failoverRows{Rows: rows, ctx: ctx, f: s.f}, nil
}

// CheckNamedValue lets the driver convert arguments as it does unwrapped.
func (s *failoverStmt) CheckNamedValue(nv *driver.NamedValue) error {
	return s.stmt.(driver.NamedValueChecker).CheckNamedValue(nv)
}

// failoverRows classifies the errors that come with a query's later
// results: a packet of several statements (stmtBatch) sends its writes
// through QueryContext to read their row counts, and a write that fails
// there is reported by NextResultSet, not by QueryContext. Those errors
// are not taken for a lost read: the packet held writes.
type failoverRows struct {
	driver.Rows
	ctx context.Context
	f   *failoverConn
}

// Next reads the next row.
func (r *failoverRows) Next(dest []driver.Value) error {
	return r.classify(r.Rows.Next(dest))
}

// HasNextResultSet reports whether another result follows.
func (r *failoverRows) HasNextResultSet() bool {
	n, ok := r.Rows.(driver.RowsNextResultSet)
	return ok && n.HasNextResultSet()
}

// NextResultSet moves to the next result, whose statement's error it
// returns.
func (r *failoverRows) NextResultSet() error {
	n, ok := r.Rows.(driver.RowsNextResultSet)
	if !ok {
		return io.EOF
	}
	return r.classify(n.NextResultSet())
}

// classify passes the end of rows through and classifies any other error.
func (r *failoverRows) classify(err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	return r.f.refused(r.ctx, err, false)
}
