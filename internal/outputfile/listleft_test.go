package outputfile_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/outputfile"
)

// TestListLeftSkipsStandingTombstones: a tombstone the file deleter left
// for a certificate still good is no leak until it expires; an expired
// one that is still there is.
func TestListLeftSkipsStandingTombstones(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Now()
	if err := os.MkdirAll(filepath.Join(dir, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "1", "wu_1_r0_0"), []byte("output"), outputfile.FinishedMode); err != nil {
		t.Fatal(err)
	}
	tombs := outputfile.NewTombstoner(dir, nil)
	if _, err := tombs.Leave(filepath.Join(dir, "2", "wu_2_r0_0"), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := tombs.Leave(filepath.Join(dir, "3", "wu_3_r0_0"), now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	left, err := outputfile.ListLeft(dir, now)
	want := []string{filepath.Join("1", "wu_1_r0_0"), filepath.Join("3", "wu_3_r0_0")}
	if err != nil || !slices.Equal(left, want) {
		t.Errorf("ListLeft = %q, %v; want %q (an output and an expired tombstone, not the standing one)", left, err, want)
	}
}
