//go:build !linux

package assimilator

import (
	"fmt"
	"os"
)

// syncFiles syncs each of paths where there is no syncfs.
func syncFiles(_ string, paths []string) error {
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("sync file: %w", err)
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("sync file %s: %w", p, err)
		}
	}
	return nil
}
