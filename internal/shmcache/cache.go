package shmcache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/taskserver/taskserver/internal/row"
)

// LayoutVersion is the version of the file layout; a reader that finds
// another refuses with ErrLayout. Version 2 added the slot's send flags: a
// version-1 scheduler would ignore them and send a reliable-only instance to
// any host.
const LayoutVersion = 2

// ErrLayout means the file is not a cache this binary can read: wrong magic,
// another layout version, or a size that does not match its header. It is
// wrapped with what was found.
var ErrLayout = errors.New("shared-memory cache: unknown layout")

// ErrNoTables means the feeder has not published the static tables yet.
var ErrNoTables = errors.New("shared-memory cache: no tables published yet")

// MaxSlots bounds the slot count so the file stays a sensible size.
const MaxSlots = 1 << 20

// TablesCapacity is the size of the region holding the encoded static
// tables; SetTables refuses a larger encoding.
const TablesCapacity = 4 << 20

// magic identifies a cache file: "TSKCACHE" read as a little-endian uint64.
var magic = binary.LittleEndian.Uint64([]byte("TSKCACHE"))

// The file layout, version 2. Every field is naturally aligned and the
// mapping is page-aligned, so the 64-bit atomics are aligned too.
const (
	headerSize = 4096
	slotSize   = 128

	// header offsets
	hMagic     = 0  // uint64
	hVersion   = 8  // uint32
	hNSlots    = 12 // uint32
	hSlotSize  = 16 // uint32
	hTablesCap = 20 // uint32
	hHeartbeat = 24 // int64, Unix seconds
	hTablesSeq = 32 // uint64 seqlock: odd while the tables are being written
	hTablesLen = 40 // uint64 bytes of encoded tables
	hRetired   = 48 // uint32, 1 once a newer file has replaced this one

	tablesOff = headerSize
	slotsOff  = tablesOff + TablesCapacity

	// slot offsets
	sWord       = 0  // uint64: state (low 8 bits) | generation << 8
	sClaimer    = 8  // int32 pid of the claiming scheduler
	sClaimTime  = 16 // int64 Unix seconds of the claim
	sResultID   = 24 // int64
	sWorkunitID = 32 // int64
	sAppID      = 40 // int64
	sFpopsEst   = 48 // float64 bits
	sMemBound   = 56 // float64 bits
	sDiskBound  = 64 // float64 bits
	sDelayBound = 72 // int64
	sPriority   = 80 // int32
	sHRClass    = 84 // int32
	sFlags      = 88 // int32: result.send_flags
)

func fileSize(nslots int) int { return slotsOff + nslots*slotSize }

// SlotState is the state of a slot.
type SlotState uint32

// Slot states. FILLING is held while an entry is being written, by the
// feeder's Fill and by a scheduler's Unclaim.
const (
	SlotEmpty   SlotState = 0
	SlotFilling SlotState = 1
	SlotPresent SlotState = 2
	SlotBusy    SlotState = 3
)

// NumStates is the number of slot states, for arrays indexed by SlotState.
const NumStates = 4

func (s SlotState) String() string {
	switch s {
	case SlotEmpty:
		return "empty"
	case SlotFilling:
		return "filling"
	case SlotPresent:
		return "present"
	case SlotBusy:
		return "busy"
	}
	return fmt.Sprintf("slot_state(%d)", uint32(s))
}

// Entry is what a slot holds: an unsent result and the job fields the
// scheduler matches on.
type Entry struct {
	ResultID       int64
	WorkunitID     int64
	AppID          int64
	RscFpopsEst    float64
	RscMemoryBound float64
	RscDiskBound   float64
	DelayBound     int64 // seconds
	Priority       int32
	HRClass        int32
	// Flags is the result's send_flags (row.SendReliableOnly).
	Flags int32
}

// Tables are the static tables the scheduler needs, published by the feeder.
type Tables struct {
	Platforms   []row.Platform
	Apps        []row.App
	AppVersions []row.AppVersion
}

