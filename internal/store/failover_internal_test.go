package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

type countRetries map[string]int

func (c countRetries) Retry(code string) { c[code]++ }
func (c countRetries) Failover()         {}

func TestRetryCodeRetriesOnlyWhatDidNotTakeEffect(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("some store method: %w", err) }
	cases := []struct {
		name    string
		err     error
		code    string
		counted bool
	}{
		{"deadlock", wrap(&mysql.MySQLError{Number: 1213}), RetryDeadlock, false},
		{"lock wait", wrap(&mysql.MySQLError{Number: 1205}), RetryLockWait, false},
		{"commit failed", wrap(&mysql.MySQLError{Number: 1180}), RetryCommitFailed, false},
		{"not ready, bare", wrap(&mysql.MySQLError{Number: 1047}), RetryNotReady, false},
		{"not ready, seen by the connection", wrap(&refusedError{code: RetryNotReady, err: &mysql.MySQLError{Number: 1047}}), RetryNotReady, true},
		{"no node", wrap(&NodesDownError{errs: []error{errors.New("a: refused")}}), RetryConn, false},
		{"tx lost before commit", wrap(&txAbortedError{err: mysql.ErrInvalidConn}), RetryConn, false},
		// A write whose connection died after it was sent may have committed.
		{"write lost after send", wrap(mysql.ErrInvalidConn), "", false},
		{"duplicate key", wrap(&mysql.MySQLError{Number: 1062}), "", false},
		{"conflict", ErrConflict, "", false},
		{"cancelled", context.Canceled, "", false},
	}
	for _, tc := range cases {
		code, counted := retryCode(tc.err)
		if code != tc.code || counted != tc.counted {
			t.Errorf("%s: retryCode = %q, %v; want %q, %v", tc.name, code, counted, tc.code, tc.counted)
		}
	}
}

func TestConnRefusedTurnsProofOfNotRunIntoABadConn(t *testing.T) {
	t.Parallel()
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: errTimeout{}}
	cases := []struct {
		name string
		err  error
		read bool
		code string // "" passes the error through, the connection kept
	}{
		{"1047 on a write", &mysql.MySQLError{Number: 1047, Message: "WSREP has not yet prepared node for application use"}, false, RetryNotReady},
		{"1047 on a read", &mysql.MySQLError{Number: 1047}, true, RetryNotReady},
		{"commit failed out of the primary component", &mysql.MySQLError{Number: 1180, Message: "Error while appending streaming replication fragment(provider status: Not connected to Primary Component)"}, false, RetryCommitFailed},
		{"dead before send", driver.ErrBadConn, false, RetryConn},
		{"read lost", mysql.ErrInvalidConn, true, RetryConn},
		{"read timed out", timeout, true, RetryConn},
		{"write lost", mysql.ErrInvalidConn, false, ""},
		{"read past its context", context.DeadlineExceeded, true, ""},
		{"deadlock", &mysql.MySQLError{Number: 1213}, false, ""},
	}
	for _, tc := range cases {
		ev := countRetries{}
		f := &failoverConn{c: &connector{events: ev}}
		err := f.refused(context.Background(), tc.err, tc.read)
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: %v does not wrap the original %v", tc.name, err, tc.err)
		}
		if tc.code == "" {
			if err != tc.err || f.bad || len(ev) != 0 {
				t.Errorf("%s: got %v, bad %v, retries %v; want the error as it was, the connection kept, nothing counted", tc.name, err, f.bad, ev)
			}
			continue
		}
		if !errors.Is(err, driver.ErrBadConn) || !f.bad || ev[tc.code] != 1 || len(ev) != 1 {
			t.Errorf("%s: got %v (bad conn %v), bad %v, retries %v; want a bad connection, discarded, one %s retry",
				tc.name, err, errors.Is(err, driver.ErrBadConn), f.bad, ev, tc.code)
		}
		if rerr := f.ResetSession(context.Background()); !errors.Is(rerr, driver.ErrBadConn) {
			t.Errorf("%s: ResetSession = %v, want the pool told to drop the connection", tc.name, rerr)
		}
	}
}

type errTimeout struct{}

func (errTimeout) Error() string   { return "i/o timeout" }
func (errTimeout) Timeout() bool   { return true }
func (errTimeout) Temporary() bool { return true }

func TestNodeReadyOnlyWhenPrimaryAndSynced(t *testing.T) {
	t.Parallel()
	cases := []struct {
		ready, state string
		ok           bool
	}{
		{"ON", "Synced", true},
		{"ON", "Joining", false},
		{"ON", "Donor/Desynced", false},
		{"ON", "Joined", false},
		{"OFF", "Synced", false},
		{"OFF", "Initialized", false},
		{"", "", false},
	}
	for _, tc := range cases {
		err := nodeReady(map[string]string{"wsrep_ready": tc.ready, "wsrep_local_state_comment": tc.state})
		var nr *NotReadyError
		if tc.ok != (err == nil) || !tc.ok && !errors.As(err, &nr) {
			t.Errorf("nodeReady(%s, %s) = %v, want ready %v", tc.ready, tc.state, err, tc.ok)
		}
	}
}

