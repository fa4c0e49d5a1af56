// Package store is the only package that speaks SQL. It wraps a MySQL/MariaDB
// connection with one method per query, named TableVerb, and the row types of
// BOINC's tables. Every query keeps to what MySQL 8, MariaDB and TiDB all run.
//
// Writes are single conditional updates or short transactions; a claim whose
// condition no longer holds affects zero rows, which methods report as
// ErrConflict, not as a failure. Deadlocks and lock-wait timeouts are retried
// a bounded number of times.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/db/schema"
	"github.com/taskserver/taskserver/internal/dsnlist"
)

// ErrConflict means a conditional update found its row no longer in the
// expected state: someone else got there first. It is not a failure.
var ErrConflict = errors.New("row changed concurrently")

// ErrCommitUnknown means a transaction's connection was lost while its
// COMMIT was under way: the server may or may not have committed it. It is
// not retried (see inTx); it is a database failure, and the caller's next
// read of the rows shows which it was.
var ErrCommitUnknown = errors.New("connection lost during COMMIT: outcome unknown")

// ErrNotFound means the row asked for does not exist.
var ErrNotFound = errors.New("not found")

// Store is a handle on the project database.
type Store struct {
	db *observedDB
	// prep is nil unless Options.Prepared: then the hot queries run as
	// server-side prepared statements.
	prep *stmtCache
	// events, retries and backoff are Options.Events, Options.Retries
	// and Options.RetryBackoff with the defaults applied.
	events  Events
	retries int
	backoff time.Duration
}

// Options tunes the connection pool.
type Options struct {
	// MaxOpenConns bounds connections to the server; 0 means 16.
	MaxOpenConns int
	// Prepared runs the queries a program issues on every request (the
	// scheduler's user, host and in-progress reads) as server-side prepared
	// statements, prepared once per connection. Every other statement has
	// its parameters interpolated by the driver and is parsed by the server
	// each time; for a query run thousands of times a second the parse is
	// most of its cost. It costs one prepared statement per hot query and
	// connection on the server.
	Prepared bool
	// Observer, if set, is told of every database call: its method, its
	// duration and its error. Daemons feed it into their query latency and
	// error metrics.
	Observer Observer
	// Events, if set, is told of every retry and failover; daemons count
	// them.
	Events Events
	// Retries is how many times a statement or transaction refused by the
	// server (deadlock, lock-wait timeout, node not ready) or cut off
	// before it could have committed is run again; 0 means DefaultRetries,
	// a negative count none.
	Retries int
	// RetryBackoff caps the pause between attempts when no node answers,
	// and between Open's connection attempts, and is the least time a
	// node's fault is retried for, beyond Retries (see withRetry); 0
	// means DefaultRetryBackoff.
	RetryBackoff time.Duration
	// SyncReads makes every read wait until the node it runs on has
	// applied every write the cluster committed before the read began
	// (wsrep_sync_wait = 1 on each connection), for a program whose reads
	// must see what another node just wrote: a user who submits a batch
	// through one scheduler and asks for its status through another. Each
	// read then costs a round trip within the cluster. A server without
	// wsrep_sync_wait (MySQL) ignores it.
	SyncReads bool
	// SplitPackets sends the statements a transaction batches into one
	// packet one at a time on every connection. A Galera node's
	// connections always do (see splitPacket); this is for a server
	// that does not say it is one, and for tests of that path.
	SplitPackets bool
}

// SQLMode is the sql_mode of every connection, whatever the server's
// default: strict, so a value that does not fit its column is an error, not
// silently truncated or replaced (the programs bound and clean what they
// store and rely on a failure being loud); division by zero an error; and no
// silent change of a table's engine from InnoDB. Every mode named exists on
// MariaDB and MySQL 8; a server's ANSI_QUOTES, ONLY_FULL_GROUP_BY or
// NO_BACKSLASH_ESCAPES would change what the queries mean, so they are off.
const SQLMode = "STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"

