package store_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// steppedIDs are n ids first, first+step, …: the ids a Galera node hands out
// (step = cluster size, first = the node's offset).
func steppedIDs(first, step int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = first + int64(i)*step
	}
	return out
}

// TestPartitionSQLMatchesGo runs the SQL rule on the server over runs of ids
// (consecutive, stepping by 3 from each of the three offsets, and large
// ones) and checks that every id lands in exactly the partition Partition
// names: a daemon filtering in SQL and code deciding in Go never disagree
// on who owns a row.
func TestPartitionSQLMatchesGo(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	const n = 10000
	runs := []struct{ first, step int64 }{{1, 1}, {1, 3}, {2, 3}, {3, 3}, {1 << 40, 7}}
	q := `SELECT id FROM (SELECT ? + seq * ? AS id FROM seq_0_to_` + fmt.Sprint(n-1) + `) t WHERE ` +
		store.PartitionFilter("id") + ` ORDER BY id`
	for _, run := range runs {
		for _, mod := range []int{1, 2, 3, 6} {
			owner := map[int64]int{}
			for idx := range mod {
				var ids []int64
				if err := st.DB().SelectContext(ctx, &ids, q, run.first, run.step, mod, idx); err != nil {
					t.Fatalf("partition %d of %d in SQL: %v", idx, mod, err)
				}
				for _, id := range ids {
					if prev, ok := owner[id]; ok {
						t.Fatalf("id %d in SQL partitions %d and %d of %d", id, prev, idx, mod)
					}
					owner[id] = idx
				}
			}
			for _, id := range steppedIDs(run.first, run.step, n) {
				got, ok := owner[id]
				if !ok {
					t.Fatalf("ids from %d step %d, --mod %d: id %d in no SQL partition", run.first, run.step, mod, id)
				}
				if want := store.Partition(id, mod); got != want {
					t.Fatalf("ids from %d step %d, --mod %d: id %d in SQL partition %d, Partition says %d",
						run.first, run.step, mod, id, got, want)
				}
			}
		}
	}
}

// TestPartitionSpreadsSteppedIDs checks that ids stepping by a cluster's
// size fill every partition about equally, where id % mod puts them all in
// one (--mod 3) or two (--mod 6): each partition of 30,000 ids holds its
// fair share within 15%.
func TestPartitionSpreadsSteppedIDs(t *testing.T) {
	t.Parallel()
	for _, first := range []int64{1, 2, 3} {
		ids := steppedIDs(first, 3, 30000)
		for _, mod := range []int{2, 3, 6} {
			count := make([]int, mod)
			for _, id := range ids {
				count[store.Partition(id, mod)]++
			}
			fair := float64(len(ids)) / float64(mod)
			for idx, c := range count {
				if math.Abs(float64(c)-fair) > 0.15*fair {
					t.Errorf("ids from %d step 3, --mod %d: partition %d holds %d, fair is %.0f (all: %v)",
						first, mod, idx, c, fair, count)
				}
			}
		}
	}
}

// TestPartitionSplitsEnumerations runs two real enumerations, the
// transitioner's (workunit ids) and the feeder's (result ids), with --mod 3
// over rows whose ids step by 3 as on a three-node cluster: the replicas
// share the rows out between them, none twice, none left over, each as
// Partition says, and no replica is idle.
func TestPartitionSplitsEnumerations(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	const n, mod = 60, 3
	app := storetest.App(t, st, storetest.AppOptions{}).ID
	for range n {
		wu := storetest.Job(t, st, storetest.JobOptions{App: app, TransitionTime: 1})
		storetest.Instance(t, st, storetest.InstanceOptions{Job: wu.ID, ServerState: state.ServerUnsent})
	}
	// Renumber as a cluster would have numbered them: 3k+1. Descending so
	// no new id meets an old one.
	storetest.Exec(t, st, `UPDATE result SET workunitid = workunitid * 3 + 1`)
	storetest.Exec(t, st, `UPDATE workunit SET id = id * 3 + 1 ORDER BY id DESC`)
	storetest.Exec(t, st, `UPDATE result SET id = id * 3 + 1 ORDER BY id DESC`)

	jobs, results := map[int64]int{}, map[int64]int{}
	for idx := range mod {
		due, err := st.WorkunitListDue(ctx, store.WorkunitListDueParams{Now: 2, Mod: mod, ModIndex: idx, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		unsent, err := st.ResultListUnsentForCache(ctx, store.FeederListParams{Mod: mod, ModIndex: idx, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(due) == 0 || len(unsent) == 0 {
			t.Errorf("replica %d of %d: %d due jobs, %d unsent instances; want some of each", idx, mod, len(due), len(unsent))
		}
		for _, wr := range due {
			w := wr.Workunit
			if prev, ok := jobs[w.ID]; ok {
				t.Errorf("job %d listed by replicas %d and %d", w.ID, prev, idx)
			}
			jobs[w.ID] = idx
			if p := store.Partition(w.ID, mod); p != idx {
				t.Errorf("job %d listed by replica %d, Partition says %d", w.ID, idx, p)
			}
		}
		for _, r := range unsent {
			if prev, ok := results[r.ID]; ok {
				t.Errorf("instance %d cached by feeders %d and %d", r.ID, prev, idx)
			}
			results[r.ID] = idx
			if p := store.Partition(r.ID, mod); p != idx {
				t.Errorf("instance %d cached by feeder %d, Partition says %d", r.ID, idx, p)
			}
		}
	}
	if len(jobs) != n || len(results) != n {
		t.Errorf("replicas listed %d jobs and %d instances in all, want %d of each", len(jobs), len(results), n)
	}
}
