// Package outputfile says what an uploaded output file is worth: whether
// its upload may still write to it, and whether it counts. The data server
// writes outputs, the scheduler closes them when it records a report, and
// the validator and assimilator read them; they agree through this
// package alone.
//
// The state is the file's mode, not a side file or an extended attribute:
// the mode goes with the inode into every hard link (the assimilated
// results), is changed and read with the file open and locked (Lock) so it
// cannot race with a writer, works on every file system, and also stops
// programs running as other non-root users from writing to the file.
//
//   - Writing (0644): an upload in progress. It never counts.
//   - Finished (0444): the upload reached the size the client declared and
//     the data server marked it. It counts, and nothing writes to it again.
//   - Closed (0400): closed before it was finished, because its result is
//     over. It never counts, and nothing writes to it again.
//     An empty one whose mtime lies ahead is a tombstone (Tombstoner), left where an
//     output was deleted while its upload certificate is still good.
//
// An upload may write only to a file whose owner write bit is set
// (Writable), so a file an administrator made read-only is left alone too;
// only the exact Finished mode counts.
package outputfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Modes of the three states.
const (
	WritingMode  fs.FileMode = 0o644
	FinishedMode fs.FileMode = 0o444
	ClosedMode   fs.FileMode = 0o400
)

// ErrBusy is returned by Lock when another open file holds the lock: an
// upload is writing the file now.
var ErrBusy = errors.New("output file is being written by another request")

// Writable reports whether an upload may still write to a file of mode m.
func Writable(m fs.FileMode) bool {
	return m.IsRegular() && m.Perm()&0o200 != 0
}

// Finished reports whether a file of mode m is a finished output, the
// only kind that counts.
func Finished(m fs.FileMode) bool {
	return m.IsRegular() && m.Perm() == FinishedMode
}

// Close makes the output at path final, as the scheduler does when it
// records the report of the output's result, and reports whether it is
// finished, and its size. An unfinished file is closed (ClosedMode), and a
// missing one is created closed and empty, so that the result's upload
// certificate can no longer write to that name while the file exists;
// when the file deleter removes it while the certificate is still good it
// leaves a tombstone (Tombstoner), and after that the certificate's expiry
// (keys.UploadCertificate) refuses it. A file an upload is writing
// at this moment cannot be closed: it is reported unfinished and left to
// its writer, and it does not count for this report.
//
// A finished file is final, so one stat settles it, without the open and
// the lock (most reports find their outputs finished), and it counts even
// while an upload holds it: a client that lost the reply to its last
// upload sends it again, and the data server locks the file to tell it
// so.
func Close(path string) (finished bool, size int64, err error) {
	if st, err := os.Stat(path); err == nil && Finished(st.Mode()) {
		return true, st.Size(), nil
	}
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, ClosedMode)
	if errors.Is(err, fs.ErrNotExist) {
		// The fan-out directory is made by the first upload to it.
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return false, 0, fmt.Errorf("close output: %w", err)
		}
		f, err = os.OpenFile(path, os.O_RDONLY|os.O_CREATE, ClosedMode)
	}
	if err != nil {
		return false, 0, fmt.Errorf("close output: %w", err)
	}
	defer f.Close()
	if err := Lock(f); errors.Is(err, ErrBusy) {
		return false, 0, nil
	} else if err != nil {
		return false, 0, fmt.Errorf("close output %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		return false, 0, fmt.Errorf("close output: %w", err)
	}
	switch {
	case !st.Mode().IsRegular():
		return false, 0, nil
	case Finished(st.Mode()):
		return true, st.Size(), nil
	case st.Mode().Perm() != ClosedMode:
		// Also a file just created: the umask may have narrowed the mode.
		if err := f.Chmod(ClosedMode); err != nil {
			return false, 0, fmt.Errorf("close output %s: %w", path, err)
		}
	}
	return false, st.Size(), nil
}

// tombstoneTries bounds how often a tombstone's making removes a file an upload
// created again between its removal and the tombstone's creation.
const tombstoneTries = 3

// removeOutput removes the output at path before a tombstone takes its
// place, and reports whether there was one.
func removeOutput(path string) (bool, error) {
	switch err := os.Remove(path); {
	case err == nil:
		return true, nil
	case !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("tombstone output: %w", err)
	}
	return false, nil
}

// tombstoneFile replaces the output at path, if any, with a tombstone of
// its own (Tombstoner shares one inode among many, and falls back to this
// where it cannot link): an
// empty closed file whose mtime is expires, the expiry of its result's
// upload certificates. The file deleter leaves one when it deletes the
// outputs of a result whose certificates are still good, so that they
// cannot create the file again (the data server writes nothing to a
// closed file); the orphan sweep judges age by mtime, so it keeps the
// tombstone until then. existed reports whether a file was there.
//
// The tombstone is created exclusively after the removal: an upload that
// holds the old file open writes only to the removed inode, and one that
// created the file again in between loses it to the next try.
func tombstoneFile(path string, expires time.Time) (existed bool, err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, fmt.Errorf("tombstone output: %w", err)
	}
	for try := 1; ; try++ {
		if removed, err := removeOutput(path); err != nil {
			return existed, err
		} else if removed {
			existed = true
		}
		f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, ClosedMode)
		if errors.Is(err, fs.ErrExist) && try < tombstoneTries {
			continue
		}
		if err != nil {
			return existed, fmt.Errorf("tombstone output: %w", err)
		}
		// The umask may have narrowed the mode.
		err = f.Chmod(ClosedMode)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chtimes(path, expires, expires)
		}
		if err != nil {
			return existed, fmt.Errorf("tombstone output %s: %w", path, err)
		}
		return existed, nil
	}
}

// Tombstoned reports whether info is a tombstone (Tombstoner) that still
// stands at now: empty, closed, and its certificates' expiry ahead. Such a
// file is no output and no leak: it is there to refuse uploads.
func Tombstoned(info fs.FileInfo, now time.Time) bool {
	return info.Mode().IsRegular() && info.Mode().Perm() == ClosedMode && info.Size() == 0 && info.ModTime().After(now)
}

// ListLeft lists the regular files below dir (their paths relative to
// dir), less the tombstones still standing at now (Tombstoned), files
// named in ignore, and the shared files of tombstones (TombstoneDir, a
// few a day, deleted as they expire): a standing tombstone refuses uploads
// until its certificate expires, so it is not a file left over until then. The
// checks of the local project, chaos and the paper's benchmark list what a
// finished project left behind with it.
func ListLeft(dir string, now time.Time, ignore ...string) ([]string, error) {
	var left []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == TombstoneDir {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() || slices.Contains(ignore, d.Name()) {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if !Tombstoned(info, now) {
			rel, err := filepath.Rel(dir, path)
			if err != nil {
				return err
			}
			left = append(left, rel)
		}
		return nil
	})
	return left, err
}
