package storetest

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/procstat"
)

// SkipWithoutServer skips tb when no test database server answers, so the
// database benchmarks can live beside the unit tests.
func SkipWithoutServer(tb testing.TB) {
	tb.Helper()
	db, err := sql.Open("mysql", ServerDSN())
	if err != nil {
		tb.Skipf("no test database: %v", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		tb.Skipf("no test database at %s: %v", ServerDSN(), err)
	}
}

// Meter samples the database server's CPU, the statements it received and
// this process's CPU around a workload, for benchmarks that report database
// work per item.
type Meter struct {
	db        *sql.DB
	dbPID     int
	dbStart   procstat.Usage
	selfStart procstat.Usage
	questions int64
}

// StartMeter waits for InnoDB's background work of the set-up to drain, then
// takes the first samples of the server dbPID that db talks to.
func StartMeter(tb testing.TB, db *sql.DB, dbPID int) *Meter {
	tb.Helper()
	m := &Meter{db: db, dbPID: dbPID}
	waitPurged(db)
	m.questions = questions(tb, db)
	var err error
	if m.dbStart, err = procstat.Read(dbPID); err != nil {
		tb.Fatal(err)
	}
	if m.selfStart, err = procstat.Read(os.Getpid()); err != nil {
		tb.Fatal(err)
	}
	return m
}

// Stop returns the database CPU seconds, this process's CPU seconds and the
// statements since StartMeter. It first waits for InnoDB's background purge
// and page flushing, which is work the workload caused.
func (m *Meter) Stop(tb testing.TB) (dbCPU, selfCPU float64, stmts int64) {
	tb.Helper()
	self, err := procstat.Read(os.Getpid())
	if err != nil {
		tb.Fatal(err)
	}
	q := questions(tb, m.db) - m.questions - 1 // not the SHOW STATUS itself
	waitPurged(m.db)
	dbu, err := procstat.Read(m.dbPID)
	if err != nil {
		tb.Fatal(err)
	}
	return dbu.Sub(m.dbStart).CPUSeconds, self.Sub(m.selfStart).CPUSeconds, q
}

func questions(tb testing.TB, db *sql.DB) int64 {
	tb.Helper()
	var name string
	var n int64
	if err := db.QueryRow(`SHOW GLOBAL STATUS LIKE 'Questions'`).Scan(&name, &n); err != nil {
		tb.Fatal(err)
	}
	return n
}

// waitPurged waits (up to 30s) until InnoDB has purged old row versions and
// flushed dirty pages, so that a sample taken after a workload includes the
// background work it caused, and one taken before excludes the set-up's.
func waitPurged(db *sql.DB) {
	deadline := time.Now().Add(30 * time.Second)
	for _, v := range []string{"Innodb_history_list_length", "Innodb_buffer_pool_pages_dirty"} {
		for time.Now().Before(deadline) {
			var name string
			var n int64
			if err := db.QueryRow(`SHOW GLOBAL STATUS LIKE '`+v+`'`).Scan(&name, &n); err != nil {
				break // not MariaDB: nothing to wait for that we can see
			}
			if n < 50 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
