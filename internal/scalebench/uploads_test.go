package scalebench

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/taskserver/taskserver/internal/outputfile"
)

// Outputs put by the load generator are finished uploads of outputData,
// links to one shared file; an output already there is left as it is, and
// a shared file at the link limit is replaced by a new one.
func TestUploadsAreFinishedLinksToASharedFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	u := &uploads{dir: dir}
	a, b := filepath.Join(dir, "upload", "1a", "r1_0"), filepath.Join(dir, "upload", "2b", "r2_0")
	for _, p := range []string{a, b, a} {
		if err := u.put(p); err != nil {
			t.Fatalf("put %s: %v", p, err)
		}
	}
	var inos []uint64
	for _, p := range []string{a, b} {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != string(outputData) || !outputfile.Finished(st.Mode()) {
			t.Errorf("%s: %q, mode %v; want the output data, finished", p, data, st.Mode())
		}
		inos = append(inos, st.Sys().(*syscall.Stat_t).Ino)
	}
	if inos[0] != inos[1] {
		t.Errorf("the outputs are separate files (inodes %d, %d), want links to one", inos[0], inos[1])
	}

	first, err := u.shared("")
	if err != nil {
		t.Fatal(err)
	}
	next, err := u.shared(first) // first reached the link limit
	if err != nil {
		t.Fatal(err)
	}
	if next == first {
		t.Fatalf("a full shared file was kept: %s", next)
	}
	if again, _ := u.shared(first); again != next {
		t.Errorf("a second writer that met the limit on %s got %s, want the new %s", first, again, next)
	}
	c := filepath.Join(dir, "upload", "3c", "r3_0")
	if err := u.put(c); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(next); err != nil || st.Sys().(*syscall.Stat_t).Nlink != 2 {
		t.Errorf("after the new shared file: %v, %v; want it linked by the next output", st, err)
	}
}
