package localproject

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/outputfile"
)

// TestCountFilesSkipsStandingTombstones: a tombstone the file deleter left
// for a certificate still good is not a file left over until it expires;
// an expired one that is still there is.
func TestCountFilesSkipsStandingTombstones(t *testing.T) {
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
	if n, err := countFiles(dir); err != nil || n != 2 {
		t.Errorf("countFiles = %d, %v; want 2 (an output and an expired tombstone, not the standing one)", n, err)
	}
}
