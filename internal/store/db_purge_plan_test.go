package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// TestPurgeListReadsInstancesByJob: db_purge's enumeration walks the
// candidate jobs in id order (no sort: it stops at its limit) and looks up
// each one's instances through res_wuid in the join. It never materializes
// a scan of the whole result table (what NOT EXISTS became: db_purge's
// database CPU per job doubled from 10^5 to 10^6 instances in make
// bench-scale) nor runs a subquery per job (what a count became: 1.7–2×
// the database CPU of make bench's purge phase).
func TestPurgeListReadsInstancesByJob(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	// Enough rows for the optimizer to plan as on a real project.
	storetest.Exec(t, st, `INSERT INTO workunit (id, create_time, appid, name, xml_doc, file_delete_state, mod_time)
SELECT seq, 1, 1, CONCAT('w', seq), '', IF(seq % 4 = 0, 2, 0), 1 FROM seq_1_to_20000`)
	storetest.Exec(t, st, `INSERT INTO result (id, create_time, workunitid, name, server_state, file_delete_state, outcome, appid)
SELECT seq, 1, (seq + 1) DIV 2, CONCAT('r', seq), IF(seq % 8 < 2, 5, 4), IF(seq % 8 < 2, 2, 0), 1, 1 FROM seq_1_to_40000`)
	storetest.Exec(t, st, `ANALYZE TABLE workunit, result`)
	plan := purgePlan(t, st)
	if strings.Contains(plan, "MATERIALIZED") || strings.Contains(plan, "SUBQUERY") ||
		strings.Contains(plan, "filesort") || !strings.Contains(plan, "SIMPLE r type=ref key=res_wuid") {
		t.Fatalf("purge enumeration plan:\n%s\nwant the jobs walked in id order and each one's instances looked up by res_wuid in the join, no subquery, nothing materialized or sorted", plan)
	}
}

// purgePlan is the plan of db_purge's enumeration on st's rows.
func purgePlan(t *testing.T, st *store.Store) string {
	t.Helper()
	plans, err := st.ScaleExplain(context.Background(), 1, 1_700_000_000)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plans {
		if p.Name == "db_purge: purgeable jobs" {
			return strings.Join(p.Plan, "\n")
		}
	}
	t.Fatal("no plan for db_purge's enumeration")
	return ""
}

// TestPurgeListKeepsItsPlanWhenEveryInstanceIsPurgeable: once every
// instance is over with its files deleted (make bench's purge phase), the
// anti-join's condition matches almost no instance, and MariaDB read those
// few through an index merge of res_server_state and res_file_delete into
// a join buffer, then read and sorted every candidate job for each batch of
// 1,000 (Using temporary; Using filesort): db_purge's database CPU in make
// bench swung from 9 to 39 s between runs of one commit (SHOW EXPLAIN of
// the slow run). The instances are looked up by res_wuid whatever the
// statistics say.
func TestPurgeListKeepsItsPlanWhenEveryInstanceIsPurgeable(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	storetest.Exec(t, st, `INSERT INTO workunit (id, create_time, appid, name, xml_doc, file_delete_state, mod_time)
SELECT seq, 1, 1, CONCAT('w', seq), '', 2, 1 FROM seq_1_to_20000`)
	// The statistics the server last took say res_wuid tells the jobs'
	// instances apart badly (taken while the instances were of few jobs,
	// as they are while a run's rows change under them).
	storetest.Exec(t, st, `ALTER TABLE result STATS_AUTO_RECALC = 0`)
	storetest.Exec(t, st, `INSERT INTO result (id, create_time, workunitid, name, server_state, file_delete_state, outcome, appid)
SELECT seq, 1, 1 + seq % 4, CONCAT('r', seq), 5, IF(seq <= 4, 0, 2), 1, 1 FROM seq_1_to_40000`)
	storetest.Exec(t, st, `UPDATE result SET server_state = 4, file_delete_state = 0 WHERE id <= 4`)
	storetest.Exec(t, st, `ANALYZE TABLE workunit, result`)
	storetest.Exec(t, st, `UPDATE result SET workunitid = (id + 1) DIV 2`)
	plan := purgePlan(t, st)
	if strings.Contains(plan, "filesort") || strings.Contains(plan, "temporary") ||
		strings.Contains(plan, "index_merge") || !strings.Contains(plan, "SIMPLE r type=ref key=res_wuid") {
		t.Fatalf("purge enumeration plan with every instance purgeable:\n%s\nwant the jobs walked in id order and each one's instances looked up by res_wuid", plan)
	}
}
