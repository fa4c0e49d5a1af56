package assimilator

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// syncFiles makes the data of the files linked and written since the last
// Flush durable with one syncfs(2) of the file system holding dir (which
// reports write-back errors since Linux 5.8): one journal commit for a page
// of files instead of one per file, and clean files (uploads the data
// server synced) cost nothing. The files are in dir.
func syncFiles(dir string, _ []string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync files: %w", err)
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		return fmt.Errorf("sync files under %s: %w", dir, err)
	}
	return nil
}
