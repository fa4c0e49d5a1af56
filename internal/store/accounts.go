package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
	"github.com/taskserver/taskserver/internal/row"
)

// ErrDuplicate means an insert collided with a unique key: for a user, an
// email address (or, vanishingly rarely, an account key) already taken.
var ErrDuplicate = errors.New("duplicate key")

const userGetByEmail = `SELECT ` + userColumns + ` FROM user WHERE email_addr = ?`

// UserGetByEmail returns the user whose email address is email, or
// ErrNotFound. The lookup goes through the unique index user_email_addr;
// callers pass the address lowercased, as the client sends it and as
// UserCreate stores it.
func (s *Store) UserGetByEmail(ctx context.Context, email string) (row.User, error) {
	var u row.User
	err := s.db.GetContext(ctx, &u, userGetByEmail, email)
	if errors.Is(err, sql.ErrNoRows) {
		return u, ErrNotFound
	}
	if err != nil {
		return u, fmt.Errorf("get user by email: %w", err)
	}
	return u, nil
}

// UserCreate adds an account made through the create_account RPC and
// returns its id. An email address or account key already in use is
// ErrDuplicate, and nothing is written: the unique indexes, not a prior
// read, decide, so two concurrent creations of one address cannot both
// succeed.
func (s *Store) UserCreate(ctx context.Context, u row.User) (int64, error) {
	var id int64
	err := s.withRetry(ctx, func() error {
		res, err := s.db.NamedExecContext(ctx, userInsert, u)
		if err != nil {
			return err
		}
		id, err = res.LastInsertId()
		return err
	})
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1062 { // ER_DUP_ENTRY
		return 0, ErrDuplicate
	}
	if err != nil {
		return 0, fmt.Errorf("create user: %w", err)
	}
	return id, nil
}

const userSetSubmitAllowed = `UPDATE user SET submit_allowed = ? WHERE id = ?`

// UserSetSubmitAllowed lets user id submit batches through the submission
// API, or stops it. A missing user is ErrNotFound.
func (s *Store) UserSetSubmitAllowed(ctx context.Context, id int64, allowed bool) error {
	if _, err := s.exec(ctx, userSetSubmitAllowed, allowed, id); err != nil {
		return fmt.Errorf("set submit_allowed of user %d: %w", id, err)
	}
	if _, err := s.UserGet(ctx, id); err != nil {
		return err
	}
	return nil
}

const userSetPasswdHash = `UPDATE user SET passwd_hash = ? WHERE id = ? AND passwd_hash = ?`

// UserSetPasswdHash replaces user id's stored password hash old by hash,
// and tells whether it did. It writes only while the row still holds old,
// so an upgrade on login never undoes a password the operator set
// meanwhile; then, or for a missing user, nothing is written.
func (s *Store) UserSetPasswdHash(ctx context.Context, id int64, old, hash string) (bool, error) {
	n, err := s.exec(ctx, userSetPasswdHash, hash, id, old)
	if err != nil {
		return false, fmt.Errorf("set password hash of user %d: %w", id, err)
	}
	return n == 1, nil
}

const userGetByAPIKeyHash = `SELECT ` + userColumns + ` FROM user WHERE api_key_hash = ? AND api_key_hash <> ''`

// UserGetByAPIKeyHash returns the user whose submission API key has the
// SHA-256 hex hash, or ErrNotFound.
func (s *Store) UserGetByAPIKeyHash(ctx context.Context, hash string) (row.User, error) {
	var u row.User
	err := s.db.GetContext(ctx, &u, userGetByAPIKeyHash, hash)
	if errors.Is(err, sql.ErrNoRows) {
		return u, ErrNotFound
	}
	if err != nil {
		return u, fmt.Errorf("get user by API key: %w", err)
	}
	return u, nil
}

const userSetAPIKeyHash = `UPDATE user SET api_key_hash = ? WHERE id = ?`

// UserSetAPIKeyHash gives user id the submission API key with the SHA-256
// hex hash, replacing (revoking) any it had; "" leaves it none. A missing
// user is ErrNotFound.
func (s *Store) UserSetAPIKeyHash(ctx context.Context, id int64, hash string) error {
	if _, err := s.exec(ctx, userSetAPIKeyHash, hash, id); err != nil {
		return fmt.Errorf("set API key of user %d: %w", id, err)
	}
	_, err := s.UserGet(ctx, id)
	return err
}
