package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/taskserver/taskserver/internal/row"
)

// The operator tool's account queries: listing, profile changes, deletion.

// ErrInUse means a row cannot be deleted because others refer to it.
var ErrInUse = errors.New("in use")

const userList = `SELECT ` + userColumns + ` FROM user WHERE id > ? ORDER BY id LIMIT ?`

// UserList returns up to limit users with ids above afterID, in id order.
func (s *Store) UserList(ctx context.Context, afterID int64, limit int) ([]row.User, error) {
	var out []row.User
	if err := s.db.SelectContext(ctx, &out, userList, afterID, limit); err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	return out, nil
}

const userSetProfile = `UPDATE user SET email_addr = ?, name = ? WHERE id = ?`

// UserSetProfile sets user id's e-mail address and name. An address another
// account has is ErrDuplicate; a missing user is ErrNotFound.
func (s *Store) UserSetProfile(ctx context.Context, id int64, email, name string) error {
	_, err := s.exec(ctx, userSetProfile, email, name, id)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1062 { // ER_DUP_ENTRY
		return fmt.Errorf("set e-mail address of user %d to <%s>: %w", id, email, ErrDuplicate)
	}
	if err != nil {
		return fmt.Errorf("set profile of user %d: %w", id, err)
	}
	_, err = s.UserGet(ctx, id)
	return err
}

// userDelete deletes the user only while nothing refers to it: a host,
// an instance or a batch would otherwise point at no account, and their
// credit and results would lose their owner. A member of a team is kept
// too: the team's nusers counts it (it leaves first).
const userDelete = `DELETE FROM user WHERE id = ? AND teamid = 0
AND NOT EXISTS (SELECT 1 FROM host WHERE userid = ?)
AND NOT EXISTS (SELECT 1 FROM result WHERE userid = ?)
AND NOT EXISTS (SELECT 1 FROM batch WHERE userid = ?)`

// teamClearFounder forgets a deleted founder, as BOINC does.
const teamClearFounder = `UPDATE team SET userid = 0 WHERE userid = ?`

// UserDelete deletes user id if it never attached a host, ran an instance
// or submitted a batch, and is in no team (ErrInUse otherwise); a team it
// founded keeps going without a founder. A missing user is ErrNotFound.
func (s *Store) UserDelete(ctx context.Context, id int64) error {
	var n int64
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, userDelete, id, id, id, id)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		_, err = tx.ExecContext(ctx, teamClearFounder, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete user %d: %w", id, err)
	}
	if n == 1 {
		return nil
	}
	if _, err := s.UserGet(ctx, id); err != nil {
		return err
	}
	return fmt.Errorf("delete user %d: it has hosts, instances or batches, or is in a team: %w", id, ErrInUse)
}

const userSetProjectPrefs = `UPDATE user SET project_prefs = ? WHERE id = ?`

// UserSetProjectPrefs replaces user id's project preferences document
// (BOINC's <project_preferences>). The scheduler reads it with the user on
// every request, so the change applies from the user's next request. A
// missing user is ErrNotFound.
func (s *Store) UserSetProjectPrefs(ctx context.Context, id int64, prefs string) error {
	if _, err := s.exec(ctx, userSetProjectPrefs, prefs, id); err != nil {
		return fmt.Errorf("set project preferences of user %d: %w", id, err)
	}
	_, err := s.UserGet(ctx, id)
	return err
}

const userListByName = `SELECT ` + userColumns + ` FROM user WHERE name = ? ORDER BY id LIMIT ?`

// UserListByName returns up to limit users called name (names are not
// unique), in id order.
func (s *Store) UserListByName(ctx context.Context, name string, limit int) ([]row.User, error) {
	var out []row.User
	if err := s.db.SelectContext(ctx, &out, userListByName, name, limit); err != nil {
		return nil, fmt.Errorf("list users named %q: %w", name, err)
	}
	return out, nil
}
