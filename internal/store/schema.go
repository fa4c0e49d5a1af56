package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/db/schema"
)

// Schema upgrades and the version check.
//
// MariaDB and MySQL commit every DDL statement implicitly, so a migration
// cannot be applied atomically: when statement k fails, statements 1..k-1
// stay applied. An upgrade therefore records its progress statement by
// statement in schema_migration_progress (version, statements applied, a
// SHA-256 of their text), and records the version in schema_version only
// once every statement succeeded, clearing the progress row in the same
// transaction. A re-run after the cause is fixed resumes at statement k,
// and refuses if the text of statements 1..k-1 changed since they ran: the
// database would then match neither the old file nor the new one.
//
// One window remains: a crash after statement k ran but before its progress
// row was written. A re-run then runs statement k again, which fails for
// most DDL ("duplicate column"); the error names the statement so the
// operator can see it is already applied and bump the progress row by hand.

// ErrSchemaOlder means the database has not been upgraded to the schema
// version this binary was built with (or an upgrade stopped half-way).
var ErrSchemaOlder = errors.New("database schema is older than this binary (run taskctl schema upgrade)")

// ErrSchemaNewer means the database was upgraded by newer binaries than this
// one; running against it could corrupt what they wrote.
var ErrSchemaNewer = errors.New("database schema is newer than this binary (upgrade the binaries)")

// ErrSchemaChanged means a migration's text changed after some of its
// statements were applied, so resuming it would not give the schema either
// version of the file describes.
var ErrSchemaChanged = errors.New("migration changed since it was partly applied")

const schemaVersionDDL = `CREATE TABLE IF NOT EXISTS schema_version (
    version    INT NOT NULL PRIMARY KEY,
    name       VARCHAR(254) NOT NULL,
    applied_at INT NOT NULL
) ` + schema.TableOptions

// schemaProgressDDL is the upgrade's bookkeeping: at most one row, for the
// version being applied, removed when that version is recorded.
const schemaProgressDDL = `CREATE TABLE IF NOT EXISTS schema_migration_progress (
    version    INT NOT NULL PRIMARY KEY,
    statements INT NOT NULL,
    checksum   CHAR(64) NOT NULL,
    updated_at INT NOT NULL
) ` + schema.TableOptions

// schemaProgressTable is left out of the drift check: it is created on
// demand by an upgrade, so databases made before it existed lack it.
const schemaProgressTable = "schema_migration_progress"

// SchemaApplied is one row of schema_version.
type SchemaApplied struct {
	Version   int    `db:"version"`
	Name      string `db:"name"`
	AppliedAt int64  `db:"applied_at"`
}

// SchemaProgress is an upgrade that stopped part-way through a version.
type SchemaProgress struct {
	Version int `db:"version"`
	// Statements is how many of the version's statements were applied.
	Statements int `db:"statements"`
	// Checksum is statementsChecksum of those statements.
	Checksum  string `db:"checksum"`
	UpdatedAt int64  `db:"updated_at"`
}

// noTable reports whether err is MySQL's "table doesn't exist": a database
// no upgrade has touched yet.
func noTable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1146
}

