package outputfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// TombstoneDir is the directory, in the upload directory, of the files
// tombstones are hard links to (Tombstoner). No output's path is there:
// output names never begin with a dot.
const TombstoneDir = ".tombstones"

// TombstoneStep is the granularity of a tombstone's expiry: a tombstone
// stands until its certificates' expiry rounded up to a multiple of it, so
// that the tombstones of results whose deadlines lie close together share
// one inode. Standing a few minutes longer only refuses uploads the
// certificate would have refused a moment later.
const TombstoneStep = 10 * time.Minute

// Tombstoner leaves tombstones (see tombstoneFile) in one upload directory as
// hard links to a few shared files in TombstoneDir, one per expiry step,
// instead of creating a file for each. Creating an inode is what costs: on
// the development machine a file's creation takes about 0.7 ms of kernel
// CPU against 14 µs for a link, and the paper's benchmark leaves a
// tombstone for every output. A tombstone so made is what tombstoneFile makes
// (an empty closed file whose mtime lies ahead), sharing its inode, which
// nothing changes: Close leaves a closed file's mode alone, and uploads
// write nothing to it. Where the file system refuses the link (no hard
// links, or a different device), the tombstone is created on its own as
// tombstoneFile does.
//
// A Tombstoner is safe for concurrent use. Several may share a directory
// (file deleter replicas): a shared file appears under its final name only
// whole, and the expired ones are deleted whenever a new one is made.
type Tombstoner struct {
	dir string
	// link is os.Link; tests replace it to see the fallback.
	link func(oldname, newname string) error
	now  func() time.Time

	mu     sync.Mutex
	shared map[int64]string // path of the shared file of each expiry
	gen    map[int64]int    // generation of each expiry's shared file
}

// NewTombstoner returns a Tombstoner for the upload directory uploadDir;
// now is the clock that says which shared files have expired (nil:
// time.Now).
func NewTombstoner(uploadDir string, now func() time.Time) *Tombstoner {
	if now == nil {
		now = time.Now
	}
	return &Tombstoner{dir: filepath.Join(uploadDir, TombstoneDir), link: os.Link, now: now,
		shared: map[int64]string{}, gen: map[int64]int{}}
}

// Leave replaces the output at path, if any, with a tombstone standing
// until TombstoneExpiry(expires), and reports whether a file
// was there. As tombstoneFile, it removes the file first and then adds the
// tombstone's name exclusively, trying again when an upload created the
// file in between.
func (t *Tombstoner) Leave(path string, expires time.Time) (existed bool, err error) {
	until := TombstoneExpiry(expires).Unix()
	madeDir, renewed := false, false
	for try := 1; ; try++ {
		if removed, err := removeOutput(path); err != nil {
			return existed, err
		} else if removed {
			existed = true
		}
		shared, err := t.sharedFile(until)
		if err != nil {
			return existed, err
		}
		err = t.link(shared, path)
		switch {
		case err == nil:
			return existed, nil
		case errors.Is(err, fs.ErrExist) && try < tombstoneTries:
			continue // an upload created the file again
		case errors.Is(err, fs.ErrNotExist) && !madeDir:
			// The output's directory (an output never uploaded), or the
			// shared file (removed by another replica whose clock is
			// ahead): make both again.
			madeDir = true
			t.forget(until, shared)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return existed, fmt.Errorf("tombstone output: %w", err)
			}
			try--
			continue
		case errors.Is(err, syscall.EMLINK) && !renewed:
			// The shared file has as many links as the file system
			// allows: the next generation takes over.
			renewed = true
			t.renew(until, shared)
			try--
			continue
		case linkUnsupported(err):
			e, err := tombstoneFile(path, time.Unix(until, 0))
			return existed || e, err
		}
		return existed, fmt.Errorf("tombstone output %s: %w", path, err)
	}
}

// linkUnsupported reports whether err says the file system cannot link
// here at all (no hard links, another device) or no more to this inode.
func linkUnsupported(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOTSUP) || errors.Is(err, syscall.EXDEV) ||
		errors.Is(err, syscall.EMLINK) || errors.Is(err, syscall.ENOSYS)
}

