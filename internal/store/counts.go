package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/state"
)

// The queue counts of the status page and `taskctl status` (schema 10).
//
// Triggers on result and workunit append a row of +1 or -1 to result_count
// or workunit_count for every row inserted, deleted, or moved from one
// counted key to another, by whichever statement of whichever program; a
// key's count is the sum of its rows. Writers only insert (an
// auto-increment key), so concurrent transactions never wait for one
// count row nor, on a cluster, fail certification on one. CountsFold,
// run by db_purge, replaces the oldest rows with one net row per key, so
// a read sums a few hundred rows plus what was written since the last
// fold, however big the tables. CountsRecount is the same counts by
// scanning: the chaos runs and the tests compare the two.

// countTable is one count table: its key columns, the statements the
// fold uses, and the scan that recounts the counted table.
type countTable struct {
	name string
	keys int
	// oldest selects id, the key columns and n of the oldest rows, up
	// to a limit, locking them.
	oldest string
	// deleteIn deletes rows by id (an IN list for sqlx.In).
	deleteIn string
	// insert is the multi-row INSERT's head; values its row tuple.
	insert, values string
	// sums and recount give the key columns and the count per key, from
	// the count table and from the counted table.
	sums, recount string
}

var resultCountTable = countTable{
	name: "result_count", keys: 4,
	oldest: `SELECT id, appid, server_state, outcome, file_delete_state, n FROM result_count
ORDER BY id LIMIT ? FOR UPDATE`,
	deleteIn: `DELETE FROM result_count WHERE id IN (?)`,
	insert:   `INSERT INTO result_count (appid, server_state, outcome, file_delete_state, n) VALUES `,
	values:   `(?, ?, ?, ?, ?)`,
	sums: `SELECT appid, server_state, outcome, file_delete_state, SUM(n) FROM result_count
GROUP BY appid, server_state, outcome, file_delete_state HAVING SUM(n) <> 0`,
	recount: `SELECT appid, server_state, outcome, file_delete_state, COUNT(*) FROM result
GROUP BY appid, server_state, outcome, file_delete_state`,
}

var workunitCountTable = countTable{
	name: "workunit_count", keys: 6,
	oldest: `SELECT id, appid, need_validate, assimilate_state, file_delete_state, failed, held, n FROM workunit_count
ORDER BY id LIMIT ? FOR UPDATE`,
	deleteIn: `DELETE FROM workunit_count WHERE id IN (?)`,
	insert:   `INSERT INTO workunit_count (appid, need_validate, assimilate_state, file_delete_state, failed, held, n) VALUES `,
	values:   `(?, ?, ?, ?, ?, ?, ?)`,
	sums: `SELECT appid, need_validate, assimilate_state, file_delete_state, failed, held, SUM(n) FROM workunit_count
GROUP BY appid, need_validate, assimilate_state, file_delete_state, failed, held HAVING SUM(n) <> 0`,
	recount: `SELECT appid, need_validate, assimilate_state, file_delete_state, error_mask <> 0, hold_reason <> 0, COUNT(*) FROM workunit
GROUP BY appid, need_validate, assimilate_state, file_delete_state, error_mask <> 0, hold_reason <> 0`,
}

// countKey is a count table's key columns (result_count uses the first
// four).
type countKey [6]int64

// queryer is what a count read runs on: the pool or a transaction.
type queryer interface {
	QueryxContext(ctx context.Context, query string, args ...any) (*sqlx.Rows, error)
}

// readCounts runs query, whose rows are t's key columns and a count, into
// a map.
func readCounts(ctx context.Context, q queryer, t countTable, query string) (map[countKey]int64, error) {
	rows, err := q.QueryxContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", t.name, err)
	}
	defer rows.Close()
	out := map[countKey]int64{}
	for rows.Next() {
		var k countKey
		var n int64
		dest := make([]any, 0, t.keys+1)
		for i := range t.keys {
			dest = append(dest, &k[i])
		}
		if err := rows.Scan(append(dest, &n)...); err != nil {
			return nil, fmt.Errorf("read %s: %w", t.name, err)
		}
		out[k] += n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", t.name, err)
	}
	return out, nil
}

// Counts are the result and workunit counts by key, read in one snapshot.
type Counts struct {
	results, workunits map[countKey]int64
}

