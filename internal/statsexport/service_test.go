package statsexport

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestServiceDumpsOncePerInterval(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	storetest.User(t, st, storetest.UserOptions{TotalCredit: 5, CrossProjectID: "c"})
	dir := filepath.Join(t.TempDir(), "stats")
	t0 := time.Unix(1700000000, 0)
	now := t0
	cfg := Config{Dir: dir, Interval: 24 * time.Hour, Batch: 100, Mod: 1}
	svc, err := New(cfg, Deps{Store: st, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pass := func(at time.Time) int {
		t.Helper()
		now = at
		n, err := svc.RunOnce(ctx)
		if err != nil {
			t.Fatalf("RunOnce at %s: %v", at.Sub(t0), err)
		}
		return n
	}
	stamp := func() int64 {
		t.Helper()
		last, ok, err := LastUpdate(dir)
		if err != nil || !ok {
			t.Fatalf("LastUpdate = %v, %v, %v", last, ok, err)
		}
		return last.Unix()
	}

	if n := pass(t0); n != 1 {
		t.Fatalf("first pass (no dump yet) wrote %d records, want 1", n)
	}
	if got := stamp(); got != t0.Unix() {
		t.Fatalf("dump stamped %d, want %d", got, t0.Unix())
	}
	for _, later := range []time.Duration{time.Minute, 23*time.Hour + 59*time.Minute} {
		if n := pass(t0.Add(later)); n != 0 || stamp() != t0.Unix() {
			t.Errorf("pass %s after the dump wrote %d records (dump stamped %d); want nothing before 24h", later, n, stamp())
		}
	}
	// A new service (a restart) goes by the dump in place, not by its own
	// memory.
	svc, err = New(cfg, Deps{Store: st, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if n := pass(t0.Add(time.Hour)); n != 0 {
		t.Errorf("a restarted service dumped again after 1h")
	}
	if n := pass(t0.Add(24 * time.Hour)); n != 1 || stamp() != t0.Add(24*time.Hour).Unix() {
		t.Errorf("pass at 24h wrote %d records, dump stamped %d; want a new dump", n, stamp())
	}
	// A clock set back by more than an interval does not stop the export.
	if n := pass(t0.Add(-48 * time.Hour)); n != 1 {
		t.Errorf("pass with the clock two days back wrote %d records, want a new dump", n)
	}
}

func TestServiceRedumpsOverAnUnreadableSummary(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	dir := filepath.Join(t.TempDir(), "stats")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, TablesFile), []byte("<tables><update"), 0o644); err != nil {
		t.Fatal(err)
	}
	svc, err := New(Config{Dir: dir, Interval: time.Hour, Batch: 10, Mod: 1}, Deps{Store: st,
		Now: func() time.Time { return time.Unix(5000, 0) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if last, ok, _ := LastUpdate(dir); !ok || last.Unix() != 5000 {
		t.Errorf("after a pass over a broken tables.xml: update_time %v (ok %v), want 5000", last, ok)
	}
}

func TestConfigErrorsNameTheirFlags(t *testing.T) {
	t.Parallel()
	err := Config{Dir: "", Interval: time.Second, Batch: 0, Mod: 2, ModIndex: 0}.Validate()
	if err == nil {
		t.Fatal("Validate of a bad config = nil")
	}
	for _, flag := range []string{"--out", "--interval", "--batch", "--mod 2"} {
		if !strings.Contains(err.Error(), flag) {
			t.Errorf("Validate = %q, want a problem naming %s", err, flag)
		}
	}
	if err := (Config{Dir: "x", Interval: time.Hour, Batch: 1, Mod: 1}).Validate(); err != nil {
		t.Errorf("Validate of a good config = %v", err)
	}
}
