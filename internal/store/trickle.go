package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// MsgFromHostColumns are the columns of a row.MsgFromHost, in its order.
const MsgFromHostColumns = `id, create_time, hostid, variety, handled, result_name, msg_md5, xml`

// MsgToHostColumns are the columns of a row.MsgToHost, in its order.
const MsgToHostColumns = `id, create_time, hostid, variety, handled, xml`

// MsgFromHostInsert stores a request's trickle-up messages, each
// (HostID, MD5) once: a message the client sends again because the ack was
// lost is already there and is left as it is. One statement: every message
// is stored, or none is. It returns how many were new.
func (s *Store) MsgFromHostInsert(ctx context.Context, msgs []row.MsgFromHost) (int64, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	var q strings.Builder
	q.WriteString(`INSERT INTO msg_from_host (create_time, hostid, variety, handled, result_name, msg_md5, xml) VALUES `)
	args := make([]any, 0, 7*len(msgs))
	for i, m := range msgs {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, ?, ?, 0, ?, ?, ?)")
		args = append(args, m.CreateTime, m.HostID, m.Variety, m.ResultName, m.MD5, m.XML)
	}
	// A duplicate keeps the stored row (and its handled flag) unchanged.
	q.WriteString(` ON DUPLICATE KEY UPDATE id = id`)
	var n int64
	err := s.withRetry(ctx, func() error {
		res, err := s.db.ExecContext(ctx, q.String(), args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store %d trickle-up messages: %w", len(msgs), err)
	}
	return n, nil
}

// MsgFromHostListParams selects trickle-up messages awaiting a handler.
type MsgFromHostListParams struct {
	// Variety, if not empty, is the only variety returned.
	Variety string
	// Mod and ModIndex pick this replica's messages: Partition(id, Mod) = ModIndex.
	Mod, ModIndex int
	// AfterID is the caller's cursor: only larger ids are returned.
	AfterID int64
	Limit   int
}

var msgFromHostListUnhandled = `SELECT ` + MsgFromHostColumns + ` FROM msg_from_host
WHERE handled = 0 AND id > ? AND ` + partitionFilter("id") + ` AND (? = '' OR variety = ?) ORDER BY id LIMIT ?`

// MsgFromHostListUnhandled returns unhandled trickle-up messages, by id.
func (s *Store) MsgFromHostListUnhandled(ctx context.Context, p MsgFromHostListParams) ([]row.MsgFromHost, error) {
	var out []row.MsgFromHost
	err := s.withRetry(ctx, func() error {
		out = out[:0]
		return s.db.SelectContext(ctx, &out, msgFromHostListUnhandled, p.AfterID, max(p.Mod, 1), p.ModIndex,
			p.Variety, p.Variety, p.Limit)
	})
	if err != nil {
		return nil, fmt.Errorf("list unhandled trickle-up messages: %w", err)
	}
	return out, nil
}

const msgFromHostListRecent = `SELECT ` + MsgFromHostColumns + ` FROM msg_from_host
WHERE (? = 0 OR hostid = ?) ORDER BY id DESC LIMIT ?`

// MsgFromHostListRecent returns the newest trickle-up messages, of hostID
// alone unless it is 0, newest first.
func (s *Store) MsgFromHostListRecent(ctx context.Context, hostID int64, limit int) ([]row.MsgFromHost, error) {
	var out []row.MsgFromHost
	if err := s.db.SelectContext(ctx, &out, msgFromHostListRecent, hostID, hostID, limit); err != nil {
		return nil, fmt.Errorf("list trickle-up messages: %w", err)
	}
	return out, nil
}

// MsgHandled is what a trickle handler's built-in options do with one
// message, in the transaction that marks it handled: so each happens once
// per message, whatever the replicas and retries.
type MsgHandled struct {
	ID  int64
	Now int64
	// ExtendDeadline, if > 0, moves the report deadline of the message's
	// task (its result_name, on its host, still in progress) to at least
	// Now + ExtendDeadline seconds: the transitioner times an instance out
	// by its own deadline, so it then leaves it running.
	ExtendDeadline int64
	// Credit, if > 0, is granted to the message's host and its user.
	Credit float64
	// Replies are trickle-down messages to queue (their CreateTime is
	// set to Now).
	Replies []row.MsgToHost
}

// MsgHandledOutcome says what MsgFromHostMarkHandled did.
type MsgHandledOutcome struct {
	// Extended is set when a task's deadline was moved.
	Extended bool
	// Credited is set when credit was granted.
	Credited bool
}

const (
	msgFromHostGet       = `SELECT ` + MsgFromHostColumns + ` FROM msg_from_host WHERE id = ?`
	msgFromHostMark      = `UPDATE msg_from_host SET handled = 1 WHERE id = ? AND handled = 0`
	resultExtendDeadline = `UPDATE result SET report_deadline = ?, mod_time = ?
WHERE name = ? AND hostid = ? AND server_state = ? AND report_deadline < ?`
	hostUserID = `SELECT userid FROM host WHERE id = ?`
)

// MsgFromHostMarkHandled marks message p.ID handled (0 → 1) and applies p's
// effects, in one transaction. ErrConflict: the message was handled
// already (by another replica), and nothing was done.
func (s *Store) MsgFromHostMarkHandled(ctx context.Context, p MsgHandled) (MsgHandledOutcome, error) {
	var out MsgHandledOutcome
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		out = MsgHandledOutcome{}
		if err := execChanged(ctx, tx, ErrConflict, msgFromHostMark, p.ID); err != nil {
			return err
		}
		for _, r := range p.Replies {
			if _, err := tx.ExecContext(ctx, msgToHostInsert, p.Now, r.HostID, r.Variety, r.XML); err != nil {
				return fmt.Errorf("queue trickle-down message for host %d: %w", r.HostID, err)
			}
		}
		if p.ExtendDeadline <= 0 && p.Credit <= 0 {
			return nil
		}
		var m row.MsgFromHost
		if err := tx.GetContext(ctx, &m, msgFromHostGet, p.ID); err != nil {
			return err
		}
		if p.ExtendDeadline > 0 && m.ResultName != "" {
			deadline := p.Now + p.ExtendDeadline
			res, err := tx.ExecContext(ctx, resultExtendDeadline, deadline, p.Now, m.ResultName, m.HostID,
				int(state.ServerInProgress), deadline)
			if err != nil {
				return fmt.Errorf("extend deadline of %s: %w", m.ResultName, err)
			}
			if n, _ := res.RowsAffected(); n > 0 {
				out.Extended = true
			}
		}
		if p.Credit > 0 {
			var userID int64
			if err := tx.GetContext(ctx, &userID, hostUserID, m.HostID); err != nil {
				return fmt.Errorf("credit host %d: %w", m.HostID, err)
			}
			if _, err := tx.ExecContext(ctx, hostAddCredit, p.Credit, p.Now, expavgDecay, p.Credit*expavgGain, p.Now, m.HostID); err != nil {
				return fmt.Errorf("credit host %d: %w", m.HostID, err)
			}
			if _, err := tx.ExecContext(ctx, userAddCredit, p.Credit, p.Now, expavgDecay, p.Credit*expavgGain, p.Now, userID); err != nil {
				return fmt.Errorf("credit user %d: %w", userID, err)
			}
			if err := creditTeams(ctx, tx, p.Now, []creditChange{{id: userID, credit: p.Credit}}); err != nil {
				return err
			}
			out.Credited = true
		}
		return nil
	})
	if err != nil {
		return MsgHandledOutcome{}, fmt.Errorf("mark trickle-up message %d handled: %w", p.ID, err)
	}
	return out, nil
}

