package connlimit

// Defaults of the scheduler's flags.
const (
	// DefaultPerAddr leaves room for the volunteers behind one NAT (a
	// BOINC client makes a few connections at a time: a scheduler RPC and
	// up to two transfers per project) while keeping one address far from
	// the overall bound.
	DefaultPerAddr = 128
	// reservedFDs are kept for everything but client connections: the
	// database pool, the listeners, logs, the cache file.
	reservedFDs = 256
	// leastMax is the bound when the descriptor limit is too small to
	// derive one.
	leastMax = 64
)

// DefaultMax is the overall bound for a process allowed nofile open
// files: each connection may hold a second descriptor (the file it
// downloads or uploads), and reservedFDs stay free for the rest.
func DefaultMax(nofile uint64) int {
	if nofile <= reservedFDs+2*leastMax {
		return leastMax
	}
	return int(min((nofile-reservedFDs)/2, 1<<30))
}
