package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/db/schema"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// requireCountsMatch fails t unless the count tables agree with a scan of
// the rows.
func requireCountsMatch(t *testing.T, st *store.Store, when string) {
	t.Helper()
	off, err := st.CountsRecount(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range off {
		t.Errorf("%s: %s", when, m)
	}
}

// deadlock reports whether err is a deadlock or lock wait timeout, which
// the test's random writers may cause one another: a rolled-back
// statement changes no count.
func deadlock(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

func countRows(t *testing.T, st *store.Store, table string) int {
	t.Helper()
	var n int
	if err := st.DB().QueryRow(`SELECT COUNT(*) FROM ` + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCountsFollowEveryKindOfWrite: single and multi-row inserts, updates
// that move rows between keys (and ones that do not), multi-table updates
// and deletes all reach the count tables, which a fold then compacts
// without changing a count.
func TestCountsFollowEveryKindOfWrite(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	const now = 1_700_000_000
	wu := storetest.Job(t, st, storetest.JobOptions{CreateTime: now, TransitionTime: now + 100})
	storetest.Exec(t, st, `INSERT INTO workunit (create_time, appid, name, transition_time)
SELECT ?, ?, CONCAT('w', seq), ? FROM seq_1_to_50`, now, wu.AppID, now-10)
	storetest.Exec(t, st, `INSERT INTO result (create_time, workunitid, server_state, name, appid)
SELECT ?, ?, ?, CONCAT('r', seq), ? FROM seq_1_to_200`, now, wu.ID, int(state.ServerUnsent), wu.AppID)
	storetest.Exec(t, st, `UPDATE result SET server_state = ?, outcome = 0 WHERE id % 2 = 0`, int(state.ServerInProgress))
	storetest.Exec(t, st, `UPDATE result SET mod_time = 5`) // no counted column: no count row
	storetest.Exec(t, st, `UPDATE result r JOIN workunit w ON w.id = r.workunitid
SET r.server_state = ?, r.outcome = ?, r.file_delete_state = ?, w.need_validate = 1
WHERE r.id % 4 = 0`, int(state.ServerOver), int(state.OutcomeSuccess), int(state.FileDeleteReady))
	storetest.Exec(t, st, `UPDATE workunit SET error_mask = error_mask | 4, assimilate_state = ? WHERE name LIKE 'w1%'`,
		int(state.AssimilateReady))
	storetest.Exec(t, st, `UPDATE workunit SET error_mask = error_mask | 8 WHERE name LIKE 'w1%'`) // still failed
	storetest.Exec(t, st, `UPDATE workunit SET hold_reason = 2, file_delete_state = ? WHERE name LIKE 'w2%'`,
		int(state.FileDeleteDone))
	storetest.Exec(t, st, `DELETE FROM result WHERE id % 5 = 0`)
	storetest.Exec(t, st, `DELETE FROM workunit WHERE name LIKE 'w3%'`)
	requireCountsMatch(t, st, "after the writes")

	c, err := st.CountsRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	q, err := st.WorkunitQueues(ctx, c, now)
	if err != nil {
		t.Fatal(err)
	}
	// w1 and w10..w19 are 11 jobs, as are w2.. and w3.. (deleted); the
	// storetest job is not due.
	want := store.WorkunitQueues{Total: 40, NeedTransition: 39, NeedValidate: 1, NeedAssimilate: 11,
		FileDeleteDone: 11, Failed: 11, Held: 11}
	if q != want {
		t.Errorf("job queues = %+v, want %+v", q, want)
	}
	rq := c.ResultQueues()
	// 160 rows left; every 4th id was ready (50), less the ids that are
	// also multiples of 5 (10).
	if rq != (store.ResultQueues{Total: 160, FileDeleteReady: 40}) {
		t.Errorf("result queues = %+v, want 160 rows, 40 ready", rq)
	}
	byApp := c.ResultsByApp(state.ServerInProgress)
	if byApp[wu.AppID] != 40 || len(byApp) != 1 {
		t.Errorf("in progress by app = %v, want %d: 40", byApp, wu.AppID)
	}

	before := countRows(t, st, "result_count") + countRows(t, st, "workunit_count")
	removed, err := st.CountsFold(ctx, store.CountsFoldLimit)
	if err != nil {
		t.Fatal(err)
	}
	after := countRows(t, st, "result_count") + countRows(t, st, "workunit_count")
	if int(removed) != before || after > 10 {
		t.Errorf("fold removed %d of %d rows and left %d; want all removed and one row per key", removed, before, after)
	}
	requireCountsMatch(t, st, "after the fold")
	if again, err := st.CountsFold(ctx, store.CountsFoldLimit); err != nil || again != 0 {
		t.Errorf("second fold removed %d (%v), want nothing: one row per key already", again, err)
	}
}

// TestCountsFoldAmongWriters: folds, two at a time and in small batches,
// while several writers insert, move and delete rows; every count still
// matches the rows. Two folders taking the same rows would count them
// twice (the locking read makes the second wait and skip them).
func TestCountsFoldAmongWriters(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	wu := storetest.Job(t, st, storetest.JobOptions{CreateTime: 1, TransitionTime: 100})
	deadline := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				var err error
				switch rand.IntN(3) {
				case 0:
					_, err = st.DB().ExecContext(ctx, `INSERT INTO result (create_time, workunitid, server_state, name, appid)
VALUES (1, ?, ?, ?, ?)`, wu.ID, int(state.ServerUnsent), fmt.Sprintf("w%d-%d", w, i), wu.AppID)
				case 1:
					_, err = st.DB().ExecContext(ctx, `UPDATE result SET server_state = server_state % 5 + 1
ORDER BY RAND() LIMIT 3`)
				case 2:
					_, err = st.DB().ExecContext(ctx, `DELETE FROM result ORDER BY RAND() LIMIT 1`)
				}
				if err != nil && !deadlock(err) {
					t.Error(err)
					return
				}
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				if _, err := st.CountsFold(ctx, 7); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	requireCountsMatch(t, st, "after writers and folds")
}

// TestCountsMigrationCountsTheRowsThere: schema 10 starts its counts from
// the rows a database already holds.
func TestCountsMigrationCountsTheRowsThere(t *testing.T) {
	t.Parallel()
	st := emptyStore(t)
	ctx := context.Background()
	all, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	var upTo9 []schema.Migration
	for _, m := range all {
		if m.Version <= 9 {
			upTo9 = append(upTo9, m)
		}
	}
	if _, err := st.SchemaUpgrade(ctx, upTo9, time.Unix(1000, 0)); err != nil {
		t.Fatal(err)
	}
	storetest.Exec(t, st, `INSERT INTO workunit (create_time, appid, name, need_validate, error_mask)
SELECT 1, 1 + seq % 2, CONCAT('w', seq), seq % 3 = 0, seq % 7 = 0 FROM seq_1_to_30`)
	storetest.Exec(t, st, `INSERT INTO result (create_time, workunitid, server_state, outcome, name, appid)
SELECT 1, seq, 2 + seq % 3, seq % 4, CONCAT('r', seq), 1 + seq % 2 FROM seq_1_to_90`)
	if _, err := st.SchemaUpgrade(ctx, all, time.Unix(2000, 0)); err != nil {
		t.Fatal(err)
	}
	requireCountsMatch(t, st, "after the upgrade")
	c, err := st.CountsRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if q := c.ResultQueues(); q.Total != 90 {
		t.Errorf("results counted after the upgrade = %d, want 90", q.Total)
	}
}
