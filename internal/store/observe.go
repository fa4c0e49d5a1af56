package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
)

// Observer is told of every database call a Store makes: op is the exported
// Store method that made it ("WorkunitListDue"), d how long the call took
// and err what it returned. A transaction is one call, from BEGIN to
// COMMIT; a streaming query is timed until its first row is ready, not
// while the caller reads the rest. A retried deadlock is one call per
// attempt. Observer runs on the caller's goroutine and must be quick; the
// set of ops is bounded by the Store's method set, so it is a fit label.
type Observer func(op string, d time.Duration, err error)

// OpOther is the op of a call made from outside an exported Store method.
const OpOther = "other"

// QueryFailed reports whether err, returned by a Store call, is a failure
// worth counting as a database error: a conflict, a row not found or a
// cancelled context are outcomes, not failures.
func QueryFailed(err error) bool {
	return err != nil && !errors.Is(err, ErrConflict) && !errors.Is(err, ErrNotFound) &&
		!errors.Is(err, sql.ErrNoRows) && !errors.Is(err, context.Canceled)
}

// IsDBError reports whether err came from the database or the connection
// to it (a server error, a broken connection, a network failure), as
// opposed to one raised by the program itself.
func IsDBError(err error) bool {
	var me *mysql.MySQLError
	var ne net.Error
	var nd *NodesDownError
	return errors.As(err, &me) || errors.As(err, &ne) || errors.As(err, &nd) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, sql.ErrConnDone) || errors.Is(err, sql.ErrTxDone)
}

// observedDB is the pool with the calls the store makes timed and reported
// to obs; with obs nil each call costs one comparison more than sqlx's.
// Calls not overridden here (Ping, Close, Preparex) pass through untimed.
type observedDB struct {
	*sqlx.DB
	obs Observer
}

func (d *observedDB) done(start time.Time, err error) {
	d.obs(callerOp(), time.Since(start), err)
}

// GetContext is sqlx's GetContext, observed.
func (d *observedDB) GetContext(ctx context.Context, dest any, query string, args ...any) error {
	if d.obs == nil {
		return d.DB.GetContext(ctx, dest, query, args...)
	}
	start := time.Now()
	err := d.DB.GetContext(ctx, dest, query, args...)
	d.done(start, err)
	return err
}

// SelectContext is sqlx's SelectContext, observed.
func (d *observedDB) SelectContext(ctx context.Context, dest any, query string, args ...any) error {
	if d.obs == nil {
		return d.DB.SelectContext(ctx, dest, query, args...)
	}
	start := time.Now()
	err := d.DB.SelectContext(ctx, dest, query, args...)
	d.done(start, err)
	return err
}

// ExecContext is database/sql's ExecContext, observed.
func (d *observedDB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if d.obs == nil {
		return d.DB.ExecContext(ctx, query, args...)
	}
	start := time.Now()
	res, err := d.DB.ExecContext(ctx, query, args...)
	d.done(start, err)
	return res, err
}

// NamedExecContext is sqlx's NamedExecContext, observed.
func (d *observedDB) NamedExecContext(ctx context.Context, query string, arg any) (sql.Result, error) {
	if d.obs == nil {
		return d.DB.NamedExecContext(ctx, query, arg)
	}
	start := time.Now()
	res, err := d.DB.NamedExecContext(ctx, query, arg)
	d.done(start, err)
	return res, err
}

// QueryContext is database/sql's QueryContext, observed until the first
// row is ready.
func (d *observedDB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if d.obs == nil {
		return d.DB.QueryContext(ctx, query, args...)
	}
	start := time.Now()
	rows, err := d.DB.QueryContext(ctx, query, args...)
	d.done(start, err)
	return rows, err
}

// QueryxContext is sqlx's QueryxContext, observed until the first row is
// ready.
func (d *observedDB) QueryxContext(ctx context.Context, query string, args ...any) (*sqlx.Rows, error) {
	if d.obs == nil {
		return d.DB.QueryxContext(ctx, query, args...)
	}
	start := time.Now()
	rows, err := d.DB.QueryxContext(ctx, query, args...)
	d.done(start, err)
	return rows, err
}

// opCache maps a return address on the stack to the exported Store method
// it lies in ("" for none), so the stack is symbolised once per call site.
var opCache sync.Map

const storeMethodPrefix = "github.com/taskserver/taskserver/internal/store.(*Store)."

// callerOp names the exported Store method on the stack above the observed
// call. Walking a few return addresses and reading a cache costs well under
// a microsecond, against the tens of microseconds of a round trip.
func callerOp() string {
	var pcs [16]uintptr
	n := runtime.Callers(3, pcs[:])
	for _, pc := range pcs[:n] {
		if v, ok := opCache.Load(pc); ok {
			if op := v.(string); op != "" {
				return op
			}
			continue
		}
		op := opAt(pc)
		opCache.Store(pc, op)
		if op != "" {
			return op
		}
	}
	return OpOther
}

// opAt returns the innermost exported Store method among the (possibly
// inlined) functions at return address pc, or "".
func opAt(pc uintptr) string {
	frames := runtime.CallersFrames([]uintptr{pc})
	for {
		f, more := frames.Next()
		if name, ok := strings.CutPrefix(f.Function, storeMethodPrefix); ok &&
			name != "" && name[0] >= 'A' && name[0] <= 'Z' && !strings.Contains(name, ".") {
			return name
		}
		if !more {
			return ""
		}
	}
}
