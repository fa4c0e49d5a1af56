package boinctest

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// columnName is what Insert takes as a column name.
var columnName = regexp.MustCompile(`^[a-z_]+$`)

// Insert adds one row to table of the empty fixture database at dsn
// (NewDatabase), for a test that needs a project Fill does not make: a
// handful of rows, each with the columns it names set and the rest at the
// schema's defaults (a NOT NULL column without one must be named).
func Insert(ctx context.Context, dsn, table string, cols map[string]any) error {
	if !slices.Contains(Tables, table) {
		return fmt.Errorf("insert: %q is not a table of the fixture (%v)", table, Tables)
	}
	names := make([]string, 0, len(cols))
	for c := range cols {
		if !columnName.MatchString(c) {
			return fmt.Errorf("insert into %s: bad column name %q", table, c)
		}
		names = append(names, c)
	}
	slices.Sort(names)
	args := make([]any, len(names))
	for i, c := range names {
		args[i] = cols[c]
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return err
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	q := "INSERT INTO " + table + " (" + strings.Join(names, ", ") + ") VALUES (" + strings.TrimSuffix(strings.Repeat("?, ", len(names)), ", ") + ")"
	if _, err := db.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("insert into %s: %w", table, err)
	}
	return nil
}