// Open connects to the database named by dsn, retrying with back-off
// until ctx ends. dsn is one go-sql-driver/mysql DSN (e.g.
// "root@tcp(127.0.0.1:3306)/boinc") or several separated by commas, the
// addresses of one database (the nodes of a Galera cluster): new
// connections go to one node, and to the next in the list when it cannot
// be reached or is not ready. Every connection speaks utf8mb4, runs with
// SQLMode and autocommit on, and takes several statements in one packet,
// overriding the DSN and the server's configuration: the programs' queries
// assume them.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	cfgs, err := dsnlist.Split(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse database DSN: %w", err)
	}
	conn := &connector{syncReads: opts.SyncReads, events: opts.Events, splitPackets: opts.SplitPackets}
	for _, cfg := range cfgs {
		cfg.ParseTime = false
		cfg.InterpolateParams = true
		// A transaction's reads, and then its writes, go to the server
		// as one packet each (stmtBatch, schedRead): a round trip per
		// statement was most of the scheduler's cost per request. Every
		// argument is interpolated by the driver, escaped, never
		// concatenated (TestSQLIsParameterised).
		cfg.MultiStatements = true
		if err := cfg.Apply(mysql.Charset(schema.Charset, schema.Collation)); err != nil {
			return nil, fmt.Errorf("database DSN: %w", err)
		}
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params["sql_mode"] = "'" + SQLMode + "'"
		cfg.Params["autocommit"] = "1"
		if cfg.Timeout == 0 {
			cfg.Timeout = dialTimeout
		}
		node, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, fmt.Errorf("database DSN: %w", err)
		}
		conn.nodes = append(conn.nodes, node)
		conn.addrs = append(conn.addrs, cfg.Addr)
	}
	db := sqlx.NewDb(sql.OpenDB(conn), "mysql")
	n := opts.MaxOpenConns
	if n <= 0 {
		n = 16
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxLifetime(5 * time.Minute)
	retries := opts.Retries
	switch {
	case retries == 0:
		retries = DefaultRetries
	case retries < 0:
		retries = 0
	}
	backoff := opts.RetryBackoff
	if backoff <= 0 {
		backoff = DefaultRetryBackoff
	}
	delay := 100 * time.Millisecond
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = db.PingContext(pctx)
		cancel()
		if err == nil {
			st := &Store{db: &observedDB{DB: db, obs: opts.Observer}, events: opts.Events, retries: retries, backoff: backoff}
			if opts.Prepared {
				st.prep = &stmtCache{db: db, stmts: map[string]*sqlx.Stmt{}}
			}
			return st, nil
		}
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number != erNotReady {
			// The server answered and refused: waiting will not help.
			db.Close()
			return nil, fmt.Errorf("connect to database: %w", err)
		}
		select {
		case <-ctx.Done():
			db.Close()
			return nil, fmt.Errorf("connect to database: %w", err)
		case <-time.After(delay):
		}
		delay = min(delay*2, backoff)
	}
}

// Close releases the prepared statements and the connection pool.
func (s *Store) Close() error {
	if s.prep != nil {
		s.prep.close()
	}
	return s.db.Close()
}

// stmtCache holds one prepared statement per query text. database/sql
// prepares a statement on each connection the first time it runs there and
// keeps it, so after warm-up an execution is one round trip without a parse.
type stmtCache struct {
	db    *sqlx.DB
	mu    sync.Mutex
	stmts map[string]*sqlx.Stmt
}

// get returns the statement for query, preparing it on first use.
func (c *stmtCache) get(ctx context.Context, query string) (*sqlx.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.stmts[query]; ok {
		return st, nil
	}
	st, err := c.db.PreparexContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.stmts[query] = st
	return st, nil
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for q, st := range c.stmts {
		_ = st.Close()
		delete(c.stmts, q)
	}
}

// hotGet is GetContext for a query run on every request: prepared when the
// store was opened with Options.Prepared.
func (s *Store) hotGet(ctx context.Context, dest any, query string, args ...any) (err error) {
	if s.prep == nil {
		return s.db.GetContext(ctx, dest, query, args...)
	}
	if s.db.obs != nil {
		defer func(start time.Time) { s.db.done(start, err) }(time.Now())
	}
	st, err := s.prep.get(ctx, query)
	if err != nil {
		return err
	}
	return st.GetContext(ctx, dest, args...)
}

// hotSelect is SelectContext for a query run on every request, as hotGet.
func (s *Store) hotSelect(ctx context.Context, dest any, query string, args ...any) (err error) {
	if s.prep == nil {
		return s.db.SelectContext(ctx, dest, query, args...)
	}
	if s.db.obs != nil {
		defer func(start time.Time) { s.db.done(start, err) }(time.Now())
	}
	st, err := s.prep.get(ctx, query)
	if err != nil {
		return err
	}
	return st.SelectContext(ctx, dest, args...)
}

