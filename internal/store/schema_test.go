package store_test

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/db/schema"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// emptyStore returns a Store on a new database with no schema at all (the
// upgrade tests bring their own migrations), dropped at the end of t.
func emptyStore(t *testing.T) *store.Store {
	t.Helper()
	return emptyStoreIn(t, "")
}

// emptyStoreIn is emptyStore with options for CREATE DATABASE, such as a
// character set.
func emptyStoreIn(t *testing.T, options string) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), emptyDatabase(t, options), store.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatalf("open test database: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// emptyDatabase creates a database with no schema, dropped at the end of
// t, and returns its DSN.
func emptyDatabase(t *testing.T, options string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(storetest.ServerDSN())
	if err != nil {
		t.Fatalf("parse TEST_MYSQL_DSN: %v", err)
	}
	cfg.DBName = ""
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatalf("open test server: %v", err)
	}
	t.Cleanup(func() { admin.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "tsschema_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" "+options); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		if _, err := admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

func loadMigrations(t *testing.T, files map[string]string) []schema.Migration {
	t.Helper()
	fsys := fstest.MapFS{}
	for name, body := range files {
		fsys[name] = &fstest.MapFile{Data: []byte(body)}
	}
	migs, err := schema.Load(fsys)
	if err != nil {
		t.Fatalf("schema.Load: %v", err)
	}
	return migs
}

func columns(t *testing.T, st *store.Store, table string) []string {
	t.Helper()
	var cols []string
	if err := st.DB().Select(&cols, `SELECT COLUMN_NAME FROM information_schema.COLUMNS
        WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, table); err != nil {
		t.Fatalf("columns of %s: %v", table, err)
	}
	return cols
}

const migInit = `CREATE TABLE a (id INT NOT NULL PRIMARY KEY);
-- a comment the checksum ignores
CREATE TABLE b (id INT NOT NULL PRIMARY KEY);
`

// migBroken fails at its second statement, after the first has been
// committed (DDL commits implicitly).
const migBroken = `ALTER TABLE a ADD COLUMN x INT NOT NULL DEFAULT 0;
INSERT INTO no_such_table (id) VALUES (1);
ALTER TABLE a ADD COLUMN y INT NOT NULL DEFAULT 0;
`

const migFixed = `ALTER TABLE a ADD COLUMN x INT NOT NULL DEFAULT 0;
CREATE TABLE c (id INT NOT NULL PRIMARY KEY);
ALTER TABLE a ADD COLUMN y INT NOT NULL DEFAULT 0;
`

// failHalfway runs the broken migration set and checks it stopped at
// statement 2 of version 2 with version 1 recorded.
func failHalfway(t *testing.T, st *store.Store) {
	t.Helper()
	ctx := context.Background()
	applied, err := st.SchemaUpgrade(ctx, loadMigrations(t, map[string]string{
		"0001_init.sql": migInit, "0002_more.sql": migBroken}), time.Unix(1000, 0))
	if err == nil || !strings.Contains(err.Error(), "0002_more.sql statement 2 of 3") {
		t.Fatalf("SchemaUpgrade(broken) error = %v; want one naming 0002_more.sql statement 2 of 3", err)
	}
	if !slices.Equal(applied, []int{1}) {
		t.Fatalf("SchemaUpgrade(broken) applied %v, want [1]", applied)
	}
	if v, err := st.SchemaVersion(ctx); err != nil || v != 1 {
		t.Fatalf("SchemaVersion after failure = %d, %v; want 1 (version 2 must not be recorded)", v, err)
	}
	versions, prog, err := st.SchemaStatus(ctx)
	if err != nil || len(versions) != 1 || prog == nil || prog.Version != 2 || prog.Statements != 1 {
		t.Fatalf("SchemaStatus after failure = %v, %+v, %v; want version 1 applied, version 2 at 1 statement", versions, prog, err)
	}
	if got := columns(t, st, "a"); !slices.Equal(got, []string{"id", "x"}) {
		t.Fatalf("columns of a after failure = %v, want [id x] (statement 1 committed)", got)
	}
	if err := st.SchemaCheck(ctx); !errors.Is(err, store.ErrSchemaOlder) {
		t.Fatalf("SchemaCheck with an upgrade half-way = %v, want ErrSchemaOlder", err)
	}
}

func TestSchemaUpgradeResumesAtTheFailedStatement(t *testing.T) {
	t.Parallel()
	st := emptyStore(t)
	ctx := context.Background()
	failHalfway(t, st)
	// Statement 1 is not run again: it would fail with "duplicate column".
	applied, err := st.SchemaUpgrade(ctx, loadMigrations(t, map[string]string{
		"0001_init.sql": migInit, "0002_more.sql": migFixed}), time.Unix(2000, 0))
	if err != nil || !slices.Equal(applied, []int{2}) {
		t.Fatalf("SchemaUpgrade(fixed) = %v, %v; want [2], no error", applied, err)
	}
	if got := columns(t, st, "a"); !slices.Equal(got, []string{"id", "x", "y"}) {
		t.Fatalf("columns of a after resume = %v, want [id x y]", got)
	}
	if got := columns(t, st, "c"); !slices.Equal(got, []string{"id"}) {
		t.Fatalf("columns of c after resume = %v, want [id]", got)
	}
	versions, prog, err := st.SchemaStatus(ctx)
	if err != nil || prog != nil || len(versions) != 2 || versions[1].Name != "0002_more.sql" || versions[1].AppliedAt != 2000 {
		t.Fatalf("SchemaStatus after resume = %+v, %+v, %v; want versions 1 and 2 (0002_more.sql at 2000), no progress", versions, prog, err)
	}
	applied, err = st.SchemaUpgrade(ctx, loadMigrations(t, map[string]string{
		"0001_init.sql": migInit, "0002_more.sql": migFixed}), time.Unix(3000, 0))
	if err != nil || len(applied) != 0 {
		t.Fatalf("SchemaUpgrade when up to date = %v, %v; want nothing, no error", applied, err)
	}
}

func TestSchemaUpgradeRefusesAMigrationChangedBeforeItsResumePoint(t *testing.T) {
	t.Parallel()
	st := emptyStore(t)
	ctx := context.Background()
	failHalfway(t, st)
	changed := strings.Replace(migFixed, "ADD COLUMN x INT", "ADD COLUMN x BIGINT", 1)
	applied, err := st.SchemaUpgrade(ctx, loadMigrations(t, map[string]string{
		"0001_init.sql": migInit, "0002_more.sql": changed}), time.Unix(2000, 0))
	if !errors.Is(err, store.ErrSchemaChanged) || len(applied) != 0 {
		t.Fatalf("SchemaUpgrade(changed statement 1) = %v, %v; want ErrSchemaChanged, nothing applied", applied, err)
	}
	if got := columns(t, st, "c"); len(got) != 0 {
		t.Fatalf("table c exists after a refused upgrade (columns %v)", got)
	}
	// Fewer statements than were applied is a change too.
	applied, err = st.SchemaUpgrade(ctx, loadMigrations(t, map[string]string{
		"0001_init.sql": migInit, "0002_more.sql": "SELECT 1;\n"}), time.Unix(2000, 0))
	if !errors.Is(err, store.ErrSchemaChanged) || len(applied) != 0 {
		t.Fatalf("SchemaUpgrade(shorter file) = %v, %v; want ErrSchemaChanged", applied, err)
	}
}

func TestSchemaCheckTellsOlderFromNewer(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	latest := schema.Latest()
	if _, err := st.DB().Exec(`INSERT INTO schema_version (version, name, applied_at) VALUES (?, 'future.sql', 0)`, latest+1); err != nil {
		t.Fatalf("insert a newer version: %v", err)
	}
	err := st.SchemaCheck(ctx)
	if !errors.Is(err, store.ErrSchemaNewer) || !strings.Contains(err.Error(), "upgrade the binaries") {
		t.Fatalf("SchemaCheck on a newer schema = %v; want ErrSchemaNewer saying to upgrade the binaries", err)
	}
	if _, err := st.SchemaApply(ctx, time.Now()); !errors.Is(err, store.ErrSchemaNewer) {
		t.Fatalf("SchemaApply on a newer schema = %v; want ErrSchemaNewer", err)
	}
	if _, err := st.DB().Exec(`DELETE FROM schema_version WHERE version >= ?`, latest); err != nil {
		t.Fatalf("delete versions: %v", err)
	}
	err = st.SchemaCheck(ctx)
	if !errors.Is(err, store.ErrSchemaOlder) || !strings.Contains(err.Error(), "taskctl schema upgrade") {
		t.Fatalf("SchemaCheck on an older schema = %v; want ErrSchemaOlder saying to run taskctl schema upgrade", err)
	}
}

func TestSchemaDriftReportsEveryDifference(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	ctx := context.Background()
	migs, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	diffs, v, err := store.SchemaDrift(ctx, dsn, migs)
	if err != nil || len(diffs) != 0 || v != schema.Latest() {
		t.Fatalf("SchemaDrift on a fresh database = %q, %d, %v; want no differences at version %d", diffs, v, err, schema.Latest())
	}
	st, err := store.Open(ctx, dsn, store.Options{MaxOpenConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, ddl := range []string{
		`ALTER TABLE user MODIFY name VARCHAR(100) NULL`,
		`ALTER TABLE user DROP INDEX user_authenticator`,
		`ALTER TABLE host ADD COLUMN surprise INT NOT NULL DEFAULT 7`,
		`CREATE TABLE stray (id INT NOT NULL PRIMARY KEY)`,
	} {
		if _, err := st.DB().Exec(ddl); err != nil {
			t.Fatalf("%s: %v", ddl, err)
		}
	}
	diffs, _, err = store.SchemaDrift(ctx, dsn, migs)
	if err != nil {
		t.Fatalf("SchemaDrift after changes: %v", err)
	}
	want := []string{
		"table host column surprise: not expected (int(11) NOT NULL DEFAULT 7)",
		"table stray: not expected",
		"table user column name: varchar(100) DEFAULT NULL, want varchar(254) NOT NULL",
		"table user index user_authenticator: missing (want UNIQUE KEY (authenticator))",
	}
	if !slices.Equal(diffs, want) {
		t.Fatalf("SchemaDrift after changes =\n%s\nwant\n%s", strings.Join(diffs, "\n"), strings.Join(want, "\n"))
	}
	// The scratch database is gone.
	var n int
	if err := st.DB().Get(&n, `SELECT COUNT(*) FROM information_schema.SCHEMATA
        WHERE SCHEMA_NAME LIKE CONCAT(DATABASE(), '_schema_check_%')`); err != nil || n != 0 {
		t.Fatalf("scratch databases left: %d (%v)", n, err)
	}
}

// TestHostCPIDMigrationHashesAsBOINC: version 8 turns the host_cpid rows
// written before it (the client's cpid) into BOINC's form, the md5 of the
// cpid and the owner's e-mail address, and leaves an empty one empty.
func TestHostCPIDMigrationHashesAsBOINC(t *testing.T) {
	t.Parallel()
	st := emptyStore(t)
	ctx := context.Background()
	all, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	var upTo7 []schema.Migration
	for _, m := range all {
		if m.Version <= 7 {
			upTo7 = append(upTo7, m)
		}
	}
	if _, err := st.SchemaUpgrade(ctx, upTo7, time.Unix(1000, 0)); err != nil {
		t.Fatal(err)
	}
	storetest.Exec(t, st, `INSERT INTO user (id, create_time, email_addr, name, authenticator) VALUES (1, 1, 'a@example.org', 'a', 'k')`)
	storetest.Exec(t, st, `INSERT INTO host (id, create_time, userid, host_cpid) VALUES (1, 1, 1, 'abc'), (2, 1, 1, '')`)
	if _, err := st.SchemaUpgrade(ctx, all, time.Unix(2000, 0)); err != nil {
		t.Fatal(err)
	}
	want := map[int64]string{1: fmt.Sprintf("%x", md5.Sum([]byte("abca@example.org"))), 2: ""}
	for id, w := range want {
		var got string
		if err := st.DB().QueryRowContext(ctx, `SELECT host_cpid FROM host WHERE id = ?`, id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != w {
			t.Errorf("host %d: host_cpid %q after version 8, want %q", id, got, w)
		}
	}
}