const msgToHostInsert = `INSERT INTO msg_to_host (create_time, hostid, variety, handled, xml) VALUES (?, ?, ?, 0, ?)`

// MsgToHostInsert queues a trickle-down message and returns its id.
func (s *Store) MsgToHostInsert(ctx context.Context, m row.MsgToHost) (int64, error) {
	res, err := s.db.ExecContext(ctx, msgToHostInsert, m.CreateTime, m.HostID, m.Variety, m.XML)
	if err != nil {
		return 0, fmt.Errorf("queue trickle-down message for host %d: %w", m.HostID, err)
	}
	return res.LastInsertId()
}

const (
	msgToHostAnyQueued  = `SELECT EXISTS (SELECT 1 FROM msg_to_host WHERE hostid = ? AND handled = 0)`
	msgToHostLockQueued = `SELECT ` + MsgToHostColumns + ` FROM msg_to_host
WHERE hostid = ? AND handled = 0 ORDER BY id LIMIT ? FOR UPDATE`
	msgToHostMarkDelivered = `UPDATE msg_to_host SET handled = 1 WHERE handled = 0 AND id IN (?)`
)

// MsgToHostTake returns up to limit trickle-down messages queued for
// hostID, oldest first, and marks them delivered in the same transaction:
// two concurrent requests of one host never both get a message. A host
// with none queued, nearly every one, costs one indexed read.
func (s *Store) MsgToHostTake(ctx context.Context, hostID int64, limit int) ([]row.MsgToHost, error) {
	var queued int
	if err := s.db.GetContext(ctx, &queued, msgToHostAnyQueued, hostID); err != nil {
		return nil, fmt.Errorf("take trickle-down messages of host %d: %w", hostID, err)
	}
	if queued == 0 {
		return nil, nil
	}
	var out []row.MsgToHost
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		out = out[:0]
		if err := tx.SelectContext(ctx, &out, msgToHostLockQueued, hostID, limit); err != nil {
			return err
		}
		if len(out) == 0 {
			return nil
		}
		ids := make([]int64, len(out))
		for i, m := range out {
			ids[i] = m.ID
		}
		q, args, err := sqlx.In(msgToHostMarkDelivered, ids)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, q, args...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("take trickle-down messages of host %d: %w", hostID, err)
	}
	return out, nil
}