// DB exposes the handle for tests in other packages that must inspect rows
// directly. Production code calls Store methods.
func (s *Store) DB() *sqlx.DB { return s.db.DB }

// Ping checks the connection.
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// withRetry runs fn, and runs it again, up to s.retries times more, after
// an error that proves it did not take effect and may not recur: a
// deadlock or Galera certification conflict (1213) or a lock-wait timeout
// (1205), which the server resolved by rolling the statement back; a node
// that refused the statement (1047); no node reachable; a read whose
// connection died; a transaction whose connection died before its COMMIT
// (inTx). A write whose connection died after it was sent is not retried:
// it may have committed (see inTx). Each retry is told to s.events.
//
// A node lost or refusing is retried for at least s.backoff from the
// first such error, however many attempts that takes: a cluster that
// loses a node can fall out of its primary component for a few seconds
// while it re-forms (seen in CI: about 2 s on every node), longer than
// the first attempts' doubling pauses add up to.
func (s *Store) withRetry(ctx context.Context, fn func() error) error {
	var err error
	var nodeDown time.Time // the first error that was a node's
	for attempt := 0; ; attempt++ {
		err = fn()
		if err == nil || s.retries == 0 {
			return err
		}
		code, counted := retryCode(err)
		if code == "" {
			return err
		}
		if nodeCode(code) && nodeDown.IsZero() {
			nodeDown = time.Now()
		}
		if attempt >= s.retries && (nodeDown.IsZero() || time.Since(nodeDown) >= s.backoff) {
			return err
		}
		if !counted && s.events != nil {
			s.events.Retry(code)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retryPause(code, attempt, s.backoff)):
		}
	}
}

// inTx runs fn in one transaction, retried as a whole (withRetry) on a
// deadlock, a refusal, or a connection lost before COMMIT was sent: the
// server rolls back a transaction whose connection ends, so nothing of it
// was kept. A connection lost during COMMIT is different: the server may
// have committed before the connection went, and a transaction here is not
// in general idempotent (an insert would be doubled, a conditional update
// would find its own write and report ErrConflict), so that error is
// returned as it is, for the caller to treat as any failed write: the pass
// fails and its rows are read again next pass, the state they are in
// deciding what is left to do.
func (s *Store) inTx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	return s.withRetry(ctx, func() (err error) {
		if s.db.obs != nil {
			defer func(start time.Time) { s.db.done(start, err) }(time.Now())
		}
		// READ COMMITTED, the session's level (set on every connection; see
		// connector.prepare, and SchemaCheck): every transaction here touches
		// a few rows by key, and the gap locks REPEATABLE READ takes would
		// only cause deadlocks. Asking for it here would cost every
		// transaction a SET TRANSACTION round trip.
		tx, err := s.db.BeginTxx(ctx, nil)
		if err != nil {
			return beforeCommit(err)
		}
		if err := fn(tx); err != nil {
			_ = tx.Rollback()
			return beforeCommit(err)
		}
		if err := tx.Commit(); err != nil {
			if code, _ := retryCode(err); code == "" && connLost(err) {
				return fmt.Errorf("%w: %w", ErrCommitUnknown, err)
			}
			return err
		}
		return nil
	})
}

// beforeCommit marks a connection lost inside a transaction, before its
// COMMIT, as safe to run again.
func beforeCommit(err error) error {
	if code, _ := retryCode(err); code == "" && connLost(err) {
		return &txAbortedError{err: err}
	}
	return err
}

// execChanged runs a conditional statement inside tx and returns miss when
// it changed no row: the condition no longer held.
func execChanged(ctx context.Context, tx *sqlx.Tx, miss error, query string, args ...any) error {
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return miss
	}
	return nil
}

// selectIn runs query, whose one "IN (?)" takes the values of list, and
// returns the rows; an empty list returns nothing without a query. what
// names the query in errors.
func selectIn[T any, V any](ctx context.Context, s *Store, what, query string, list []V) ([]T, error) {
	if len(list) == 0 {
		return nil, nil
	}
	q, args, err := sqlx.In(query, list)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var out []T
	if err := s.db.SelectContext(ctx, &out, q, args...); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// exec runs one statement with retry and returns rows affected.
func (s *Store) exec(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := s.withRetry(ctx, func() error {
		res, err := s.db.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}
