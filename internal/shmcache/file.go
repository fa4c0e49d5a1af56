package shmcache

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
)

// fileMode lets a scheduler running as another user of the feeder's group
// map the file read-write, which claiming needs.
const fileMode = 0o660

// Create maps the cache file at path for the feeder, creating it if needed.
// A file with this layout and nslots slots is reused as it is, slots and
// all, so schedulers keep their mappings and claims across a feeder restart.
// Anything else is replaced by a fresh file (written aside and renamed into
// place, so no reader ever maps a half-made one); the old file, if it was one
// of ours, is marked retired so schedulers still mapping it know to reopen.
// Only one feeder may hold a path: Create fails if another has it.
func Create(path string, nslots int) (*Cache, error) {
	if nslots < 1 || nslots > MaxSlots {
		return nil, fmt.Errorf("create shared-memory cache %s: %d slots, want 1..%d", path, nslots, MaxSlots)
	}
	lock, err := lockFile(path + ".lock")
	if err != nil {
		return nil, fmt.Errorf("create shared-memory cache %s: %w", path, err)
	}
	c, err := create(path, nslots)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("create shared-memory cache %s: %w", path, err)
	}
	c.lock = lock
	return c, nil
}

func create(path string, nslots int) (*Cache, error) {
	old, err := mapFile(path)
	switch {
	case err == nil:
		if verr := old.check(); verr == nil && old.nslots == nslots && !old.Retired() {
			return old, nil
		}
	case errors.Is(err, os.ErrNotExist):
		old = nil
	default:
		// A file we cannot map (e.g. empty) is simply replaced.
		old = nil
	}
	tmp := path + ".new"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		if old != nil {
			old.unmap()
		}
		return nil, fmt.Errorf("remove leftover %s: %w", tmp, err)
	}
	c, err := initFile(tmp, nslots)
	if err == nil {
		if rerr := os.Rename(tmp, path); rerr != nil {
			c.unmap()
			_ = os.Remove(tmp)
			c, err = nil, fmt.Errorf("rename %s into place: %w", tmp, rerr)
		}
	}
	if old != nil {
		if err == nil && old.hasOurHeader() {
			atomic.StoreUint32(old.u32(hRetired), 1)
			old.SetHeartbeat(0)
		}
		old.unmap()
	}
	if err != nil {
		return nil, err
	}
	c.path = path
	return c, nil
}

// initFile makes a zeroed file of the right size at path, maps it and writes
// the header. Zero is EMPTY generation 0 for every slot.
func initFile(path string, nslots int) (*Cache, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, fileMode)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := fileSize(nslots)
	if err := f.Truncate(int64(size)); err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("size %s to %d bytes: %w", path, size, err)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	c := &Cache{path: path, data: data, nslots: nslots}
	atomic.StoreUint32(c.u32(hVersion), LayoutVersion)
	atomic.StoreUint32(c.u32(hNSlots), uint32(nslots))
	atomic.StoreUint32(c.u32(hSlotSize), slotSize)
	atomic.StoreUint32(c.u32(hTablesCap), TablesCapacity)
	atomic.StoreUint64(c.u64(hMagic), magic)
	return c, nil
}

// Open maps the existing cache file at path for a scheduler. It returns an
// error wrapping ErrLayout if the file is not a cache of LayoutVersion.
func Open(path string) (*Cache, error) {
	c, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("open shared-memory cache %s (is the feeder running?): %w", path, err)
	}
	if err := c.check(); err != nil {
		c.unmap()
		return nil, fmt.Errorf("open shared-memory cache %s: %w", path, err)
	}
	return c, nil
}

// OpenReadOnly maps the existing cache file at path for reading only, for
// tools that inspect the cache (taskctl host explain): they need only read
// permission and cannot disturb a slot. Only NSlots, Heartbeat, Peek, Slot,
// SlotClaimer and Tables may be called on it; anything that writes faults.
func OpenReadOnly(path string) (*Cache, error) {
	c, err := mapFileMode(path, os.O_RDONLY, syscall.PROT_READ)
	if err != nil {
		return nil, fmt.Errorf("open shared-memory cache %s: %w", path, err)
	}
	if err := c.check(); err != nil {
		c.unmap()
		return nil, fmt.Errorf("open shared-memory cache %s: %w", path, err)
	}
	return c, nil
}

// mapFile maps the whole of an existing file without judging its contents.
func mapFile(path string) (*Cache, error) {
	return mapFileMode(path, os.O_RDWR, syscall.PROT_READ|syscall.PROT_WRITE)
}

func mapFileMode(path string, flag, prot int) (*Cache, error) {
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() < headerSize {
		return nil, fmt.Errorf("%w: file is %d bytes, shorter than a header", ErrLayout, fi.Size())
	}
	if fi.Size() > int64(fileSize(MaxSlots)) {
		return nil, fmt.Errorf("%w: file is %d bytes, larger than any cache", ErrLayout, fi.Size())
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), prot, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map: %w", err)
	}
	return &Cache{path: path, data: data}, nil
}

// hasOurHeader reports whether the file is a task-server cache of any
// layout version: every version keeps the retired flag at the same offset,
// so a feeder replacing an older layout can still tell its schedulers.
func (c *Cache) hasOurHeader() bool {
	return atomic.LoadUint64(c.u64(hMagic)) == magic
}

// check validates the header against this binary's layout and sets nslots.
func (c *Cache) check() error {
	if m := atomic.LoadUint64(c.u64(hMagic)); m != magic {
		return fmt.Errorf("%w: magic %#016x, want %#016x (not a task-server cache file)", ErrLayout, m, magic)
	}
	if v := atomic.LoadUint32(c.u32(hVersion)); v != LayoutVersion {
		return fmt.Errorf("%w: layout version %d, this binary reads version %d (run a feeder and schedulers of the same release)",
			ErrLayout, v, LayoutVersion)
	}
	if s, tc := atomic.LoadUint32(c.u32(hSlotSize)), atomic.LoadUint32(c.u32(hTablesCap)); s != slotSize || tc != TablesCapacity {
		return fmt.Errorf("%w: slot size %d and tables capacity %d, want %d and %d", ErrLayout, s, tc, slotSize, TablesCapacity)
	}
	n := int(atomic.LoadUint32(c.u32(hNSlots)))
	if n < 1 || n > MaxSlots || fileSize(n) != len(c.data) {
		return fmt.Errorf("%w: header says %d slots but the file is %d bytes", ErrLayout, n, len(c.data))
	}
	c.nslots = n
	return nil
}

func (c *Cache) unmap() {
	if c.data != nil {
		_ = syscall.Munmap(c.data)
		c.data, c.nslots = nil, 0
	}
}

// Close unmaps the file (and, for the feeder, releases its lock). The file
// stays: schedulers and the next feeder go on using it.
func (c *Cache) Close() error {
	var err error
	if c.data != nil {
		err = syscall.Munmap(c.data)
		c.data, c.nslots = nil, 0
	}
	if c.lock != nil {
		if cerr := c.lock.Close(); err == nil {
			err = cerr
		}
		c.lock = nil
	}
	if err != nil {
		return fmt.Errorf("close shared-memory cache %s: %w", c.path, err)
	}
	return nil
}

// lockFile takes an exclusive, non-blocking flock on path, so two feeders
// never fill one cache (they would cache the same results twice).
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another feeder holds %s", path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}
