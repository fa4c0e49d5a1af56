package shmcache

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/taskserver/taskserver/internal/row"
)

// newCache creates a cache of n slots in a fresh directory and returns it
// with its path.
func newCache(t testing.TB, n int) (*Cache, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cache")
	c, err := Create(path, n)
	if err != nil {
		t.Fatalf("Create(%s, %d): %v", path, n, err)
	}
	t.Cleanup(func() { c.Close() })
	return c, path
}

// openCache opens path as a scheduler would.
func openCache(t testing.TB, path string) *Cache {
	t.Helper()
	r, err := Open(path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func entry(id int64) Entry {
	return Entry{ResultID: id, WorkunitID: id * 10, AppID: 3, RscFpopsEst: 1e12, RscMemoryBound: 2e8,
		RscDiskBound: 1e9, DelayBound: 86400, Priority: 7, HRClass: -2, Flags: 1}
}

func wantState(t *testing.T, c *Cache, i int, want SlotState) {
	t.Helper()
	if got, _ := c.Slot(i); got != want {
		t.Fatalf("Slot(%d) state = %v, want %v", i, got, want)
	}
}

func TestLifecycleTransitions(t *testing.T) {
	t.Parallel()
	c, path := newCache(t, 4)
	r := openCache(t, path) // a scheduler's mapping of the same file
	const i = 2

	if _, ok := r.Peek(i); ok {
		t.Fatalf("Peek of an empty slot = ok, want not present")
	}
	if _, ok := r.Claim(i, 100, 1000); ok {
		t.Fatalf("Claim of an empty slot succeeded, want refused")
	}
	if !c.Fill(i, entry(42)) {
		t.Fatalf("Fill of an empty slot = false, want true")
	}
	wantState(t, r, i, SlotPresent)
	if c.Fill(i, entry(43)) {
		t.Fatalf("Fill of a present slot = true, want false")
	}
	if e, ok := r.Peek(i); !ok || e != entry(42) {
		t.Fatalf("Peek = %+v, %v; want %+v, true", e, ok, entry(42))
	}

	cl, ok := r.Claim(i, 100, 1000)
	if !ok || cl.Slot != i || cl.Entry != entry(42) {
		t.Fatalf("Claim = %+v, %v; want slot %d with %+v", cl, ok, i, entry(42))
	}
	wantState(t, c, i, SlotBusy)
	if pid, at := c.SlotClaimer(i); pid != 100 || at != 1000 {
		t.Fatalf("SlotClaimer = %d, %d; want 100, 1000", pid, at)
	}
	if _, ok := r.Claim(i, 101, 1000); ok {
		t.Fatalf("second Claim of a busy slot succeeded, want refused")
	}
	if _, ok := r.Peek(i); ok {
		t.Fatalf("Peek of a busy slot = ok, want not present")
	}
	if c.Fill(i, entry(43)) {
		t.Fatalf("Fill of a busy slot = true, want false")
	}

	if !r.Release(cl) {
		t.Fatalf("Release of a held claim = false, want true")
	}
	wantState(t, c, i, SlotEmpty)
	if r.Release(cl) {
		t.Fatalf("second Release of the same claim = true, want false")
	}
	if r.Unclaim(cl) {
		t.Fatalf("Unclaim after Release = true, want false")
	}
	if !c.Fill(i, entry(44)) {
		t.Fatalf("Fill after Release = false, want true")
	}
	if e, ok := r.Peek(i); !ok || e.ResultID != 44 {
		t.Fatalf("Peek after refill = %+v, %v; want result 44", e, ok)
	}
}

func TestUnclaimPutsEntryBack(t *testing.T) {
	t.Parallel()
	c, _ := newCache(t, 1)
	c.Fill(0, entry(7))
	cl, ok := c.Claim(0, 100, 1000)
	if !ok {
		t.Fatalf("Claim = false, want true")
	}
	if !c.Unclaim(cl) {
		t.Fatalf("Unclaim of a held claim = false, want true")
	}
	wantState(t, c, 0, SlotPresent)
	if pid, at := c.SlotClaimer(0); pid != 0 || at != 0 {
		t.Fatalf("SlotClaimer after Unclaim = %d, %d; want 0, 0", pid, at)
	}
	if c.Release(cl) || c.Unclaim(cl) {
		t.Fatalf("Release/Unclaim of an unclaimed claim succeeded, want refused")
	}
	cl2, ok := c.Claim(0, 101, 1001)
	if !ok || cl2.Entry != entry(7) {
		t.Fatalf("Claim after Unclaim = %+v, %v; want %+v", cl2, ok, entry(7))
	}
	if c.Release(cl) {
		t.Fatalf("Release with the first claim while a second holds the slot = true, want false")
	}
	if !c.Release(cl2) {
		t.Fatalf("Release of the second claim = false, want true")
	}
}

func TestStaleClaimCannotTouchRefilledSlot(t *testing.T) {
	t.Parallel()
	c, path := newCache(t, 1)
	r := openCache(t, path)
	c.Fill(0, entry(1))
	stale, ok := r.Claim(0, 100, 1000)
	if !ok {
		t.Fatalf("Claim = false, want true")
	}
	dead := func(int32) bool { return false }
	if n := c.ReclaimStale(1001, 60, dead); n != 1 {
		t.Fatalf("ReclaimStale with a dead claimer = %d, want 1", n)
	}
	c.Fill(0, entry(2))
	if r.Release(stale) {
		t.Fatalf("Release of a reclaimed claim after refill = true, want false")
	}
	if r.Unclaim(stale) {
		t.Fatalf("Unclaim of a reclaimed claim after refill = true, want false")
	}
	wantState(t, c, 0, SlotPresent)
	fresh, ok := r.Claim(0, 101, 1002)
	if !ok || fresh.Entry.ResultID != 2 {
		t.Fatalf("Claim of the refilled slot = %+v, %v; want result 2", fresh, ok)
	}
	if r.Release(stale) || r.Unclaim(stale) {
		t.Fatalf("stale claim released or unclaimed a slot another claimer holds")
	}
	wantState(t, c, 0, SlotBusy)
	if !r.Release(fresh) {
		t.Fatalf("Release of the fresh claim = false, want true")
	}
}

func TestReclaimStale(t *testing.T) {
	t.Parallel()
	const maxAge = 60
	alive := func(pid int32) bool { return pid != 666 }
	tests := []struct {
		name    string
		claimer int32 // 0: not claimed
		at      int64
		now     int64
		want    int
	}{
		{"present slot is left alone", 0, 0, 5000, 0},
		{"recent claim by a live process is kept", 100, 1000, 1000 + maxAge, 0},
		{"claim older than maxAge is reclaimed", 100, 1000, 1000 + maxAge + 1, 1},
		{"claim by a dead process is reclaimed at once", 666, 1000, 1000, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _ := newCache(t, 1)
			c.Fill(0, entry(1))
			if tt.claimer != 0 {
				if _, ok := c.Claim(0, tt.claimer, tt.at); !ok {
					t.Fatalf("Claim = false")
				}
			}
			if got := c.ReclaimStale(tt.now, maxAge, alive); got != tt.want {
				t.Fatalf("ReclaimStale(%d, %d) = %d, want %d", tt.now, maxAge, got, tt.want)
			}
			if tt.want == 1 {
				wantState(t, c, 0, SlotEmpty)
			}
		})
	}
}

// A slot caught between the claim's swap and the claimer writing its pid
// (or left FILLING by a dead process) has nothing to judge it by; the feeder
// reclaims it only once it has stayed unchanged for maxAge.
func TestReclaimMidTransitionAfterMaxAge(t *testing.T) {
	t.Parallel()
	for _, st := range []SlotState{SlotBusy, SlotFilling} {
		t.Run(st.String(), func(t *testing.T) {
			t.Parallel()
			c, _ := newCache(t, 1)
			c.Fill(0, entry(1))
			w := atomic.LoadUint64(c.word(0))
			atomic.StoreUint64(c.word(0), next(w, st)) // claimer pid and time stay 0
			alive := func(int32) bool { return false }
			if n := c.ReclaimStale(1000, 60, alive); n != 0 {
				t.Fatalf("ReclaimStale on first sight = %d, want 0", n)
			}
			if n := c.ReclaimStale(1060, 60, alive); n != 0 {
				t.Fatalf("ReclaimStale after exactly maxAge = %d, want 0", n)
			}
			if n := c.ReclaimStale(1061, 60, alive); n != 1 {
				t.Fatalf("ReclaimStale after more than maxAge = %d, want 1", n)
			}
			wantState(t, c, 0, SlotEmpty)
		})
	}
}

// A slot that moves on between two sights is not stuck.
func TestReclaimForgetsSlotsThatMoved(t *testing.T) {
	t.Parallel()
	c, _ := newCache(t, 1)
	c.Fill(0, entry(1))
	cl, _ := c.Claim(0, 0, 0) // BUSY with no claimer recorded yet
	if n := c.ReclaimStale(1000, 60, nil); n != 0 {
		t.Fatalf("ReclaimStale on first sight = %d, want 0", n)
	}
	c.Unclaim(cl)
	c.Claim(0, 0, 0)
	if n := c.ReclaimStale(1100, 60, nil); n != 0 {
		t.Fatalf("ReclaimStale of a slot claimed anew = %d, want 0", n)
	}
}

func TestProcessAlive(t *testing.T) {
	t.Parallel()
	if !ProcessAlive(int32(os.Getpid())) {
		t.Errorf("ProcessAlive(own pid) = false, want true")
	}
	if ProcessAlive(0) || ProcessAlive(-1) {
		t.Errorf("ProcessAlive(0 or -1) = true, want false")
	}
	if ProcessAlive(1 << 30) { // above any pid_max
		t.Errorf("ProcessAlive(1<<30) = true, want false")
	}
}

func TestOutOfRangeSlots(t *testing.T) {
	t.Parallel()
	c, _ := newCache(t, 2)
	for _, i := range []int{-1, 2, 1 << 20} {
		if c.Fill(i, entry(1)) {
			t.Errorf("Fill(%d) = true, want false", i)
		}
		if _, ok := c.Peek(i); ok {
			t.Errorf("Peek(%d) ok, want false", i)
		}
		if _, ok := c.Claim(i, 1, 1); ok {
			t.Errorf("Claim(%d) ok, want false", i)
		}
		if c.Release(Claim{Slot: i, word: next(0, SlotBusy)}) {
			t.Errorf("Release(slot %d) = true, want false", i)
		}
	}
	if c.Release(Claim{}) || c.Unclaim(Claim{}) {
		t.Errorf("Release/Unclaim of a zero Claim succeeded, want refused")
	}
}

func TestHeartbeat(t *testing.T) {
	t.Parallel()
	c, path := newCache(t, 1)
	r := openCache(t, path)
	if hb := r.Heartbeat(); hb != 0 {
		t.Fatalf("Heartbeat of a new cache = %d, want 0", hb)
	}
	c.SetHeartbeat(12345)
	if hb := r.Heartbeat(); hb != 12345 {
		t.Fatalf("Heartbeat = %d, want 12345", hb)
	}
}

func TestOpenRefusesUnknownLayout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	c, err := Create(good, 4)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	body, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	patch := func(name string, off int, b ...byte) string {
		p := filepath.Join(dir, name)
		mod := append([]byte(nil), body...)
		copy(mod[off:], b)
		if err := os.WriteFile(p, mod, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, path, msg string
	}{
		{"other layout version", patch("v1", hVersion, 1), "layout version 1, this binary reads version 2"},
		{"not a cache file", patch("magic", hMagic, 'X'), "not a task-server cache file"},
		{"slot count disagrees with size", patch("nslots", hNSlots, 5), "header says 5 slots"},
		{"truncated file", func() string {
			p := filepath.Join(dir, "short")
			_ = os.WriteFile(p, body[:100], 0o600)
			return p
		}(), "shorter than a header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := Open(tt.path)
			if err == nil {
				r.Close()
				t.Fatalf("Open(%s) succeeded, want ErrLayout", tt.name)
			}
			if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Open(%s) error = %q, want ErrLayout mentioning %q", tt.name, err, tt.msg)
			}
		})
	}
	if _, err := Open(filepath.Join(dir, "missing")); err == nil || errors.Is(err, ErrLayout) {
		t.Fatalf("Open(missing file) error = %v, want a not-exist error that is not ErrLayout", err)
	}
}

