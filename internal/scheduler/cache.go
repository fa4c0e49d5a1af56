package scheduler

import (
	"errors"
	"sync"
	"time"

	"github.com/taskserver/taskserver/internal/shmcache"
)

// Cache is the part of the shared-memory cache the scheduler uses.
type Cache interface {
	NSlots() int
	Peek(i int) (shmcache.Entry, bool)
	Claim(i int, claimer int32, now int64) (shmcache.Claim, bool)
	Release(cl shmcache.Claim) bool
	Unclaim(cl shmcache.Claim) bool
	Tables() (shmcache.Tables, uint64, error)
}

// CacheSource gives each request the cache to use for all of its claims.
type CacheSource interface {
	Current() (Cache, error)
}

// retiredGrace is how long a replaced mapping stays mapped after the last
// request picked it up: requests finish well within it (they time out
// sooner), so a claim taken on the old file is always released on it.
const retiredGrace = 2 * time.Minute

// CacheFile maps the feeder's cache file on first use and again whenever the
// feeder replaces the file (another slot count), so a scheduler can start
// before its feeder and outlive a feeder reconfiguration. A file of an
// unknown layout is an error every time: the scheduler must be upgraded.
type CacheFile struct {
	path string

	mu sync.Mutex
	c  *shmcache.Cache
}

// NewCacheFile returns a source for the cache file at path; it maps nothing
// yet.
func NewCacheFile(path string) *CacheFile { return &CacheFile{path: path} }

// Current returns the live mapping, opening or reopening the file if needed.
func (f *CacheFile) Current() (Cache, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.c != nil && !f.c.Retired() {
		return f.c, nil
	}
	c, err := shmcache.Open(f.path)
	if err != nil {
		if f.c != nil && !errors.Is(err, shmcache.ErrLayout) {
			// The replacement is not there yet: keep using the old mapping,
			// whose entries are still claimable until the feeder moves on.
			return f.c, nil
		}
		return nil, err
	}
	if old := f.c; old != nil {
		time.AfterFunc(retiredGrace, func() { _ = old.Close() })
	}
	f.c = c
	return c, nil
}

// Close unmaps the current file.
func (f *CacheFile) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.c == nil {
		return nil
	}
	err := f.c.Close()
	f.c = nil
	return err
}
