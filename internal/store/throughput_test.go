package store_test

import (
	"context"
	"testing"

	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// throughputSince is the throughput counted from Unix time from on, both
// windows starting there.
func throughputSince(t *testing.T, st *store.Store, from int64) store.Throughput {
	t.Helper()
	got, err := st.ThroughputCount(context.Background(), store.ThroughputParams{HourAgo: from, DayAgo: from})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestThroughputWindowsAndPurge: each window sums the minutes that began in
// it, whatever the shard, and ThroughputPurge deletes only the minutes
// before its time.
func TestThroughputWindowsAndPurge(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	const now = 1_700_000_040 // a whole minute
	minute := int64(now / 60)
	for _, r := range []struct{ minute, kind, shard, n int64 }{
		{minute, 1, 0, 5}, {minute, 1, 7, 2}, // this minute, two shards
		{minute - 59, 1, 3, 1},           // the hour's first whole minute
		{minute - 61, 1, 0, 10},          // before the hour, in the day
		{minute - 60*24, 2, 0, 4},        // the day's first minute
		{minute - 60*24 - 1, 3, 0, 100},  // before the day
		{minute - 60*48 - 1, 3, 0, 1000}, // past the retention
		{minute - 3, 3, 1, 6},
	} {
		storetest.Exec(t, st, `INSERT INTO throughput (minute, kind, shard, n) VALUES (?, ?, ?, ?)`, r.minute, r.kind, r.shard, r.n)
	}
	got, err := st.ThroughputCount(ctx, store.ThroughputParams{HourAgo: now - 3600, DayAgo: now - 86400})
	if err != nil {
		t.Fatal(err)
	}
	want := store.Throughput{
		Hour: store.ThroughputWindow{Reported: 8, Assimilated: 6},
		Day:  store.ThroughputWindow{Reported: 18, Validated: 4, Assimilated: 6},
	}
	if got != want {
		t.Errorf("ThroughputCount = %+v, want %+v", got, want)
	}
	n, err := st.ThroughputPurge(ctx, now-store.ThroughputRetention, 100)
	if err != nil || n != 1 {
		t.Fatalf("ThroughputPurge = %d, %v; want the one row past the retention", n, err)
	}
	all := throughputSince(t, st, 1)
	if all.Day.Assimilated != 106 || all.Day.Reported != 18 {
		t.Errorf("after the purge = %+v, want every row within the retention kept", all)
	}
}