func TestCreateKeepsSlotsAcrossFeederRestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cache")
	c, err := Create(path, 8)
	if err != nil {
		t.Fatal(err)
	}
	c.Fill(3, entry(3))
	c.Fill(4, entry(4))
	c.SetTables(Tables{})
	r := openCache(t, path)
	held, ok := r.Claim(4, 100, 1000)
	if !ok {
		t.Fatal("Claim(4) = false")
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	c2, err := Create(path, 8)
	if err != nil {
		t.Fatalf("Create again with the same slot count: %v", err)
	}
	defer c2.Close()
	if st, e := c2.Slot(3); st != SlotPresent || e != entry(3) {
		t.Fatalf("slot 3 after restart = %v %+v, want present %+v", st, e, entry(3))
	}
	wantState(t, c2, 4, SlotBusy)
	if _, gen, err := c2.Tables(); err != nil || gen != 1 {
		t.Fatalf("Tables after restart = gen %d, %v; want gen 1", gen, err)
	}
	// The scheduler's mapping is the same file: it sees new fills and its
	// claim is still good.
	c2.Fill(5, entry(5))
	if e, ok := r.Peek(5); !ok || e.ResultID != 5 {
		t.Fatalf("scheduler Peek(5) after feeder restart = %+v, %v; want result 5", e, ok)
	}
	if !r.Release(held) {
		t.Fatalf("Release of a claim held across the feeder restart = false, want true")
	}
	if r.Retired() {
		t.Fatalf("Retired() = true after a restart with the same layout, want false")
	}
}

