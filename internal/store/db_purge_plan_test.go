package store_test

import (
	"context"
	"strings"
	"testing"

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
	plans, err := st.ScaleExplain(context.Background(), 1, 1_700_000_000)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plans {
		if p.Name != "db_purge: purgeable jobs" {
			continue
		}
		plan := strings.Join(p.Plan, "\n")
		if strings.Contains(plan, "MATERIALIZED") || strings.Contains(plan, "SUBQUERY") ||
			strings.Contains(plan, "filesort") || !strings.Contains(plan, "SIMPLE r type=ref key=res_wuid") {
			t.Fatalf("purge enumeration plan:\n%s\nwant the jobs walked in id order and each one's instances looked up by res_wuid in the join, no subquery, nothing materialized or sorted", plan)
		}
		return
	}
	t.Fatal("no plan for db_purge's enumeration")
}
