package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/db/schema"
)

// ErrServerSettings means the database server, or the database on it, is
// set up so that the programs would not behave as they do on the servers
// they are tested with; the error names each setting and what it must be.
var ErrServerSettings = errors.New("database settings these programs cannot work with")

// serverCheck returns an error wrapping ErrServerSettings unless the
// connection runs with utf8mb4, SQLMode, autocommit and an isolation level
// that reads only committed rows, and the database and every
// table and text column of it are utf8mb4 with schema.Collation, every
// table InnoDB. Text would otherwise be refused, or compared differently,
// depending on the server's configuration files. SchemaCheck calls it, so
// every program checks at start.
func (s *Store) serverCheck(ctx context.Context) error {
	var problems []string
	var sess struct {
		SQLMode    string `db:"sql_mode"`
		Client     string `db:"client"`
		Connection string `db:"connection"`
		Results    string `db:"results"`
		Autocommit int    `db:"autocommit"`
	}
	if err := s.db.GetContext(ctx, &sess, `SELECT @@SESSION.sql_mode AS sql_mode,
        @@SESSION.character_set_client AS client, @@SESSION.character_set_connection AS connection,
        @@SESSION.character_set_results AS results, @@SESSION.autocommit AS autocommit`); err != nil {
		return fmt.Errorf("database server check: read the session settings: %w", err)
	}
	if got, want := modeSet(sess.SQLMode), modeSet(SQLMode); !slices.Equal(got, want) {
		problems = append(problems, fmt.Sprintf("the connection's sql_mode is %q, want %q "+
			"(the programs set it on every connection; does a proxy drop the SET?)", sess.SQLMode, SQLMode))
	}
	for _, v := range []struct{ name, got string }{
		{"character_set_client", sess.Client}, {"character_set_connection", sess.Connection},
		{"character_set_results", sess.Results},
	} {
		if v.got != schema.Charset {
			problems = append(problems, fmt.Sprintf("the connection's %s is %s, want %s", v.name, v.got, schema.Charset))
		}
	}
	if sess.Autocommit != 1 {
		problems = append(problems, "the connection's autocommit is off, want on")
	}
	// Every connection is set to READ COMMITTED (connector.prepare), and
	// transactions (inTx) and single statements run at it: a proxy that
	// hands out connections without that SET gives the server's level.
	var iso string
	// Unobserved: the expected "unknown variable" on MariaDB is no query error.
	err := s.db.DB.GetContext(ctx, &iso, `SELECT @@SESSION.transaction_isolation`)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1193 { // unknown variable: MariaDB before 11.1
		err = s.db.GetContext(ctx, &iso, `SELECT @@SESSION.tx_isolation`)
	}
	if err != nil {
		return fmt.Errorf("database server check: read the isolation level: %w", err)
	}
	if iso != "READ-COMMITTED" {
		problems = append(problems, fmt.Sprintf("the connection's isolation level is %s, want READ-COMMITTED "+
			"(the programs set it on every connection; does a proxy drop the SET?)", iso))
	}

	var db struct {
		Charset   string `db:"charset"`
		Collation string `db:"collation"`
	}
	if err := s.db.GetContext(ctx, &db, `SELECT DEFAULT_CHARACTER_SET_NAME AS charset,
        DEFAULT_COLLATION_NAME AS collation FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = DATABASE()`); err != nil {
		return fmt.Errorf("database server check: read the database's character set: %w", err)
	}
	if db.Collation != schema.Collation {
		problems = append(problems, fmt.Sprintf("the database's default collation is %s, want %s "+
			"(ALTER DATABASE CHARACTER SET %s COLLATE %s)", db.Collation, schema.Collation, schema.Charset, schema.Collation))
	}

	var tables []struct {
		Name      string  `db:"name"`
		Engine    *string `db:"engine"`
		Collation *string `db:"collation"`
	}
	if err := s.db.SelectContext(ctx, &tables, `SELECT TABLE_NAME AS name, ENGINE AS engine,
        TABLE_COLLATION AS collation FROM information_schema.TABLES
        WHERE TABLE_SCHEMA = DATABASE() AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME`); err != nil {
		return fmt.Errorf("database server check: read the tables: %w", err)
	}
	// A table in another collation is named once, not with each column.
	named := map[string]bool{}
	for _, t := range tables {
		if deref(t.Engine) != "InnoDB" {
			problems = append(problems, fmt.Sprintf("table %s uses engine %s, want InnoDB", t.Name, deref(t.Engine)))
		}
		if deref(t.Collation) != schema.Collation {
			problems = append(problems, fmt.Sprintf("table %s has collation %s, want %s "+
				"(ALTER TABLE %s CONVERT TO CHARACTER SET %s COLLATE %s)",
				t.Name, deref(t.Collation), schema.Collation, t.Name, schema.Charset, schema.Collation))
			named[t.Name] = true
		}
	}
	var cols []struct {
		Table     string `db:"tbl"`
		Name      string `db:"name"`
		Collation string `db:"collation"`
	}
	if err := s.db.SelectContext(ctx, &cols, `SELECT TABLE_NAME AS tbl, COLUMN_NAME AS name,
        COLLATION_NAME AS collation FROM information_schema.COLUMNS
        WHERE TABLE_SCHEMA = DATABASE() AND COLLATION_NAME IS NOT NULL AND COLLATION_NAME <> ?
        ORDER BY TABLE_NAME, ORDINAL_POSITION`, schema.Collation); err != nil {
		return fmt.Errorf("database server check: read the columns: %w", err)
	}
	for _, c := range cols {
		if named[c.Table] {
			continue
		}
		problems = append(problems, fmt.Sprintf("column %s.%s has collation %s, want %s",
			c.Table, c.Name, c.Collation, schema.Collation))
	}
	var wsrep []struct {
		Name  string `db:"Variable_name"`
		Value string `db:"Value"`
	}
	if err := s.db.SelectContext(ctx, &wsrep, `SHOW SESSION VARIABLES LIKE 'wsrep_on'`); err != nil {
		return fmt.Errorf("database server check: read wsrep_on: %w", err)
	}
	if len(wsrep) == 1 && wsrep[0].Value == "ON" {
		problem, err := s.reloadProblem(ctx)
		if err != nil {
			return fmt.Errorf("database server check: %w", err)
		}
		if problem != "" {
			problems = append(problems, problem)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("database server check: %s: %w", strings.Join(problems, "; "), ErrServerSettings)
	}
	return nil
}

// erSpecificAccessDenied is ER_SPECIFIC_ACCESS_DENIED_ERROR: the account
// lacks a global privilege the statement needs.
const erSpecificAccessDenied = 1227

// reloadProblem says what is wrong if the account may not FLUSH tables,
// which the store does to clear the table instances a killed statement
// left broken (trigger_reload.go). On a Galera cluster that happens
// whenever a conflicting write from another node aborts a transaction
// while it opens a table, so there the privilege is required, not
// optional: without it the writes refused by the fault keep failing. The
// test is the statement itself, on the small schema_version table, whose
// readers are single statements: it waits for none of them for long.
func (s *Store) reloadProblem(ctx context.Context) (string, error) {
	_, err := s.db.DB.ExecContext(ctx, "FLUSH LOCAL TABLES schema_version")
	var me *mysql.MySQLError
	switch {
	case err == nil:
		return "", nil
	case errors.As(err, &me) && me.Number == erSpecificAccessDenied:
		return "the account lacks the RELOAD privilege, which a Galera cluster needs " +
			"(GRANT RELOAD ON *.* TO the programs' account: the store flushes tables a conflicting write left broken)", nil
	}
	return "", fmt.Errorf("test the RELOAD privilege: %w", err)
}

// modeSet is a sql_mode value as a sorted list of its modes.
func modeSet(mode string) []string {
	var out []string
	for _, m := range strings.Split(mode, ",") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, strings.ToUpper(m))
		}
	}
	slices.Sort(out)
	return out
}

func deref(s *string) string {
	if s == nil {
		return "none"
	}
	return *s
}
