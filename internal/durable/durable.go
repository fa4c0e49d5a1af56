// Package durable makes files and directory entries durable: many files at
// once, so that they share the file system's journal commits, and never by
// syncing the whole file system.
package durable

import (
	"fmt"
	"os"
	"sync"
)

// syncWorkers is how many files Files syncs at once. Concurrent
// fsyncs of one file system share its journal commits, so a page of files
// costs a few commits, not one per file.
const syncWorkers = 16

// Files makes the data of the files at paths durable, syncing syncWorkers
// of them at a time, and returns the first error. It syncs these files
// only, never the whole file system: a syncfs(2) also writes back every
// other process's dirty data there (the database's, the uploads being
// received), which on a slow disk made one assimilator page take tens of
// seconds. A file already clean costs only the wait for the commit that
// holds its last metadata change. Their directory entries need Dir.
func Files(paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan string)
	)
	for range min(syncWorkers, len(paths)) {
		wg.Go(func() {
			for p := range next {
				if err := syncFile(p); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for _, p := range paths {
		next <- p
	}
	close(next)
	wg.Wait()
	return first
}

// syncFile makes the data of the file at path durable.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sync file: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync file %s: %w", path, err)
	}
	return nil
}

// Dir makes the entries of dir (names created, renamed or removed in it)
// durable.
func Dir(dir string) error {
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