func TestRetryPauseIsBounded(t *testing.T) {
	t.Parallel()
	for attempt := range 40 {
		if d := retryPause(RetryConn, attempt, DefaultRetryBackoff); d <= 0 || d > DefaultRetryBackoff {
			t.Errorf("attempt %d: pause %s, want within (0, %s]", attempt, d, DefaultRetryBackoff)
		}
		if d := retryPause(RetryDeadlock, attempt%5, DefaultRetryBackoff); d > 200*time.Millisecond {
			t.Errorf("deadlock attempt %d: pause %s, want a few milliseconds", attempt, d)
		}
	}
}

// A node's fault (no node reachable, 1047, 1180) is retried for at least
// the back-off from its first occurrence, beyond the count of retries: a
// cluster re-forming after a node's loss refuses on every node for a few
// seconds. A conflict is retried the count only, and no retries means
// one attempt whatever the error.
func TestANodesFaultIsRetriedForTheBackoffBeyondTheCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const backoff = 400 * time.Millisecond
	for _, fault := range []error{
		&NodesDownError{errs: []error{errors.New("dial tcp: connection refused")}},
		&mysql.MySQLError{Number: erNotReady, Message: "WSREP has not yet prepared node for application use"},
		&mysql.MySQLError{Number: erCommitFailed, Message: "Error while appending streaming replication fragment"},
	} {
		// Down for 300 ms: two retries' pauses (at most 150 ms) do not
		// cover it, the back-off does.
		ev := countRetries{}
		s := &Store{retries: 2, backoff: backoff, events: ev}
		start := time.Now()
		attempts := 0
		err := s.withRetry(ctx, func() error {
			attempts++
			if time.Since(start) < 300*time.Millisecond {
				return fault
			}
			return nil
		})
		if err != nil {
			t.Errorf("%v for 300 ms with a %s back-off: %v after %d attempts", fault, backoff, err, attempts)
		}
		// Down for good: given up once the back-off has passed.
		start = time.Now()
		err = s.withRetry(ctx, func() error { return fault })
		if took := time.Since(start); !errors.Is(err, fault) || took < backoff {
			t.Errorf("%v for good: %v after %s, want the fault after at least %s", fault, err, took, backoff)
		}
	}

	s := &Store{retries: 2, backoff: backoff, events: countRetries{}}
	attempts := 0
	deadlock := &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock"}
	if err := s.withRetry(ctx, func() error { attempts++; return deadlock }); !errors.Is(err, deadlock) || attempts != 3 {
		t.Errorf("a deadlock with 2 retries: %v after %d attempts, want it after 3", err, attempts)
	}
	s.retries = 0
	attempts = 0
	if err := s.withRetry(ctx, func() error { attempts++; return &NodesDownError{} }); err == nil || attempts != 1 {
		t.Errorf("no retries, nodes down: %v after %d attempts, want the error after 1", err, attempts)
	}
}

func TestBeforeCommitMakesALostConnectionSafeToRetry(t *testing.T) {
	t.Parallel()
	if code, _ := retryCode(beforeCommit(fmt.Errorf("update: %w", mysql.ErrInvalidConn))); code != RetryConn {
		t.Errorf("connection lost inside a transaction: code %q, want %q", code, RetryConn)
	}
	dup := &mysql.MySQLError{Number: 1062}
	if err := beforeCommit(dup); err != dup {
		t.Errorf("beforeCommit(duplicate key) = %v, want it unchanged", err)
	}
	if err := beforeCommit(context.Canceled); err != context.Canceled {
		t.Errorf("beforeCommit(cancelled) = %v, want it unchanged", err)
	}
}

func TestEveryNodeNotReadyIsADatabaseError(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("list: %w", &NodesDownError{errs: []error{&NotReadyError{Ready: "OFF", State: "Joining"}}})
	if !IsDBError(err) {
		t.Errorf("IsDBError(%v) = false, want true: a daemon backs off as for any database failure", err)
	}
}

func TestBrokenTablesIsTheLoadFaultOnly(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want bool
	}{
		{&mysql.MySQLError{Number: 1064, Message: "Trigger 'workunit_count_update' has an error in its body: 'You have an error in your SQL syntax; check the manual that corresponds to your MariaDB server version for the right syntax to use near 'IF OLD.appid' at line 2'"}, true},
		{fmt.Errorf("scheduler batch: %w", &mysql.MySQLError{Number: 1064, Message: "Unknown trigger has an error in its body: 'Query was empty'"}), true},
		{&mysql.MySQLError{Number: 1146, Message: "Table 'taskserver.workunit_count' doesn't exist"}, true},
		{&mysql.MySQLError{Number: 1146, Message: "Table 'taskserver.result_count' doesn't exist"}, true},
		// A database no upgrade has touched yet (noTable).
		{&mysql.MySQLError{Number: 1146, Message: "Table 'taskserver.schema_version' doesn't exist"}, false},
		{&mysql.MySQLError{Number: 1064, Message: "You have an error in your SQL syntax near 'SELEC'"}, false},
		{&mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock"}, false},
		{errors.New("has an error in its body"), false},
	}
	for _, tc := range cases {
		if got := brokenTables(tc.err); got != tc.want {
			t.Errorf("brokenTables(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
