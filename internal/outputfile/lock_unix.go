//go:build unix

package outputfile

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Lock takes an exclusive, non-blocking flock on f, released when f is
// closed, or ErrBusy. Two uploads of one file (a client retrying while its
// first attempt still runs, or two data servers sharing the upload
// directory) would otherwise interleave their writes, and the scheduler
// closing a file (Close) would race with an upload writing it.
func Lock(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	var lockErr error
	if err := rc.Control(func(fd uintptr) {
		lockErr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
	}); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if errors.Is(lockErr, syscall.EWOULDBLOCK) {
		return ErrBusy
	}
	if lockErr != nil {
		return fmt.Errorf("lock: %w", lockErr)
	}
	return nil
}