// Claim is a slot taken by a scheduler: BUSY until Release or Unclaim.
type Claim struct {
	Slot  int
	Entry Entry
	word  uint64 // the state word the claim installed
}

func stateOf(w uint64) SlotState { return SlotState(w & 0xff) }

// next is the word after a transition from w to s: the generation moves on,
// so a word once replaced never comes back.
func next(w uint64, s SlotState) uint64 { return ((w>>8)+1)<<8 | uint64(s) }

// Cache is a mapping of a cache file. Its methods are safe for concurrent
// use by many goroutines and processes, except that one feeder only (Create
// enforces it with a lock) may call the feeder-side methods. Close must not
// race other calls; after it, slot methods fail (false, SlotEmpty) and Tables
// returns an error.
type Cache struct {
	path   string
	data   []byte
	nslots int
	lock   *os.File // feeder only: holds the exclusive lock

	mu       sync.Mutex // guards the fields below
	tables   Tables     // last decoded tables (reader side)
	tablesAt uint64     // seqlock value they were decoded at; 0 = none
	stuck    map[int]stuckSlot
}

// stuckSlot is a slot the feeder saw in a state it cannot judge by its
// contents alone (FILLING, or BUSY before the claimer wrote its pid), and
// since when. If the word has not moved after maxAge the owner is gone.
type stuckSlot struct {
	word  uint64
	since int64
}

func (c *Cache) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&c.data[off])) }
func (c *Cache) i64(off int) *int64  { return (*int64)(unsafe.Pointer(&c.data[off])) }
func (c *Cache) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&c.data[off])) }
func (c *Cache) i32(off int) *int32  { return (*int32)(unsafe.Pointer(&c.data[off])) }

func slotOff(i int) int { return slotsOff + i*slotSize }

func (c *Cache) word(i int) *uint64 { return c.u64(slotOff(i) + sWord) }

// Path is the file this cache maps.
func (c *Cache) Path() string { return c.path }

// NSlots is the number of slots.
func (c *Cache) NSlots() int { return c.nslots }

// Heartbeat is the Unix time of the feeder's last pass; 0 means never, or
// that this file was replaced by a newer one (see Retired).
func (c *Cache) Heartbeat() int64 {
	if c.data == nil {
		return 0
	}
	return atomic.LoadInt64(c.i64(hHeartbeat))
}

// SetHeartbeat records the time of the feeder's pass.
func (c *Cache) SetHeartbeat(now int64) {
	if c.data != nil {
		atomic.StoreInt64(c.i64(hHeartbeat), now)
	}
}

// Retired reports whether a feeder has replaced this file with a new one
// (another slot count or layout): the mapping still works but nothing will
// fill it again, so a scheduler should Close and Open the path anew. A
// closed Cache is retired too.
func (c *Cache) Retired() bool {
	return c.data == nil || atomic.LoadUint32(c.u32(hRetired)) != 0
}

// readEntry copies slot i's entry. The caller checks the state word around
// it to know whether the copy is consistent.
func (c *Cache) readEntry(i int) Entry {
	o := slotOff(i)
	return Entry{
		ResultID:       atomic.LoadInt64(c.i64(o + sResultID)),
		WorkunitID:     atomic.LoadInt64(c.i64(o + sWorkunitID)),
		AppID:          atomic.LoadInt64(c.i64(o + sAppID)),
		RscFpopsEst:    math.Float64frombits(atomic.LoadUint64(c.u64(o + sFpopsEst))),
		RscMemoryBound: math.Float64frombits(atomic.LoadUint64(c.u64(o + sMemBound))),
		RscDiskBound:   math.Float64frombits(atomic.LoadUint64(c.u64(o + sDiskBound))),
		DelayBound:     atomic.LoadInt64(c.i64(o + sDelayBound)),
		Priority:       atomic.LoadInt32(c.i32(o + sPriority)),
		HRClass:        atomic.LoadInt32(c.i32(o + sHRClass)),
		Flags:          atomic.LoadInt32(c.i32(o + sFlags)),
	}
}