func TestCreateReinitialisesOnOtherSlotCount(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cache")
	c, err := Create(path, 8)
	if err != nil {
		t.Fatal(err)
	}
	c.Fill(1, entry(1))
	c.SetHeartbeat(99)
	r := openCache(t, path)
	c.Close()

	c2, err := Create(path, 16)
	if err != nil {
		t.Fatalf("Create with another slot count: %v", err)
	}
	defer c2.Close()
	if c2.NSlots() != 16 {
		t.Fatalf("NSlots = %d, want 16", c2.NSlots())
	}
	for i := 0; i < 16; i++ {
		wantState(t, c2, i, SlotEmpty)
	}
	if !r.Retired() || r.Heartbeat() != 0 {
		t.Fatalf("old mapping Retired() = %v, Heartbeat() = %d; want true, 0", r.Retired(), r.Heartbeat())
	}
	r2 := openCache(t, path)
	if r2.NSlots() != 16 || r2.Retired() {
		t.Fatalf("reopened NSlots = %d, Retired = %v; want 16, false", r2.NSlots(), r2.Retired())
	}
	if _, err := os.Stat(path + ".new"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file left behind: stat error %v", err)
	}
}

func TestCreateReplacesForeignFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cache")
	if err := os.WriteFile(path, []byte(strings.Repeat("junk", 3000)), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Create(path, 2)
	if err != nil {
		t.Fatalf("Create over a foreign file: %v", err)
	}
	defer c.Close()
	if !c.Fill(0, entry(1)) {
		t.Fatalf("Fill in the re-initialised cache = false")
	}
}

