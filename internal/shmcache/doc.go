// Package shmcache is the shared-memory work cache between the feeder and
// the schedulers of one host: a file (normally under /dev/shm) mapped
// MAP_SHARED by the feeder, which writes it, and by every scheduler process,
// which claims entries from it.
//
// The file holds a header (magic, layout version, slot count, the feeder's
// heartbeat, the tables seqlock), a bounded region with the static tables the
// scheduler needs (platforms, apps, app versions, JSON-encoded and published
// seqlock-style so a reader never sees a torn copy), and a fixed array of
// fixed-size slots, each holding one unsent result and the job fields the
// scheduler matches on.
//
// Every slot has a 64-bit state word: the low byte is the SlotState, the
// rest a generation that every transition increments. State changes only by
// compare-and-swap on the whole word:
//
//	EMPTY --Fill--> FILLING --> PRESENT --Claim--> BUSY --Release--> EMPTY
//	                                 ^                |
//	                                 +----Unclaim-----+
//
// A Claim remembers the word it installed, so Release and Unclaim succeed only
// if nobody has touched the slot since; a claim the feeder reclaimed (its
// claimer died or held it longer than the maximum age) and whose slot was
// refilled can never release someone else's entry.
//
// The cache is a hint, not the source of truth: a scheduler that claims an
// entry still sends the result with a conditional update in the database
// (server_state UNSENT → IN_PROGRESS), so a stale or duplicated entry costs a
// wasted claim, never a result sent twice.
//
// Processes must share a PID namespace: the feeder tells live claimers from
// dead ones with kill(pid, 0). Where they do not, claims are still reclaimed
// after the maximum age.
package shmcache
