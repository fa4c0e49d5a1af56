package store

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/db/schema"
)

// The schema-upgrade lock.
//
// GET_LOCK is held by one server: on a Galera cluster two nodes each grant
// it, and two upgrades ran at once. The lock is therefore a row, which every
// node of a cluster certifies: it is taken by a conditional UPDATE that
// changes the row only when it is free or its lease has expired (rows
// affected 1), so of two nodes taking it at once one write set wins and
// the other fails certification (1213, retried, and then finds it held).
// The holder renews the lease while it works, and every bookkeeping write
// of the upgrade (a statement's progress, a version's record) goes in one
// transaction with a renewal that is conditional on still being the
// holder: a holder whose lease ran out and was taken over cannot record
// anything afterwards, and the new holder resumes from the progress rows.
// A holder that died blocks the others for at most one lease.
//
// DDL is not transactional and, on Galera, runs in total order (TOI) on
// every node: a statement a holder ran but could not record (it died, or
// lost its lease during a statement longer than the lease) runs again in
// the next holder, which is the crash window the progress rows already
// document at the top of schema.go.

const schemaLockDDL = `CREATE TABLE IF NOT EXISTS schema_lock (
    name     VARCHAR(64) NOT NULL PRIMARY KEY,
    holder   VARCHAR(128) NOT NULL DEFAULT '',
    expires  BIGINT NOT NULL DEFAULT 0,
    renewals BIGINT NOT NULL DEFAULT 0
) ` + schema.TableOptions

// schemaLockTable is left out of the drift check, as the progress table: it
// is bootstrap, created by the upgrade before any migration runs.
const schemaLockTable = "schema_lock"

// schemaLockName is the lock's row; the table is per database, so one
// name serves every database on a server.
const schemaLockName = "upgrade"

// The lease, how often the holder renews it, and how long a second upgrade
// waits. Variables so that tests can shorten them.
var (
	schemaLockLease = 60 * time.Second
	schemaLockWait  = 3 * time.Minute
)

// errSchemaLockLost means the upgrade's lease ran out and another upgrade
// took the lock: this one stops before recording anything more.
var errSchemaLockLost = errors.New("schema upgrade: lost the upgrade lock (its lease expired and another upgrade took it)")

const (
	schemaLockEnsure = `INSERT INTO schema_lock (name) VALUES (?) ON DUPLICATE KEY UPDATE name = name`
	// A holder changes the row (renewals always grows), so rows affected
	// is 1 exactly when the lock was free or expired.
	schemaLockTake = `UPDATE schema_lock SET holder = ?, expires = ?, renewals = renewals + 1
WHERE name = ? AND (holder = '' OR expires < ?)`
	schemaLockRenew = `UPDATE schema_lock SET expires = ?, renewals = renewals + 1
WHERE name = ? AND holder = ?`
	schemaLockRelease = `UPDATE schema_lock SET holder = '', expires = 0, renewals = renewals + 1
WHERE name = ? AND holder = ?`
)

// schemaLock is one holding of the upgrade lock.
type schemaLock struct {
	s      *Store
	holder string
	stop   context.CancelFunc
	done   chan struct{}
}

// schemaLockHolder names this process and holding, for an operator reading
// the row, and makes it unique.
func schemaLockHolder() string {
	host, _ := os.Hostname()
	var b [8]byte
	_, _ = crand.Read(b[:])
	return abbrev(fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:])), 120)
}

// lockSchema takes the upgrade lock, polling with back-off for up to
// schemaLockWait, and renews its lease until unlock. ctx is cancelled
// (through the returned context) when a renewal finds the lock lost.
func (s *Store) lockSchema(ctx context.Context) (*schemaLock, context.Context, error) {
	if _, err := s.db.ExecContext(ctx, schemaLockDDL); err != nil {
		return nil, nil, fmt.Errorf("schema upgrade: create the lock table: %w", err)
	}
	if err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, schemaLockEnsure, schemaLockName)
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("schema upgrade: create the lock row: %w", err)
	}
	l := &schemaLock{s: s, holder: schemaLockHolder(), done: make(chan struct{})}
	deadline := time.Now().Add(schemaLockWait)
	pause := 20 * time.Millisecond
	for {
		now := time.Now()
		var n int64
		err := s.inTx(ctx, func(tx *sqlx.Tx) error {
			res, err := tx.ExecContext(ctx, schemaLockTake, l.holder, now.Add(schemaLockLease).UnixMilli(),
				schemaLockName, now.UnixMilli())
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return nil, nil, fmt.Errorf("schema upgrade: take the upgrade lock: %w", err)
		}
		if n == 1 {
			break
		}
		if now.After(deadline) {
			return nil, nil, fmt.Errorf("schema upgrade: another upgrade of this database held the lock for %v "+
				"(row %q of table %s)", schemaLockWait, schemaLockName, schemaLockTable)
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(pause + rand.N(pause)):
		}
		pause = min(2*pause, time.Second)
	}
	lctx, cancel := context.WithCancelCause(ctx)
	l.stop = func() { cancel(nil) }
	go l.keep(lctx, cancel)
	return l, lctx, nil
}

// keep renews the lease every third of it until stopped; a renewal that
// finds another holder cancels the upgrade's context.
func (l *schemaLock) keep(ctx context.Context, cancel context.CancelCauseFunc) {
	defer close(l.done)
	t := time.NewTicker(schemaLockLease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := l.s.inTx(ctx, func(tx *sqlx.Tx) error { return l.renew(ctx, tx) })
		if errors.Is(err, errSchemaLockLost) {
			cancel(err)
			return
		}
		// Another error (the server unreachable a moment) is tried again at
		// the next tick; the bookkeeping writes check the lease themselves.
	}
}

// renew extends the lease through q, or returns errSchemaLockLost.
func (l *schemaLock) renew(ctx context.Context, q execer) error {
	res, err := q.ExecContext(ctx, schemaLockRenew, time.Now().Add(schemaLockLease).UnixMilli(), schemaLockName, l.holder)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n != 1 {
		return errSchemaLockLost
	}
	return nil
}

// write runs fn in a transaction that also renews the lease, conditional
// on this upgrade still holding it: the lock row is written with fn's
// rows, so a takeover on another node of a cluster and fn's write cannot
// both commit.
func (l *schemaLock) write(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	return l.s.inTx(ctx, func(tx *sqlx.Tx) error {
		if err := l.renew(ctx, tx); err != nil {
			return err
		}
		return fn(tx)
	})
}

// unlock stops the renewals and frees the lock, if still held.
func (l *schemaLock) unlock(ctx context.Context) {
	l.stop()
	<-l.done
	ctx = context.WithoutCancel(ctx)
	_ = l.s.inTx(ctx, func(tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, schemaLockRelease, schemaLockName, l.holder)
		return err
	})
}