func TestCreateRefusesSecondFeeder(t *testing.T) {
	t.Parallel()
	c, path := newCache(t, 2)
	if c2, err := Create(path, 2); err == nil {
		c2.Close()
		t.Fatalf("second Create while the first holds the cache succeeded, want refused")
	} else if !strings.Contains(err.Error(), "another feeder") {
		t.Fatalf("second Create error = %q, want it to name another feeder", err)
	}
	c.Close()
	c3, err := Create(path, 2)
	if err != nil {
		t.Fatalf("Create after the first feeder closed: %v", err)
	}
	c3.Close()
}

func TestCreateRejectsBadSlotCount(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, -1, MaxSlots + 1} {
		if c, err := Create(filepath.Join(t.TempDir(), "c"), n); err == nil {
			c.Close()
			t.Errorf("Create with %d slots succeeded, want an error", n)
		}
	}
}

func BenchmarkClaimRelease(b *testing.B) {
	c, _ := newCache(b, 1)
	e := entry(1)
	for b.Loop() {
		c.Fill(0, e)
		cl, ok := c.Claim(0, 1, 1)
		if !ok || !c.Release(cl) {
			b.Fatal("claim/release failed")
		}
	}
}

// Many claimers on one hot slot: the cost under contention.
func BenchmarkClaimUnclaimContended(b *testing.B) {
	c, _ := newCache(b, 1)
	c.Fill(0, entry(1))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if cl, ok := c.Claim(0, 1, 1); ok {
				c.Unclaim(cl)
			}
		}
	})
}

