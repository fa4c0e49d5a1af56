package jobs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/taskserver/taskserver/internal/durable"
	"github.com/taskserver/taskserver/internal/fanout"
)

// stager writes the input files of one batch of jobs and then makes them
// all durable at once. Syncing each file and its directory one by one cost
// the work generator most of its CPU and wall time (a journal commit per
// file); sync syncs the batch's files and directories many at a time, so
// they share commits (package durable). Nothing refers to a file before
// sync returns: the rows are inserted after it.
type stager struct {
	root string
	fan  int
	// dirs holds every directory written to, made once per batch.
	dirs map[string]bool
	// files are the paths written.
	files []string
}

func newStager(root string, fan int) *stager {
	return &stager{root: root, fan: fan, dirs: map[string]bool{}}
}

// write stores data as file name under root (in its fan-out sub-directory)
// through a temporary file and a rename, so the file is either whole or
// absent under its name. It is durable only once sync returns.
func (s *stager) write(name string, data []byte) error {
	path, err := fanout.Path(s.root, name, s.fan)
	if err != nil {
		return fmt.Errorf("input file: %w", err)
	}
	return s.writePath(filepath.Dir(path), name, path, data)
}

// writePath writes data to path in dir, under name in messages.
func (s *stager) writePath(dir, name, path string, data []byte) error {
	if !s.dirs[dir] {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create input directory: %w", err)
		}
		s.dirs[dir] = true
	}
	tmp := tempPath(dir, name)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("stage input file: %w", err)
	}
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("stage input file %s: %w", name, err)
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	// The umask may have narrowed the mode; the data server and web server
	// must be able to read the file.
	if err := f.Chmod(0o644); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("stage input file %s: %w", name, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("stage input file %s: %w", name, err)
	}
	s.files = append(s.files, path)
	return nil
}

// tempPath is where file name in dir is written before its rename. Job
// names are unique and never reused, so the temporary name needs no random
// part: it can only be left over from a crashed attempt at this very file,
// which truncating replaces, or which RemoveInputs removes with the batch.
func tempPath(dir, name string) string { return filepath.Join(dir, "."+name+".tmp") }

// writeBeside stores data as name+suffix in name's fan-out directory (a
// gzip'd copy is served from beside its file), like write.
func (s *stager) writeBeside(name, suffix string, data []byte) error {
	path, err := fanout.Path(s.root, name, s.fan)
	if err != nil {
		return fmt.Errorf("input file: %w", err)
	}
	return s.writePath(filepath.Dir(path), name+suffix, path+suffix, data)
}

// sync makes every file written, and its directory entries, durable.
func (s *stager) sync() error {
	if len(s.files) == 0 {
		return nil
	}
	// The root too, in case staging created a sub-directory.
	s.dirs[s.root] = true
	paths := slices.Clone(s.files)
	for d := range s.dirs {
		paths = append(paths, d)
	}
	if err := durable.Files(paths); err != nil {
		return fmt.Errorf("sync input files: %w", err)
	}
	return nil
}
