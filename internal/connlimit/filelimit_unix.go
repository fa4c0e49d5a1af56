//go:build unix

package connlimit

import (
	"fmt"
	"syscall"
)

// RaiseFileLimit raises the process's soft limit on open files to its
// hard limit and returns the soft limit now in force. (The Go runtime does
// the same at start since Go 1.19; the bound on connections depends on it,
// so it is done and read here rather than assumed.)
func RaiseFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("read the open-file limit: %w", err)
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			return lim.Cur, fmt.Errorf("raise the open-file limit from %d to %d: %w", lim.Cur, lim.Max, err)
		}
		lim = raised
	}
	return lim.Cur, nil
}
