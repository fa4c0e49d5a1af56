package outputfile

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// checkTombstone fails unless path is a tombstone standing until until.
func checkTombstone(t *testing.T, path string, until time.Time) os.FileInfo {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatalf("tombstone %s: %v", path, err)
	}
	if !Tombstoned(st, until.Add(-time.Second)) || Tombstoned(st, until) || !st.ModTime().Equal(until) {
		t.Fatalf("%s: mode %v size %d mtime %v; want an empty closed tombstone until %v", path, st.Mode(), st.Size(), st.ModTime(), until)
	}
	return st
}

func TestTombstoneExpiryRoundsUpToAStep(t *testing.T) {
	t.Parallel()
	base := time.Unix(1_800_000_000, 0) // a multiple of 600 s
	for _, tc := range []struct {
		expires, want time.Time
	}{
		{base, base},
		{base.Add(time.Nanosecond), base.Add(TombstoneStep)},
		{base.Add(time.Second), base.Add(TombstoneStep)},
		{base.Add(TombstoneStep - time.Second), base.Add(TombstoneStep)},
		{base.Add(-time.Second), base},
	} {
		if got := TombstoneExpiry(tc.expires); !got.Equal(tc.want) {
			t.Errorf("TombstoneExpiry(%v) = %v, want %v", tc.expires, got, tc.want)
		}
	}
}

// Tombstones of one step share an inode; another step gets another; an
// output linked elsewhere (the assimilator's results) keeps its data; a
// directory never made is made.
func TestTombstonerSharesAnInodePerStep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ts := NewTombstoner(dir, nil)
	exp := time.Now().Add(24 * time.Hour)
	until := TombstoneExpiry(exp)

	out := filepath.Join(dir, "ab", "wu_1_0_0")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, []byte("output"), FinishedMode); err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(dir, "results-copy")
	if err := os.Link(out, kept); err != nil {
		t.Fatal(err)
	}
	existed, err := ts.Leave(out, exp)
	if err != nil || !existed {
		t.Fatalf("Leave over an output = %v, %v; want existed", existed, err)
	}
	a := checkTombstone(t, out, until)
	if b, err := os.ReadFile(kept); err != nil || string(b) != "output" {
		t.Fatalf("the output's other link holds %q, %v after the tombstone; want its data", b, err)
	}

	// No file, no directory: made; the same step shares the inode.
	none := filepath.Join(dir, "cd", "wu_2_0_0")
	existed, err = ts.Leave(none, exp.Add(time.Second))
	if err != nil || existed {
		t.Fatalf("Leave where nothing was = %v, %v; want not existed", existed, err)
	}
	if b := checkTombstone(t, none, until); !os.SameFile(a, b) {
		t.Errorf("two tombstones of one step are two inodes")
	}
	later := filepath.Join(dir, "cd", "wu_3_0_0")
	if _, err := ts.Leave(later, exp.Add(TombstoneStep)); err != nil {
		t.Fatal(err)
	}
	if c := checkTombstone(t, later, TombstoneExpiry(exp.Add(TombstoneStep))); os.SameFile(a, c) {
		t.Errorf("tombstones of two steps share an inode")
	}

	// Another Tombstoner of the directory (a replica) uses the same file.
	other := filepath.Join(dir, "ef", "wu_4_0_0")
	if _, err := NewTombstoner(dir, nil).Leave(other, exp); err != nil {
		t.Fatal(err)
	}
	if d := checkTombstone(t, other, until); !os.SameFile(a, d) {
		t.Errorf("a second Tombstoner made its own file for the same step")
	}
	// The shared files are not left-over files.
	if left, err := ListLeft(dir, time.Now(), "results-copy"); err != nil || len(left) != 0 {
		t.Errorf("ListLeft = %q, %v; want nothing (tombstones and their shared files)", left, err)
	}
}

// Concurrent Leaves of one step make one shared file.
func TestTombstonerConcurrentLeaves(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ts := NewTombstoner(dir, nil)
	exp := time.Now().Add(time.Hour)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := ts.Leave(filepath.Join(dir, "x", "wu_"+string(rune('a'+i))), exp); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	entries, err := os.ReadDir(filepath.Join(dir, TombstoneDir))
	if err != nil || len(entries) != 1 {
		t.Fatalf("shared files = %v, %v; want one", entries, err)
	}
}

// A shared file at the link limit gives way to a new generation; where
// the file system cannot link, each tombstone is a file of its own.
func TestTombstonerLinkLimitAndNoLinks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ts := NewTombstoner(dir, nil)
	exp := time.Now().Add(time.Hour)
	until := TombstoneExpiry(exp)
	full := map[string]bool{}
	ts.link = func(oldname, newname string) error {
		if full[oldname] {
			return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: syscall.EMLINK}
		}
		return os.Link(oldname, newname)
	}
	a := filepath.Join(dir, "x", "a")
	if _, err := ts.Leave(a, exp); err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(dir, TombstoneDir)
	entries, _ := os.ReadDir(shared)
	for _, e := range entries {
		full[filepath.Join(shared, e.Name())] = true
	}
	b := filepath.Join(dir, "x", "b")
	if _, err := ts.Leave(b, exp); err != nil {
		t.Fatalf("Leave at the link limit: %v", err)
	}
	sa, sb := checkTombstone(t, a, until), checkTombstone(t, b, until)
	if os.SameFile(sa, sb) {
		t.Errorf("the tombstone after the link limit shares the full inode")
	}
	if _, err := os.Stat(filepath.Join(dir, TombstoneDir, strconv.FormatInt(until.Unix(), 10)+"-1")); err != nil {
		t.Errorf("no second generation of the shared file: %v", err)
	}

	ts.link = func(oldname, newname string) error {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: syscall.EPERM}
	}
	c, d := filepath.Join(dir, "y", "c"), filepath.Join(dir, "y", "d")
	if err := os.MkdirAll(filepath.Dir(c), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c, []byte("output"), FinishedMode); err != nil {
		t.Fatal(err)
	}
	if existed, err := ts.Leave(c, exp.Add(2*TombstoneStep)); err != nil || !existed {
		t.Fatalf("Leave without links = %v, %v; want existed", existed, err)
	}
	if _, err := ts.Leave(d, exp.Add(2*TombstoneStep)); err != nil {
		t.Fatal(err)
	}
	u2 := TombstoneExpiry(exp.Add(2 * TombstoneStep))
	if sc, sd := checkTombstone(t, c, u2), checkTombstone(t, d, u2); os.SameFile(sc, sd) {
		t.Errorf("tombstones share an inode where links fail")
	}
}

// The shared files of steps that have passed are deleted when a new one is
// made; the tombstones linked to them stay.
func TestTombstonerPrunesExpiredSharedFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Now()
	ts := NewTombstoner(dir, func() time.Time { return now })
	old := filepath.Join(dir, "x", "old")
	if _, err := ts.Leave(old, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * TombstoneStep)
	if _, err := ts.Leave(filepath.Join(dir, "x", "new"), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, TombstoneDir))
	if err != nil || len(entries) != 1 || entries[0].Name() != strconv.FormatInt(TombstoneExpiry(now.Add(time.Hour)).Unix(), 10) {
		t.Errorf("shared files after the first expired: %v, %v; want only the new step's", entries, err)
	}
	if _, err := os.Lstat(old); err != nil {
		t.Errorf("the tombstone of the expired step: %v; want it left to the orphan sweep", err)
	}
}
