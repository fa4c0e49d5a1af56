package shmcache

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
)

// tablesWait bounds how long Tables waits for a publication in progress.
// Publishing copies at most TablesCapacity bytes, which takes about a
// millisecond; a sequence number that stays odd means the feeder died
// mid-publication, and the next feeder's SetTables repairs it.
const tablesWait = 2 * time.Second

// SetTables publishes t for the schedulers. Readers never see a torn copy:
// the sequence number is odd while the blob is written and moves on to the
// next even number when done. Feeder only.
func (c *Cache) SetTables(t Tables) error {
	if c.data == nil {
		return errors.New("publish tables: shared-memory cache is closed")
	}
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("encode tables: %w", err)
	}
	if len(b) > TablesCapacity {
		return fmt.Errorf("publish tables: encoded size %d bytes exceeds the cache's %d-byte tables region (too many or too large app versions)",
			len(b), TablesCapacity)
	}
	seqp := c.u64(hTablesSeq)
	s := atomic.LoadUint64(seqp)
	if s%2 == 1 {
		s++ // the previous feeder died mid-publication
	}
	atomic.StoreUint64(seqp, s+1)
	copy(c.data[tablesOff:tablesOff+len(b)], b)
	atomic.StoreUint64(c.u64(hTablesLen), uint64(len(b)))
	atomic.StoreUint64(seqp, s+2)
	return nil
}

// Tables returns the static tables and their generation, which changes each
// time the feeder republishes them. The returned slices are shared between
// callers until the next generation and must not be modified. It returns
// ErrNoTables if nothing was published yet.
func (c *Cache) Tables() (Tables, uint64, error) {
	if c.data == nil {
		return Tables{}, 0, errors.New("read shared-memory cache tables: cache is closed")
	}
	seqp := c.u64(hTablesSeq)
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := atomic.LoadUint64(seqp); s != 0 && s == c.tablesAt {
		return c.tables, s / 2, nil
	}
	deadline := time.Now().Add(tablesWait)
	for try := 0; ; try++ {
		if try > 0 {
			if time.Now().After(deadline) {
				return Tables{}, 0, errors.New("read shared-memory cache tables: a publication has been in progress for too long (feeder died mid-way?)")
			}
			if try < 100 {
				runtime.Gosched()
			} else {
				time.Sleep(100 * time.Microsecond)
			}
		}
		s1 := atomic.LoadUint64(seqp)
		if s1 == 0 {
			return Tables{}, 0, ErrNoTables
		}
		if s1%2 == 1 {
			continue
		}
		n := atomic.LoadUint64(c.u64(hTablesLen))
		if n > TablesCapacity {
			continue
		}
		buf := make([]byte, n)
		copy(buf, c.data[tablesOff:tablesOff+int(n)])
		if atomic.LoadUint64(seqp) != s1 {
			continue
		}
		var t Tables
		if err := json.Unmarshal(buf, &t); err != nil {
			return Tables{}, 0, fmt.Errorf("decode shared-memory cache tables: %w", err)
		}
		c.tables, c.tablesAt = t, s1
		return t, s1 / 2, nil
	}
}
