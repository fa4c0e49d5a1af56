package scalebench

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/internal/privatedb"
)

// TestStatementsAreFoldedPerForm runs statements of one form at several
// batch sizes on a private server with performance_schema on (what
// --statements starts) and checks that ScaleStatements gives each form
// once, with the counts and rows of all its sizes, the most time first,
// and without the probe's own statements. (The server folds IN and VALUES
// lists itself; the CASE arms are ScaleStatements'.)
func TestStatementsAreFoldedPerForm(t *testing.T) {
	if !privatedb.Available() {
		if os.Getenv("CI") == "true" {
			t.Fatal("no MariaDB server program installed (scripts/db-up.sh installs it)")
		}
		t.Skip("no MariaDB server program installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := privatedb.Start(ctx, filepath.Join(t.TempDir(), "db"),
		privatedb.Options{BufferPool: "64M", MaxConnections: 20, StatementStats: true})
	if err != nil {
		t.Fatalf("start a server: %v", err)
	}
	t.Cleanup(srv.Stop)
	st, dsn, err := openStore(ctx, srv, true)
	if err != nil {
		t.Fatalf("open the store: %v", err)
	}
	defer st.Close()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.InterpolateParams = true
	raw, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetMaxOpenConns(1)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := raw.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL)`)
	exec(`INSERT INTO t VALUES (1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (6, 0)`)
	if err := st.ScaleStatementsReset(ctx); err != nil {
		t.Fatal(err)
	}
	// Two sizes of each form: 2 + 3 rows updated, 1 + 3 rows read, 2 + 3
	// rows inserted.
	exec(`UPDATE t SET v = CASE id WHEN ? THEN ? WHEN ? THEN ? END WHERE id IN (?, ?)`, 1, 10, 2, 20, 1, 2)
	exec(`UPDATE t SET v = CASE id WHEN ? THEN ? WHEN ? THEN ? WHEN ? THEN ? END WHERE id IN (?, ?, ?)`,
		3, 30, 4, 40, 5, 50, 3, 4, 5)
	for _, ids := range [][]any{{1}, {1, 2, 3}} {
		rows, err := raw.QueryContext(ctx, `SELECT v FROM t WHERE id IN (?`+strings.Repeat(`, ?`, len(ids)-1)+`)`, ids...)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
		}
		rows.Close()
	}
	exec(`INSERT INTO t VALUES (?, ?), (?, ?)`, 7, 0, 8, 0)
	exec(`INSERT INTO t VALUES (?, ?), (?, ?), (?, ?)`, 9, 0, 10, 0, 11, 0)
	// The server counts a statement once its reply is out: the next
	// statement on the connection waits for that.
	exec(`DO 0`)

	sts, err := st.ScaleStatements(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct{ count, sent, affected int64 }{
		"UPDATE `t` SET `v` = CASE ID WHEN ...":    {2, 0, 5},
		"SELECT `v` FROM `t` WHERE ID IN (...)":    {2, 4, 0},
		"INSERT INTO `t` VALUES (...) /* , ... */": {2, 0, 5},
	}
	seen := map[string]bool{}
	for i, s := range sts {
		t.Logf("%.3f ms, %d, %d/%d/%d: %s", s.TimeMS, s.Count, s.RowsExamined, s.RowsSent, s.RowsAffected, s.Text)
		if i > 0 && s.TimeMS > sts[i-1].TimeMS {
			t.Errorf("form %d (%.3f ms) after one of %.3f ms: want the most time first", i, s.TimeMS, sts[i-1].TimeMS)
		}
		if strings.Contains(s.Text, "performance_schema") {
			t.Errorf("form %q: the probe's own statements are listed", s.Text)
		}
		w, ok := want[s.Text]
		if !ok {
			continue
		}
		if seen[s.Text] {
			t.Errorf("form %q listed twice", s.Text)
		}
		seen[s.Text] = true
		if s.Count != w.count || s.RowsSent != w.sent || s.RowsAffected != w.affected {
			t.Errorf("%q: count %d, rows sent %d, affected %d; want %d, %d, %d", s.Text, s.Count, s.RowsSent,
				s.RowsAffected, w.count, w.sent, w.affected)
		}
	}
	for form := range want {
		if !seen[form] {
			t.Errorf("form %q not listed", form)
		}
	}
}