// CountsRead sums the count tables in one consistent snapshot.
func (s *Store) CountsRead(ctx context.Context) (Counts, error) {
	var c Counts
	err := s.withRetry(ctx, func() error {
		tx, err := s.db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
		if err != nil {
			return fmt.Errorf("read counts: %w", err)
		}
		defer func() { _ = tx.Rollback() }()
		if c.results, err = readCounts(ctx, tx, resultCountTable, resultCountTable.sums); err != nil {
			return err
		}
		c.workunits, err = readCounts(ctx, tx, workunitCountTable, workunitCountTable.sums)
		return err
	})
	return c, err
}

// ResultStateCount is how many results are in one (server_state, outcome)
// pair.
type ResultStateCount struct {
	ServerState state.ServerState
	Outcome     state.Outcome
	Count       int64
}

// ResultsByState counts results by server_state and outcome, in that
// order; pairs with no results are left out.
func (c Counts) ResultsByState() []ResultStateCount {
	sum := map[[2]int64]int64{}
	for k, n := range c.results {
		sum[[2]int64{k[1], k[2]}] += n
	}
	out := make([]ResultStateCount, 0, len(sum))
	for k, n := range sum {
		if n != 0 {
			out = append(out, ResultStateCount{ServerState: state.ServerState(k[0]), Outcome: state.Outcome(k[1]), Count: n})
		}
	}
	slices.SortFunc(out, func(a, b ResultStateCount) int {
		if a.ServerState != b.ServerState {
			return int(a.ServerState) - int(b.ServerState)
		}
		return int(a.Outcome) - int(b.Outcome)
	})
	return out
}

// ResultsByApp counts the results in server state ss by app id; apps with
// none are left out.
func (c Counts) ResultsByApp(ss state.ServerState) map[int64]int64 {
	out := map[int64]int64{}
	for k, n := range c.results {
		if k[1] == int64(ss) {
			out[k[0]] += n
		}
	}
	for app, n := range out {
		if n == 0 {
			delete(out, app)
		}
	}
	return out
}

// ResultQueues counts results waiting on a daemon.
type ResultQueues struct {
	Total           int64
	FileDeleteReady int64
	FileDeleteError int64
}

// ResultQueues counts every result, those waiting for the file deleter,
// and those it gave up on.
func (c Counts) ResultQueues() ResultQueues {
	var q ResultQueues
	for k, n := range c.results {
		q.Total += n
		switch state.FileDeleteState(k[3]) {
		case state.FileDeleteReady:
			q.FileDeleteReady += n
		case state.FileDeleteError:
			q.FileDeleteError += n
		}
	}
	return q
}

// WorkunitQueues counts jobs waiting on each daemon.
type WorkunitQueues struct {
	Total int64
	// NeedTransition is not a count table's: WorkunitCountQueues reads it
	// from wu_transition_time, as it depends on the time.
	NeedTransition  int64
	NeedValidate    int64
	NeedAssimilate  int64
	FileDeleteReady int64
	FileDeleteError int64
	FileDeleteDone  int64
	Failed          int64
	// Held counts jobs on hold (hold_reason set), waiting for the operator.
	Held int64
}

// workunitQueues counts the jobs by the count table's keys.
func (c Counts) workunitQueues() WorkunitQueues {
	var q WorkunitQueues
	for k, n := range c.workunits {
		q.Total += n
		if k[1] != 0 {
			q.NeedValidate += n
		}
		if state.AssimilateState(k[2]) == state.AssimilateReady {
			q.NeedAssimilate += n
		}
		switch state.FileDeleteState(k[3]) {
		case state.FileDeleteReady:
			q.FileDeleteReady += n
		case state.FileDeleteError:
			q.FileDeleteError += n
		case state.FileDeleteDone:
			q.FileDeleteDone += n
		}
		if k[4] != 0 {
			q.Failed += n
		}
		if k[5] != 0 {
			q.Held += n
		}
	}
	return q
}

// workunitCountDueAll counts the jobs due for transition through
// wu_transition_time: finished jobs wait for no transition (NoTransition),
// so the range holds only the due ones.
const workunitCountDueAll = `SELECT COUNT(*) FROM workunit WHERE transition_time <= ?`

// WorkunitQueues counts jobs due for the transitioner at time now,
// waiting for the validator, the assimilator and the file deleter, with
// deleted files (purgeable once old enough), failed, and on hold.
func (s *Store) WorkunitQueues(ctx context.Context, c Counts, now int64) (WorkunitQueues, error) {
	q := c.workunitQueues()
	if err := s.db.GetContext(ctx, &q.NeedTransition, workunitCountDueAll, now); err != nil {
		return q, fmt.Errorf("count jobs due for transition: %w", err)
	}
	return q, nil
}