// SchemaVersion returns the version recorded in schema_version, 0 for an
// empty database.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v sql.NullInt64
	err := s.db.GetContext(ctx, &v, `SELECT MAX(version) FROM schema_version`)
	if err != nil {
		if noTable(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return int(v.Int64), nil
}

// SchemaStatus returns the applied versions in order and the progress of a
// version an upgrade left part-way (nil if none).
func (s *Store) SchemaStatus(ctx context.Context) ([]SchemaApplied, *SchemaProgress, error) {
	var applied []SchemaApplied
	err := s.db.SelectContext(ctx, &applied,
		`SELECT version, name, applied_at FROM schema_version ORDER BY version`)
	if err != nil && !noTable(err) {
		return nil, nil, fmt.Errorf("read schema versions: %w", err)
	}
	p, err := s.schemaProgress(ctx)
	return applied, p, err
}

func (s *Store) schemaProgress(ctx context.Context) (*SchemaProgress, error) {
	var ps []SchemaProgress
	err := s.db.SelectContext(ctx, &ps,
		`SELECT version, statements, checksum, updated_at FROM schema_migration_progress ORDER BY version`)
	if err != nil {
		if noTable(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read schema upgrade progress: %w", err)
	}
	switch len(ps) {
	case 0:
		return nil, nil
	case 1:
		return &ps[0], nil
	}
	return nil, fmt.Errorf("schema upgrade progress has %d rows, want at most one: %v", len(ps), ps)
}

// SchemaCheck returns an error unless the database is at exactly the schema
// version these binaries were built with; it wraps ErrSchemaOlder or
// ErrSchemaNewer so the operator knows which side to upgrade, or an error
// of serverCheck when the database is at that version. Every daemon, the
// scheduler and taskctl call it at start.
func (s *Store) SchemaCheck(ctx context.Context) error {
	return s.schemaCheck(ctx, schema.Latest())
}

func (s *Store) schemaCheck(ctx context.Context, want int) error {
	v, err := s.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	p, err := s.schemaProgress(ctx)
	if err != nil {
		return err
	}
	switch {
	case v > want || (p != nil && p.Version > want):
		return fmt.Errorf("schema check: database is at version %d, this binary knows up to %d: %w", max(v, p.version()), want, ErrSchemaNewer)
	case p != nil:
		return fmt.Errorf("schema check: the upgrade to version %d stopped after %d statements: %w", p.Version, p.Statements, ErrSchemaOlder)
	case v < want:
		return fmt.Errorf("schema check: database is at version %d, this binary needs %d: %w", v, want, ErrSchemaOlder)
	}
	return s.serverCheck(ctx)
}

func (p *SchemaProgress) version() int {
	if p == nil {
		return 0
	}
	return p.Version
}

// SchemaApply brings the database up to the newest embedded schema version
// and returns the versions it applied; see SchemaUpgrade.
func (s *Store) SchemaApply(ctx context.Context, now time.Time) ([]int, error) {
	migs, err := schema.Migrations()
	if err != nil {
		return nil, err
	}
	return s.SchemaUpgrade(ctx, migs, now)
}

// SchemaUpgrade applies the migrations of migs the database lacks, in
// order, and returns the versions it recorded. It stops at the first
// failing statement, leaving that version unrecorded and its progress
// saved, so a re-run resumes at the failed statement (see the comment at
// the top of this file). migs must be contiguous from version 1, as
// schema.Load returns them. Concurrent upgrades of one database, from one
// server or from several nodes of a Galera cluster, wait for each other
// (see schema_lock.go).
func (s *Store) SchemaUpgrade(ctx context.Context, migs []schema.Migration, now time.Time) ([]int, error) {
	// The bookkeeping tables exist before the lock is taken (CREATE TABLE
	// IF NOT EXISTS is safe to run concurrently, also as Galera's
	// total-order DDL), so the lock holder only reads and writes rows.
	for _, ddl := range []string{schemaVersionDDL, schemaProgressDDL} {
		if _, err := s.db.ExecContext(ctx, ddl); err != nil {
			return nil, fmt.Errorf("schema upgrade: create bookkeeping table: %w", err)
		}
	}
	lock, lctx, err := s.lockSchema(ctx)
	if err != nil {
		return nil, err
	}
	defer lock.unlock(ctx)
	applied, err := s.schemaUpgradeLocked(lctx, lock, migs, now)
	if err != nil && lctx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("%w (%w)", context.Cause(lctx), err)
	}
	return applied, err
}

// schemaUpgradeLocked is SchemaUpgrade once the upgrade lock is held: the
// version and progress are read only now, so a second upgrade that waited
// finds the first one's work recorded and applies nothing twice. On a
// cluster node the read sees that work too: the previous holder wrote it
// with the lock row, which this holder's take wrote after it (a take
// certified before the holder's last write set was applied here would
// have failed certification).
func (s *Store) schemaUpgradeLocked(ctx context.Context, lock *schemaLock, migs []schema.Migration, now time.Time) ([]int, error) {
	cur, err := s.SchemaVersion(ctx)
	if err != nil {
		return nil, err
	}
	prog, err := s.schemaProgress(ctx)
	if err != nil {
		return nil, err
	}
	if cur > len(migs) || prog.version() > len(migs) {
		return nil, fmt.Errorf("schema upgrade: database is at version %d, this binary knows up to %d: %w",
			max(cur, prog.version()), len(migs), ErrSchemaNewer)
	}
	if prog != nil && prog.Version != cur+1 {
		return nil, fmt.Errorf("schema upgrade: progress recorded for version %d but the database is at %d; "+
			"delete the row from %s after checking the schema by hand", prog.Version, cur, schemaProgressTable)
	}
	var applied []int
	for _, m := range migs[cur:] {
		if err := s.schemaApplyOne(ctx, lock, m, prog, now); err != nil {
			return applied, err
		}
		applied = append(applied, m.Version)
		prog = nil
	}
	return applied, nil
}

// schemaApplyOne applies one migration from where prog (nil: the start)
// says it stopped, then records it.
func (s *Store) schemaApplyOne(ctx context.Context, lock *schemaLock, m schema.Migration, prog *SchemaProgress, now time.Time) error {
	stmts := schema.Statements(m.SQL)
	h := sha256.New()
	start := 0
	if prog != nil {
		if prog.Statements > len(stmts) {
			return fmt.Errorf("schema upgrade: %d statements of %s were applied but it now has %d: %w",
				prog.Statements, m.Name, len(stmts), ErrSchemaChanged)
		}
		if sum := statementsChecksum(h, stmts[:prog.Statements]); sum != prog.Checksum {
			return fmt.Errorf("schema upgrade: statements 1..%d of %s differ from those applied; restore the file "+
				"or undo them by hand and delete its row from %s: %w",
				prog.Statements, m.Name, schemaProgressTable, ErrSchemaChanged)
		}
		start = prog.Statements
	}
	for i := start; i < len(stmts); i++ {
		if _, err := s.db.ExecContext(ctx, stmts[i]); err != nil {
			return fmt.Errorf("schema upgrade: %s statement %d of %d (%s): %w",
				m.Name, i+1, len(stmts), abbrev(stmts[i], 80), err)
		}
		sum := statementsChecksum(h, stmts[i:i+1])
		if err := lock.write(ctx, func(tx *sqlx.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_migration_progress
            (version, statements, checksum, updated_at) VALUES (?, ?, ?, ?)
            ON DUPLICATE KEY UPDATE statements = VALUES(statements), checksum = VALUES(checksum),
            updated_at = VALUES(updated_at)`, m.Version, i+1, sum, now.Unix())
			return err
		}); err != nil {
			return fmt.Errorf("schema upgrade: %s statement %d of %d applied but its progress not saved "+
				"(a re-run will run it again): %w", m.Name, i+1, len(stmts), err)
		}
	}
	err := lock.write(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)`,
			m.Version, m.Name, now.Unix()); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM schema_migration_progress WHERE version = ?`, m.Version)
		return err
	})
	if err != nil {
		return fmt.Errorf("schema upgrade: record version %d: %w", m.Version, err)
	}
	return nil
}

// execer is what schemaApplyOne needs of the upgrade's connection.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// statementsChecksum feeds stmts into the running hash h, each ended by a
// NUL so statement boundaries count, and returns the hex digest of
// everything fed so far.
func statementsChecksum(h hash.Hash, stmts []string) string {
	for _, st := range stmts {
		h.Write([]byte(st))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// abbrev shortens a statement for an error message.
func abbrev(s string, n int) string {
	r := []rune(strings.Join(strings.Fields(s), " "))
	if len(r) <= n {
		return string(r)
	}
	return string(r[:n]) + "…"
}