// TombstoneExpiry is when a tombstone left for certificates expiring at
// expires stops standing: expires rounded up to a whole TombstoneStep.
func TombstoneExpiry(expires time.Time) time.Time {
	step := int64(TombstoneStep / time.Second)
	s := expires.Unix()
	if expires.Nanosecond() > 0 {
		s++
	}
	return time.Unix((s+step-1)/step*step, 0)
}

// renew moves the expiry until on to a new shared file, if path is still
// its file.
func (t *Tombstoner) renew(until int64, path string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.shared[until] == path {
		delete(t.shared, until)
		t.gen[until]++
	}
}

// forget drops the shared file of until from the cache, if it is still
// path, so that the next Leave makes it again.
func (t *Tombstoner) forget(until int64, path string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.shared[until] == path {
		delete(t.shared, until)
	}
}

// sharedFile returns the path of the shared file standing until until,
// making it if this Tombstoner has not. A file that has reached the file
// system's link limit is followed by another generation (renew), named
// <until>-<generation>.
func (t *Tombstoner) sharedFile(until int64) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.shared[until]; ok {
		return p, nil
	}
	if err := os.MkdirAll(t.dir, 0o755); err != nil {
		return "", fmt.Errorf("tombstone directory: %w", err)
	}
	t.prune()
	name := strconv.FormatInt(until, 10)
	if g := t.gen[until]; g > 0 {
		name += "-" + strconv.Itoa(g)
	}
	p := filepath.Join(t.dir, name)
	if err := t.makeShared(p, until); err != nil {
		return "", err
	}
	t.shared[until] = p
	return p, nil
}

// makeShared makes the shared file p standing until until, unless it is
// there: it is made under a temporary name and linked to p, so p is never
// seen half made (mode or mtime not yet set).
func (t *Tombstoner) makeShared(p string, until int64) error {
	if info, err := os.Stat(p); err == nil && sharedOK(info, until) {
		return nil
	}
	tmp, err := os.CreateTemp(t.dir, ".new-*")
	if err != nil {
		return fmt.Errorf("tombstone: %w", err)
	}
	name := tmp.Name()
	defer os.Remove(name)
	err = tmp.Chmod(ClosedMode)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	at := time.Unix(until, 0)
	if err == nil {
		err = os.Chtimes(name, at, at)
	}
	if err != nil {
		return fmt.Errorf("tombstone %s: %w", name, err)
	}
	err = t.link(name, p)
	if errors.Is(err, fs.ErrExist) {
		// Another replica made it, or one made badly by hand is there.
		if info, serr := os.Stat(p); serr == nil && sharedOK(info, until) {
			return nil
		}
		if err = os.Rename(name, p); err == nil {
			return nil
		}
	}
	if err != nil && linkUnsupported(err) {
		// Leave falls back to a file per tombstone when its own link
		// fails the same way; the name is only a cache key then.
		return os.Rename(name, p)
	}
	if err != nil {
		return fmt.Errorf("tombstone %s: %w", p, err)
	}
	return nil
}

// sharedOK reports whether info is a shared file standing until until.
func sharedOK(info fs.FileInfo, until int64) bool {
	return info.Mode().IsRegular() && info.Mode().Perm() == ClosedMode && info.Size() == 0 && info.ModTime().Unix() == until
}

// prune deletes the shared files whose expiry has passed (the tombstones
// linked to them keep the inode until the orphan sweep deletes them) and
// temporary files left by a crash. Errors are ignored: a file left is
// tried again at the next prune.
func (t *Tombstoner) prune() {
	entries, err := os.ReadDir(t.dir)
	if err != nil {
		return
	}
	now := t.now()
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".new-") {
			if info, err := e.Info(); err == nil && now.Sub(info.ModTime()) > time.Hour {
				_ = os.Remove(filepath.Join(t.dir, name))
			}
			continue
		}
		stamp, _, _ := strings.Cut(name, "-")
		until, err := strconv.ParseInt(stamp, 10, 64)
		if err != nil || time.Unix(until, 0).After(now) {
			continue
		}
		_ = os.Remove(filepath.Join(t.dir, name))
		delete(t.shared, until)
		delete(t.gen, until)
	}
}