// CountsFoldLimit is the most count rows one CountsFold transaction
// folds, per table: small, so that a fold holds little in memory (a
// daemon's memory stays flat while it purges hard) and its locks briefly.
const CountsFoldLimit = 2_000

// CountsFold replaces the oldest rows of each count table, up to limit per
// table, by one row per key holding their sum, and returns how many rows
// it removed. It deletes exactly the rows it read and locked (by id, not by
// range: a row whose id was given out before the read may be inserted
// after it), so a count is never lost nor counted twice, and readers see
// the rows before or after the fold, never between.
func (s *Store) CountsFold(ctx context.Context, limit int) (int64, error) {
	var removed int64
	for _, t := range []countTable{resultCountTable, workunitCountTable} {
		var n int64
		err := s.inTx(ctx, func(tx *sqlx.Tx) error {
			var err error
			n, err = foldCounts(ctx, tx, t, limit)
			return err
		})
		if err != nil {
			return removed, err
		}
		removed += n
	}
	return removed, nil
}

func foldCounts(ctx context.Context, tx *sqlx.Tx, t countTable, limit int) (int64, error) {
	rows, err := tx.QueryxContext(ctx, t.oldest, limit)
	if err != nil {
		return 0, fmt.Errorf("fold %s: %w", t.name, err)
	}
	ids := make([]int64, 0, limit)
	net := map[countKey]int64{}
	var id, n int64
	var k countKey
	dest := []any{&id}
	for i := range t.keys {
		dest = append(dest, &k[i])
	}
	dest = append(dest, &n)
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return 0, fmt.Errorf("fold %s: %w", t.name, err)
		}
		ids = append(ids, id)
		net[k] += n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("fold %s: %w", t.name, err)
	}
	var args []any
	for k, n := range net {
		if n != 0 {
			args = append(append(args, toAny(k[:t.keys])...), n)
		}
	}
	if len(ids) <= len(args)/(t.keys+1) {
		return 0, nil // already one row per key
	}
	for lo := 0; lo < len(ids); lo += maxRowsPerStatement {
		q, a, err := sqlx.In(t.deleteIn, ids[lo:min(len(ids), lo+maxRowsPerStatement)])
		if err != nil {
			return 0, fmt.Errorf("fold %s: %w", t.name, err)
		}
		if _, err := tx.ExecContext(ctx, q, a...); err != nil {
			return 0, fmt.Errorf("fold %s: %w", t.name, err)
		}
	}
	width := t.keys + 1
	err = transChunks(len(args)/width, func(lo, hi int) error {
		_, err := tx.ExecContext(ctx, t.insert+transValues(t.values, hi-lo), args[lo*width:hi*width]...)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("fold %s: %w", t.name, err)
	}
	return int64(len(ids)), nil
}

func toAny(v []int64) []any {
	out := make([]any, len(v))
	for i, x := range v {
		out[i] = x
	}
	return out
}

// CountMismatch is a key whose count table sum differs from the rows.
type CountMismatch struct {
	Table         string
	Key           []int64
	Kept, Counted int64
}

func (m CountMismatch) String() string {
	return fmt.Sprintf("%s key %v: count table says %d, the rows %d", m.Table, m.Key, m.Kept, m.Counted)
}

// CountsRecount compares the count tables with a scan of result and
// workunit, in one snapshot, and returns every key that differs. It reads
// every row: for checks after a run, not for the status page.
func (s *Store) CountsRecount(ctx context.Context) ([]CountMismatch, error) {
	var out []CountMismatch
	err := s.withRetry(ctx, func() error {
		out = nil
		tx, err := s.db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
		if err != nil {
			return fmt.Errorf("recount: %w", err)
		}
		defer func() { _ = tx.Rollback() }()
		for _, t := range []countTable{resultCountTable, workunitCountTable} {
			kept, err := readCounts(ctx, tx, t, t.sums)
			if err != nil {
				return err
			}
			counted, err := readCounts(ctx, tx, t, t.recount)
			if err != nil {
				return err
			}
			for k := range counted {
				if _, ok := kept[k]; !ok {
					kept[k] = 0
				}
			}
			for k, n := range kept {
				if counted[k] != n {
					out = append(out, CountMismatch{Table: t.name, Key: slices.Clone(k[:t.keys]), Kept: n, Counted: counted[k]})
				}
			}
		}
		return nil
	})
	return out, err
}
