package store_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/db/schema"
	"github.com/taskserver/taskserver/internal/privatedb"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// oddText is text a volunteer's client sends: outside Latin-1 (Polish,
// Chinese) and 4-byte UTF-8 (an emoji).
const oddText = "Zoë Łukasz 李小龍 \U0001F600"

// storeOddText stores a user and a host with oddText in their names and
// checks both read back unchanged, and that e-mail addresses still compare
// case-insensitively (the unique key and the lookup rely on it).
func storeOddText(ctx context.Context, t *testing.T, st *store.Store) {
	t.Helper()
	uid := storetest.User(t, st, storetest.UserOptions{EmailAddr: "zoë\U0001F600@example.org", Name: oddText, Authenticator: "k-odd"}).ID
	hid := storetest.Host(t, st, storetest.HostOptions{User: uid, DomainName: oddText, OSName: oddText, PModel: oddText}).ID
	u, err := st.UserGet(ctx, uid)
	if err != nil || u.Name != oddText {
		t.Fatalf("UserGet = %q, %v; want name %q", u.Name, err, oddText)
	}
	h, err := st.HostGet(ctx, hid)
	if err != nil || h.DomainName != oddText || h.OSName != oddText || h.PModel != oddText {
		t.Fatalf("HostGet = %q %q %q, %v; want %q in each", h.DomainName, h.OSName, h.PModel, err, oddText)
	}
	if u, err := st.UserGetByEmail(ctx, "ZOË\U0001F600@EXAMPLE.ORG"); err != nil || u.ID != uid {
		t.Fatalf("UserGetByEmail in upper case = %d, %v; want user %d (e-mail compares case-insensitively)", u.ID, err, uid)
	}
	if _, err := st.UserInsert(ctx, row.User{EmailAddr: "ZOË\U0001F600@example.org", Name: "x", Authenticator: "k-odd-2"}); err == nil {
		t.Fatal("UserInsert of the same e-mail in upper case succeeded; want the unique key to refuse it")
	}
}

