// Package schema holds the database schema as versioned SQL files, embedded
// in every binary. Files are named NNNN_description.sql and applied in order;
// the schema_version table records which versions a database has.
package schema

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

//go:embed *.sql
var files embed.FS

// Charset and Collation are how every table stores text, named in each
// CREATE TABLE and CREATE DATABASE and set on every connection, so that
// nothing depends on the server's defaults (latin1 on a server started
// without a configuration file). utf8mb4 holds any text a client sends,
// emoji included. utf8mb4_general_ci exists on MariaDB 10.3+ and MySQL 8,
// and compares case-insensitively, as the e-mail lookups need.
const (
	Charset   = "utf8mb4"
	Collation = "utf8mb4_general_ci"
)

// TableOptions ends every CREATE TABLE: InnoDB (transactions and row
// locks), DYNAMIC rows (a unique key on a VARCHAR(254) is 1,016 bytes in
// utf8mb4, over the 767-byte limit of the older row formats), and the
// character set and collation above.
const TableOptions = "ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=" + Charset + " COLLATE=" + Collation

// CreateDatabase is the statement that creates the database name (quoted
// here), unless it exists, with the project's character set, so tables a
// migration creates without naming one still get it.
func CreateDatabase(name string) string {
	return "CREATE DATABASE IF NOT EXISTS `" + name + "` CHARACTER SET " + Charset + " COLLATE " + Collation
}

// Migration is one versioned schema file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations returns every embedded migration in version order.
func Migrations() ([]Migration, error) { return Load(files) }

// Load reads the migrations in the top directory of fsys, in version order.
// Binaries use the embedded set through Migrations; tests pass their own to
// exercise failures an embedded file must never have.
func Load(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("read schema files: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue // WRITERS.md and the like document the files
		}
		prefix, _, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("schema file %q: want NNNN_name.sql", name)
		}
		v, err := strconv.Atoi(prefix)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("schema file %q: bad version prefix", name)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("read schema file %q: %w", name, err)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := range out {
		if out[i].Version != i+1 {
			return nil, fmt.Errorf("schema versions not contiguous at %q", out[i].Name)
		}
	}
	return out, nil
}

// Latest is the newest schema version these binaries know.
func Latest() int {
	m, err := Migrations()
	if err != nil || len(m) == 0 {
		return 0
	}
	return m[len(m)-1].Version
}

// Statements splits a migration into single statements. Files keep to plain
// DDL and DML: semicolons end statements, "--" starts a comment line.
func Statements(sql string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(sql, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteString("\n")
		if strings.HasSuffix(trimmed, ";") {
			stmt := strings.TrimSpace(cur.String())
			out = append(out, strings.TrimSuffix(stmt, ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}