// writeEntry stores e in slot i, which the caller holds in FILLING.
func (c *Cache) writeEntry(i int, e Entry) {
	o := slotOff(i)
	atomic.StoreInt64(c.i64(o+sResultID), e.ResultID)
	atomic.StoreInt64(c.i64(o+sWorkunitID), e.WorkunitID)
	atomic.StoreInt64(c.i64(o+sAppID), e.AppID)
	atomic.StoreUint64(c.u64(o+sFpopsEst), math.Float64bits(e.RscFpopsEst))
	atomic.StoreUint64(c.u64(o+sMemBound), math.Float64bits(e.RscMemoryBound))
	atomic.StoreUint64(c.u64(o+sDiskBound), math.Float64bits(e.RscDiskBound))
	atomic.StoreInt64(c.i64(o+sDelayBound), e.DelayBound)
	atomic.StoreInt32(c.i32(o+sPriority), e.Priority)
	atomic.StoreInt32(c.i32(o+sHRClass), e.HRClass)
	atomic.StoreInt32(c.i32(o+sFlags), e.Flags)
}

// clearClaimer forgets the claimer of slot i, which the caller holds in
// FILLING: a slot becomes PRESENT only with no claimer recorded, so a BUSY
// slot without one is known to be in the instant between the claim and the
// claimer writing its pid.
func (c *Cache) clearClaimer(i int) {
	o := slotOff(i)
	atomic.StoreInt32(c.i32(o+sClaimer), 0)
	atomic.StoreInt64(c.i64(o+sClaimTime), 0)
}

func (c *Cache) inRange(i int) bool { return i >= 0 && i < c.nslots }

// Peek returns a copy of slot i if it is PRESENT. It may be claimed by
// someone else a moment later.
func (c *Cache) Peek(i int) (Entry, bool) {
	if !c.inRange(i) {
		return Entry{}, false
	}
	w := atomic.LoadUint64(c.word(i))
	if stateOf(w) != SlotPresent {
		return Entry{}, false
	}
	e := c.readEntry(i)
	if atomic.LoadUint64(c.word(i)) != w {
		return Entry{}, false
	}
	return e, true
}

// Claim takes slot i if it is PRESENT, recording claimer (a pid) and now
// (Unix seconds) so the feeder can reclaim it if the claimer dies or keeps it
// too long. It reports false if the slot is not PRESENT or another claimer
// won.
func (c *Cache) Claim(i int, claimer int32, now int64) (Claim, bool) {
	if !c.inRange(i) {
		return Claim{}, false
	}
	p := c.word(i)
	w := atomic.LoadUint64(p)
	if stateOf(w) != SlotPresent {
		return Claim{}, false
	}
	// Read before the swap: entry fields change only in FILLING, which would
	// have moved the word on and failed the swap.
	e := c.readEntry(i)
	nw := next(w, SlotBusy)
	if !atomic.CompareAndSwapUint64(p, w, nw) {
		return Claim{}, false
	}
	o := slotOff(i)
	atomic.StoreInt64(c.i64(o+sClaimTime), now)
	atomic.StoreInt32(c.i32(o+sClaimer), claimer)
	return Claim{Slot: i, Entry: e, word: nw}, true
}

// Release empties a claimed slot: the result was sent, or is no longer
// unsent. It reports false if the claim is no longer held (the feeder
// reclaimed it).
func (c *Cache) Release(cl Claim) bool {
	if !c.inRange(cl.Slot) || stateOf(cl.word) != SlotBusy {
		return false
	}
	return atomic.CompareAndSwapUint64(c.word(cl.Slot), cl.word, next(cl.word, SlotEmpty))
}

