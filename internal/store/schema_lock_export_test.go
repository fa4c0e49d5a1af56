package store

import "time"

// SetSchemaLockTimes shortens the upgrade lock's lease and wait for a test
// and returns what puts them back.
func SetSchemaLockTimes(lease, wait time.Duration) (restore func()) {
	l, w := schemaLockLease, schemaLockWait
	schemaLockLease, schemaLockWait = lease, wait
	return func() { schemaLockLease, schemaLockWait = l, w }
}

// SetSchedAfterRead makes every scheduler batch run fn between its locked
// read and its writes, until the returned function is called.
func SetSchedAfterRead(fn func()) (restore func()) {
	schedAfterRead = fn
	return func() { schedAfterRead = nil }
}
