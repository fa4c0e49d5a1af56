package store

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/jmoiron/sqlx"
)

// ThroughputKind is an event the throughput table counts.
type ThroughputKind int

// The events counted, with the values the kind column holds.
const (
	// ThroughputReported is a result reported by its host (the scheduler).
	ThroughputReported ThroughputKind = 1
	// ThroughputValidated is a result given a verdict, valid or invalid
	// (the validator).
	ThroughputValidated ThroughputKind = 2
	// ThroughputAssimilated is a job handed to the project (the
	// assimilator).
	ThroughputAssimilated ThroughputKind = 3
)

// throughputShards is how many rows one minute's count of one kind is
// spread over: each transaction adds to one picked at random, so that
// concurrent writers (two schedulers' group commits, validator replicas,
// nodes of a cluster) seldom wait for one row or conflict on it, while the
// page still sums at most a day of minutes times this many rows per kind.
const throughputShards = 16

// ThroughputRetention is how long db_purge keeps the per-minute rows: the
// page reads the last day; a second day leaves room for a purge that did
// not run for a while.
const ThroughputRetention = 2 * 86400

const throughputAdd = `INSERT INTO throughput (minute, kind, shard, n) VALUES (?, ?, ?, ?)
ON DUPLICATE KEY UPDATE n = n + ?`

// addThroughput counts n events of kind at Unix time now in tx, the
// transaction that makes them happen, so they are counted exactly when
// they commit: a rolled-back or retried transaction counts nothing twice.
func addThroughput(ctx context.Context, tx *sqlx.Tx, kind ThroughputKind, now int64, n int) error {
	w := newStmtBatch(ctx, tx)
	w.throughput(kind, now, n)
	if err := w.run(); err != nil {
		return fmt.Errorf("count %d throughput events of kind %d: %w", n, kind, err)
	}
	return nil
}

// throughput adds addThroughput's statement to w.
func (w *stmtBatch) throughput(kind ThroughputKind, now int64, n int) {
	if n > 0 {
		w.add(-1, throughputAdd, now/60, int(kind), rand.IntN(throughputShards), n, n)
	}
}

// ThroughputParams are the starts of the windows throughput is counted
// over (Unix seconds; both windows end now).
type ThroughputParams struct {
	HourAgo int64
	DayAgo  int64
}

// ThroughputWindow counts the events of one window.
type ThroughputWindow struct {
	Reported    int64
	Validated   int64
	Assimilated int64
}

// Throughput is what the project did in the last hour and the last day.
type Throughput struct {
	Hour, Day ThroughputWindow
}

// throughputCount reads the day's rows through the primary key. A window
// holds the minutes that began at or after its start, so it is counted by
// the minute: up to a minute short at its start.
const throughputCount = `SELECT kind,
  COALESCE(SUM(CASE WHEN minute >= ? THEN n ELSE 0 END), 0) AS hour, COALESCE(SUM(n), 0) AS day
FROM throughput WHERE minute >= ? GROUP BY kind`

// ThroughputCount sums the results reported and validated and the jobs
// assimilated since each of p's times, as the scheduler, the validator and
// the assimilator counted them when they happened: rows db_purge has
// deleted since are still counted.
func (s *Store) ThroughputCount(ctx context.Context, p ThroughputParams) (Throughput, error) {
	var rows []struct {
		Kind ThroughputKind `db:"kind"`
		Hour int64          `db:"hour"`
		Day  int64          `db:"day"`
	}
	if err := s.db.SelectContext(ctx, &rows, throughputCount, minuteFrom(p.HourAgo), minuteFrom(p.DayAgo)); err != nil {
		return Throughput{}, fmt.Errorf("count throughput: %w", err)
	}
	var t Throughput
	for _, r := range rows {
		switch r.Kind {
		case ThroughputReported:
			t.Hour.Reported, t.Day.Reported = r.Hour, r.Day
		case ThroughputValidated:
			t.Hour.Validated, t.Day.Validated = r.Hour, r.Day
		case ThroughputAssimilated:
			t.Hour.Assimilated, t.Day.Assimilated = r.Hour, r.Day
		}
	}
	return t, nil
}

// minuteFrom is the first whole minute at or after Unix time t.
func minuteFrom(t int64) int64 {
	if t <= 0 {
		return 0
	}
	return (t + 59) / 60
}

const throughputPurge = `DELETE FROM throughput WHERE minute < ? LIMIT ?`

// ThroughputPurge deletes up to limit per-minute rows older than before
// (Unix seconds) and returns how many it deleted.
func (s *Store) ThroughputPurge(ctx context.Context, before int64, limit int) (int64, error) {
	n, err := s.exec(ctx, throughputPurge, before/60, limit)
	if err != nil {
		return 0, fmt.Errorf("purge throughput rows: %w", err)
	}
	return n, nil
}