const (
	msgFromHostPurge = `DELETE FROM msg_from_host WHERE handled = 1 AND create_time < ? ORDER BY id LIMIT ?`
	msgToHostPurge   = `DELETE FROM msg_to_host WHERE handled = 1 AND create_time < ? ORDER BY id LIMIT ?`
)

// MsgPurge deletes up to limit handled trickle-up and up to limit delivered
// trickle-down messages created before before, and returns how many of
// each it deleted. Unhandled ones are kept however old: nothing a client
// sent is dropped before a handler saw it.
func (s *Store) MsgPurge(ctx context.Context, before int64, limit int) (up, down int64, err error) {
	for _, q := range []struct {
		sql string
		n   *int64
	}{{msgFromHostPurge, &up}, {msgToHostPurge, &down}} {
		err := s.withRetry(ctx, func() error {
			res, err := s.db.ExecContext(ctx, q.sql, before, limit)
			if err != nil {
				return err
			}
			*q.n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return up, down, fmt.Errorf("purge trickle messages: %w", err)
		}
	}
	return up, down, nil
}

const msgFromHostCountUnhandled = `SELECT COUNT(*) FROM (SELECT 1 FROM msg_from_host
WHERE handled = 0 AND (? = '' OR variety = ?) LIMIT ?) t`

// MsgFromHostCountUnhandled counts the unhandled trickle-up messages (of
// variety alone unless it is empty), up to limit.
func (s *Store) MsgFromHostCountUnhandled(ctx context.Context, variety string, limit int64) (int64, error) {
	var n int64
	if err := s.db.GetContext(ctx, &n, msgFromHostCountUnhandled, variety, variety, limit); err != nil {
		return 0, fmt.Errorf("count unhandled trickle-up messages: %w", err)
	}
	return n, nil
}