// TestLatin1ServerStoresAnyText is the fresh machine's path: a MariaDB
// started with --no-defaults (as scripts/db-up.sh and privatedb start it)
// has latin1 as its character set. The schema and the connection must not
// depend on that.
func TestLatin1ServerStoresAnyText(t *testing.T) {
	if !privatedb.Available() {
		if os.Getenv("CI") == "true" || os.Getenv("TASKSERVER_REAL_CLIENT") == "1" {
			t.Fatal("no MariaDB server program installed (scripts/db-up.sh installs it)")
		}
		t.Skip("no MariaDB server program installed")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := privatedb.Start(ctx, filepath.Join(t.TempDir(), "db"), privatedb.Options{BufferPool: "64M", MaxConnections: 20})
	if err != nil {
		t.Fatalf("start a private MariaDB: %v", err)
	}
	defer srv.Stop()
	admin, err := sql.Open("mysql", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var serverCharset string
	if err := admin.QueryRowContext(ctx, "SELECT @@GLOBAL.character_set_server").Scan(&serverCharset); err != nil {
		t.Fatal(err)
	}
	if serverCharset != "latin1" {
		t.Fatalf("the private server's character_set_server = %s; this test needs the latin1 a server without configuration has", serverCharset)
	}
	if _, err := admin.ExecContext(ctx, schema.CreateDatabase("fresh")); err != nil {
		t.Fatal(err)
	}
	cfg, err := mysql.ParseDSN(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = "fresh"
	st, err := store.Open(ctx, cfg.FormatDSN(), store.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.SchemaApply(ctx, time.Now()); err != nil {
		t.Fatalf("SchemaApply on a latin1 server: %v", err)
	}
	if err := st.SchemaCheck(ctx); err != nil {
		t.Fatalf("SchemaCheck on a latin1 server: %v", err)
	}
	storeOddText(ctx, t, st)
}

// TestSchemaUpgradeConvertsALatin1Database: a database made before the
// schema named a character set, on a latin1 server, is refused at start
// until version 4 converts it; then it stores any text and matches a
// fresh database's shape.
func TestSchemaUpgradeConvertsALatin1Database(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := emptyStoreIn(t, "CHARACTER SET latin1")
	migs, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	// Versions 1 to 3 as they were written before they named a character
	// set: the tables took the database's latin1.
	options := regexp.MustCompile(`(?m)^\) ENGINE=InnoDB[^;]*;`)
	old := make([]schema.Migration, 3)
	for i := range old {
		old[i] = migs[i]
		old[i].SQL = options.ReplaceAllString(old[i].SQL, ") ENGINE=InnoDB;")
	}
	if _, err := st.SchemaUpgrade(ctx, old, time.Now()); err != nil {
		t.Fatalf("apply versions 1-3: %v", err)
	}
	var coll string
	if err := st.DB().GetContext(ctx, &coll, `SELECT COLLATION_NAME FROM information_schema.COLUMNS
        WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'host' AND COLUMN_NAME = 'domain_name'`); err != nil || !strings.HasPrefix(coll, "latin1") {
		t.Fatalf("host.domain_name collation before version 4 = %q, %v; want latin1 (the test must start from the old state)", coll, err)
	}
	if _, err := st.HostInsert(ctx, row.Host{UserID: 1, DomainName: oddText}); err == nil {
		t.Fatal("HostInsert of text outside Latin-1 into the old latin1 table succeeded; the test shows nothing")
	}
	if applied, err := st.SchemaUpgrade(ctx, migs, time.Now()); err != nil || len(applied) != len(migs)-3 {
		t.Fatalf("upgrade from version 3 = %v, %v", applied, err)
	}
	if err := st.SchemaCheck(ctx); err != nil {
		t.Fatalf("SchemaCheck after the upgrade: %v", err)
	}
	storeOddText(ctx, t, st)
}

// TestSchemaCheckRefusesTextSettingsItCannotWorkWith: a database or table
// an operator left (or made) in another character set is refused at start
// with the setting named, not found out at the first odd host name.
func TestSchemaCheckRefusesTextSettingsItCannotWorkWith(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := storetest.NewDatabase(t)
	st, err := store.Open(ctx, dsn, store.Options{MaxOpenConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.SchemaCheck(ctx); err != nil {
		t.Fatalf("SchemaCheck on a fresh database: %v", err)
	}
	for _, ddl := range []string{
		"ALTER DATABASE CHARACTER SET latin1",
		"ALTER TABLE host MODIFY domain_name VARCHAR(254) CHARACTER SET latin1 NOT NULL DEFAULT ''",
		"ALTER TABLE platform CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
		"ALTER TABLE workunit_user ENGINE=MyISAM",
	} {
		if _, err := st.DB().ExecContext(ctx, ddl); err != nil {
			t.Fatalf("%s: %v", ddl, err)
		}
	}
	err = st.SchemaCheck(ctx)
	if !errors.Is(err, store.ErrServerSettings) {
		t.Fatalf("SchemaCheck = %v; want ErrServerSettings", err)
	}
	for _, want := range []string{
		"the database's default collation is latin1_swedish_ci, want utf8mb4_general_ci",
		"column host.domain_name has collation latin1_swedish_ci, want utf8mb4_general_ci",
		"table platform has collation utf8mb4_bin, want utf8mb4_general_ci",
		"table workunit_user uses engine MyISAM, want InnoDB",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("SchemaCheck error does not say %q:\n%v", want, err)
		}
	}
}

// TestSchemaCheckRefusesAnotherIsolationLevel: transactions and single
// statements run at the session's isolation level, READ COMMITTED on every
// connection; a connection at another level (a proxy that drops the SET)
// is refused, and a server configured with another level is overridden.
func TestSchemaCheckRefusesAnotherIsolationLevel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := storetest.NewDatabase(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	// As a server's transaction-isolation setting would: MySQL 8 names the
	// variable transaction_isolation, MariaDB 10.11 tx_isolation.
	var st *store.Store
	for _, v := range []string{"transaction_isolation", "tx_isolation"} {
		c := cfg.Clone()
		c.Params = map[string]string{v: "'READ-UNCOMMITTED'"}
		if st, err = store.Open(ctx, c.FormatDSN(), store.Options{MaxOpenConns: 1}); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("open with READ-UNCOMMITTED: %v", err)
	}
	defer st.Close()
	if err := st.SchemaCheck(ctx); err != nil {
		t.Fatalf("SchemaCheck with the server's level READ-UNCOMMITTED = %v; want the connection set to READ-COMMITTED", err)
	}
	for _, level := range []string{"READ UNCOMMITTED", "REPEATABLE READ"} {
		if _, err := st.DB().ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL "+level); err != nil {
			t.Fatal(err)
		}
		want := "isolation level is " + strings.ReplaceAll(level, " ", "-")
		if err := st.SchemaCheck(ctx); !errors.Is(err, store.ErrServerSettings) || !strings.Contains(err.Error(), want) {
			t.Errorf("SchemaCheck on a connection at %s = %v; want ErrServerSettings saying %q", level, err, want)
		}
	}
}
