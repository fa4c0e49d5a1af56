package outputfile_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/outputfile"
)

// TestCountLeftSkipsStandingTombstones: a tombstone the file deleter left
// for a certificate still good is no leak until it expires; an expired
// one that is still there is.
func TestCountLeftSkipsStandingTombstones(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Now()
	if err := os.MkdirAll(filepath.Join(dir, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "1", "wu_1_r0_0"), []byte("output"), outputfile.FinishedMode); err != nil {
		t.Fatal(err)
	}
	if _, err := outputfile.Tombstone(filepath.Join(dir, "2", "wu_2_r0_0"), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := outputfile.Tombstone(filepath.Join(dir, "3", "wu_3_r0_0"), now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n, err := outputfile.CountLeft(dir, now); err != nil || n != 2 {
		t.Errorf("CountLeft = %d, %v; want 2 (an output and an expired tombstone, not the standing one)", n, err)
	}
}
