// Package storetest gives each test its own freshly created MariaDB/MySQL
// database with the project schema applied, dropped when the test ends. The
// server comes from TEST_MYSQL_DSN (default root@tcp(127.0.0.1:3306)/).
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/db/schema"
	"github.com/taskserver/taskserver/internal/store"
)

// ServerDSN is the DSN of the test server without a database name.
func ServerDSN() string {
	if v := os.Getenv("TEST_MYSQL_DSN"); v != "" {
		return v
	}
	return "root@tcp(127.0.0.1:3306)/"
}

// NewDatabase creates an empty database with a unique name, applies the
// schema, and returns its DSN. The database is dropped at the end of t.
func NewDatabase(t testing.TB) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(ServerDSN())
	if err != nil {
		t.Fatalf("parse TEST_MYSQL_DSN %q: %v", ServerDSN(), err)
	}
	cfg.DBName = ""
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatalf("open test server: %v", err)
	}
	t.Cleanup(func() { admin.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "tstest_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, schema.CreateDatabase(name)); err != nil {
		t.Fatalf("create test database on %s: %v (is MariaDB running? set TEST_MYSQL_DSN)", cfg.Addr, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	dsn := cfg.FormatDSN()
	st, err := store.Open(ctx, dsn, store.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatalf("open test database: %v", err)
	}
	defer st.Close()
	if _, err := st.SchemaApply(ctx, time.Now()); err != nil {
		t.Fatalf("apply schema: %v", err)
	}
	return dsn
}

// New returns a Store on a fresh test database, closed at the end of t.
func New(t testing.TB) *store.Store {
	t.Helper()
	dsn := NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatalf("open test database: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
