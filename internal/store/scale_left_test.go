package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// TestScaleLeftAtCountsOneDaemonsWork checks the scale benchmark's probe:
// each kind of work counts its own rows only (of the apps asked for), in
// full without a limit and at most the limit with one.
func TestScaleLeftAtCountsOneDaemonsWork(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	const never = 2147483647
	ready, done, assim := int(state.FileDeleteReady), int(state.FileDeleteDone), int(state.AssimilateReady)
	// Jobs 1-3 due; 4-5 to validate; 6 to assimilate (7 too, of app 2);
	// 8 with files to delete (and two instances); 9 purgeable, 10 not yet.
	storetest.Exec(t, st, fmt.Sprintf(`INSERT INTO workunit (id, create_time, appid, name, xml_doc, transition_time,
need_validate, assimilate_state, file_delete_state, mod_time)
SELECT seq, 1, IF(seq = 7, 2, 1), CONCAT('w', seq), '', IF(seq <= 3, 100, %d), seq IN (4, 5), IF(seq IN (6, 7), %d, 0),
CASE WHEN seq = 8 THEN %d WHEN seq IN (9, 10) THEN %d ELSE 0 END, IF(seq = 9, 500, 700) FROM seq_1_to_10`,
		never, assim, ready, done))
	storetest.Exec(t, st, fmt.Sprintf(`INSERT INTO result (id, create_time, workunitid, name, server_state, file_delete_state, appid)
SELECT seq, 1, 8, CONCAT('r', seq), 5, IF(seq <= 2, %d, 0), 1 FROM seq_1_to_3`, ready))
	// Two instances of job 1 unsent.
	storetest.Exec(t, st, `INSERT INTO result (id, create_time, workunitid, name, server_state, appid)
SELECT seq, 1, 1, CONCAT('r', seq), 2, 1 FROM seq_4_to_5`)
	ctx := context.Background()
	for _, c := range []struct {
		work store.ScaleWork
		want int64
	}{
		{store.ScaleDueTransition, 3},
		{store.ScaleNeedValidate, 2},
		{store.ScaleNeedAssimilate, 1},
		{store.ScaleFileDeleteReady, 3},
		{store.ScalePurgeable, 1},
		{store.ScaleUnsent, 2},
	} {
		n, err := st.ScaleLeftAt(ctx, c.work, []int64{1}, 1000, 600, 0)
		if err != nil || n != c.want {
			t.Errorf("work %d: %d, %v; want %d", c.work, n, err, c.want)
		}
		want := min(c.want, 1)
		if c.work == store.ScaleFileDeleteReady {
			want = 2 // the limit is each table's
		}
		n, err = st.ScaleLeftAt(ctx, c.work, []int64{1}, 1000, 600, 1)
		if err != nil || n != want {
			t.Errorf("work %d with limit 1: %d, %v; want %d", c.work, n, err, want)
		}
	}
	if n, err := st.ScaleLeftAt(ctx, store.ScaleNeedAssimilate, []int64{1, 2}, 1000, 600, 0); err != nil || n != 2 {
		t.Errorf("to assimilate in apps 1 and 2: %d, %v; want 2", n, err)
	}
}
