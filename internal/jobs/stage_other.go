//go:build !linux

package jobs

import (
	"fmt"
	"os"
)

// syncEach syncs each file as it is written where there is no syncfs.
func syncEach(f *os.File) error { return f.Sync() }

// syncAll syncs each directory written to, which makes the renames durable.
func syncAll(_ string, dirs map[string]bool) error {
	for d := range dirs {
		if err := syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// syncDir makes the entries of dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