// Unclaim puts a claimed slot back for other schedulers: its result is not
// usable by this host. It reports false if the claim is no longer held.
func (c *Cache) Unclaim(cl Claim) bool {
	if !c.inRange(cl.Slot) || stateOf(cl.word) != SlotBusy {
		return false
	}
	p := c.word(cl.Slot)
	fw := next(cl.word, SlotFilling)
	if !atomic.CompareAndSwapUint64(p, cl.word, fw) {
		return false
	}
	c.clearClaimer(cl.Slot)
	// A swap, not a store: a feeder that found the slot stuck in FILLING
	// (this process paused for longer than the maximum age) may have
	// emptied it meanwhile; then it stays empty.
	return atomic.CompareAndSwapUint64(p, fw, next(fw, SlotPresent))
}

// Fill writes e into slot i if it is EMPTY and makes it PRESENT. Feeder only.
func (c *Cache) Fill(i int, e Entry) bool {
	if !c.inRange(i) {
		return false
	}
	p := c.word(i)
	w := atomic.LoadUint64(p)
	if stateOf(w) != SlotEmpty {
		return false
	}
	fw := next(w, SlotFilling)
	if !atomic.CompareAndSwapUint64(p, w, fw) {
		return false
	}
	c.clearClaimer(i)
	c.writeEntry(i, e)
	return atomic.CompareAndSwapUint64(p, fw, next(fw, SlotPresent))
}

// Slot returns the state and content of slot i, for the feeder's set of
// results already cached and for metrics. The entry of an EMPTY slot is
// whatever it last held.
func (c *Cache) Slot(i int) (SlotState, Entry) {
	if !c.inRange(i) {
		return SlotEmpty, Entry{}
	}
	p := c.word(i)
	for {
		w := atomic.LoadUint64(p)
		e := c.readEntry(i)
		if atomic.LoadUint64(p) == w {
			return stateOf(w), e
		}
	}
}

// SlotClaimer returns the pid and claim time recorded in slot i (zero unless
// BUSY), for diagnostics.
func (c *Cache) SlotClaimer(i int) (pid int32, claimTime int64) {
	if !c.inRange(i) {
		return 0, 0
	}
	o := slotOff(i)
	return atomic.LoadInt32(c.i32(o + sClaimer)), atomic.LoadInt64(c.i64(o + sClaimTime))
}

// ReclaimStale empties BUSY slots whose claimer is dead (alive reports false;
// nil means ProcessAlive) or that were claimed more than maxAge seconds before
// now, and slots left mid-transition (FILLING, or BUSY with no claimer
// recorded) by a process that died there, once seen unchanged for maxAge. It
// returns how many it emptied. Feeder only.
func (c *Cache) ReclaimStale(now, maxAge int64, alive func(pid int32) bool) int {
	if alive == nil {
		alive = ProcessAlive
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stuck == nil {
		c.stuck = map[int]stuckSlot{}
	}
	n := 0
	seen := make(map[int]bool, len(c.stuck))
	for i := 0; i < c.nslots; i++ {
		p := c.word(i)
		w := atomic.LoadUint64(p)
		st := stateOf(w)
		if st != SlotBusy && st != SlotFilling {
			continue
		}
		pid, at := c.SlotClaimer(i)
		if atomic.LoadUint64(p) != w {
			continue // moved on while we looked
		}
		stale := false
		if st == SlotBusy && pid != 0 {
			stale = now-at > maxAge || !alive(pid)
		} else {
			seen[i] = true
			s, ok := c.stuck[i]
			if !ok || s.word != w {
				c.stuck[i] = stuckSlot{word: w, since: now}
				continue
			}
			stale = now-s.since > maxAge
		}
		if stale && atomic.CompareAndSwapUint64(p, w, next(w, SlotEmpty)) {
			n++
			delete(c.stuck, i)
		}
	}
	for i := range c.stuck {
		if !seen[i] {
			delete(c.stuck, i)
		}
	}
	return n
}

// ProcessAlive reports whether a process with this pid exists (kill(pid, 0)
// does not fail with ESRCH). A pid this process may not signal is alive.
func ProcessAlive(pid int32) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(int(pid), 0)
	return !errors.Is(err, syscall.ESRCH)
}