// A scheduler may keep a Claim past the Close of a replaced mapping; using
// it then must fail, not crash.
func TestClosedCacheRefusesEverything(t *testing.T) {
	t.Parallel()
	c, path := newCache(t, 2)
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	c.Fill(0, entry(1))
	cl, ok := r.Claim(0, 1, 1)
	if !ok {
		t.Fatal("Claim = false")
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if r.Release(cl) || r.Unclaim(cl) || r.Fill(1, entry(2)) {
		t.Fatalf("Release/Unclaim/Fill on a closed cache succeeded, want refused")
	}
	if _, ok := r.Claim(0, 1, 1); ok {
		t.Fatalf("Claim on a closed cache succeeded")
	}
	if !r.Retired() || r.Heartbeat() != 0 || r.NSlots() != 0 {
		t.Fatalf("closed cache Retired = %v, Heartbeat = %d, NSlots = %d; want true, 0, 0", r.Retired(), r.Heartbeat(), r.NSlots())
	}
	if _, _, err := r.Tables(); err == nil {
		t.Fatalf("Tables on a closed cache: no error")
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestCreateRetiresOlderLayout(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cache")
	c, err := Create(path, 8)
	if err != nil {
		t.Fatal(err)
	}
	c.Fill(1, entry(1))
	// Make it a file an older feeder left: layout version 1.
	atomic.StoreUint32(c.u32(hVersion), LayoutVersion-1)
	old, err := mapFile(path) // an older scheduler's mapping
	if err != nil {
		t.Fatal(err)
	}
	defer old.unmap()
	c.Close()

	c2, err := Create(path, 8)
	if err != nil {
		t.Fatalf("Create over a version-%d file: %v", LayoutVersion-1, err)
	}
	defer c2.Close()
	wantState(t, c2, 1, SlotEmpty)
	if atomic.LoadUint32(old.u32(hRetired)) != 1 {
		t.Fatalf("version-%d file not marked retired when replaced, want its schedulers told to reopen", LayoutVersion-1)
	}
}

func TestEntryFlagsRoundTrip(t *testing.T) {
	t.Parallel()
	c, path := newCache(t, 2)
	r := openCache(t, path)
	e := entry(9)
	e.Flags = row.SendReliableOnly
	if !c.Fill(0, e) {
		t.Fatal("Fill = false")
	}
	if got, ok := r.Peek(0); !ok || got.Flags != row.SendReliableOnly || got != e {
		t.Fatalf("Peek after Fill with flags = %+v, %v; want %+v", got, ok, e)
	}
}
