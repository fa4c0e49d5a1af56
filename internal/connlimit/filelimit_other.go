//go:build !unix

package connlimit

// RaiseFileLimit returns 0: there is no open-file limit to read here, and
// DefaultMax then falls back to its least bound.
func RaiseFileLimit() (uint64, error) { return 0, nil }
