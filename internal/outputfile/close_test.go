package outputfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/taskserver/taskserver/internal/outputfile"
)

// Close reports a finished output finished, with its size, and leaves it
// as it is, even while another open file holds its lock (an upload sent
// again after a lost reply); it closes an unfinished one unless that one
// is locked (an upload writing it), and creates a missing one closed and
// empty, directory and all.
func TestCloseByState(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, mode os.FileMode, data string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	lock := func(path string) {
		t.Helper()
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		if err := outputfile.Lock(f); err != nil {
			t.Fatal(err)
		}
	}
	finished := write("finished", outputfile.FinishedMode, "twelve bytes")
	finishedBusy := write("finished_busy", outputfile.FinishedMode, "eleven byte")
	lock(finishedBusy)
	writing := write("writing", outputfile.WritingMode, "half")
	writingBusy := write("writing_busy", outputfile.WritingMode, "half")
	lock(writingBusy)
	missing := filepath.Join(dir, "ab", "missing")

	for _, tc := range []struct {
		path         string
		wantFinished bool
		wantSize     int64
		wantMode     os.FileMode
	}{
		{finished, true, 12, outputfile.FinishedMode},
		{finishedBusy, true, 11, outputfile.FinishedMode},
		{writing, false, 4, outputfile.ClosedMode},
		{writingBusy, false, 0, outputfile.WritingMode},
		{missing, false, 0, outputfile.ClosedMode},
	} {
		gotFinished, gotSize, err := outputfile.Close(tc.path)
		if err != nil {
			t.Errorf("%s: %v", filepath.Base(tc.path), err)
			continue
		}
		if gotFinished != tc.wantFinished || gotSize != tc.wantSize {
			t.Errorf("%s: finished %v, size %d; want %v, %d", filepath.Base(tc.path), gotFinished, gotSize, tc.wantFinished, tc.wantSize)
		}
		st, err := os.Stat(tc.path)
		if err != nil {
			t.Errorf("%s: %v", filepath.Base(tc.path), err)
			continue
		}
		if st.Mode().Perm() != tc.wantMode {
			t.Errorf("%s: mode %v after Close, want %v", filepath.Base(tc.path), st.Mode().Perm(), tc.wantMode)
		}
	}
}
