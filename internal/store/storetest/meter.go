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

// Meter is the one measure of every package's database benchmarks: it sums,
// over the stretches between Start and Stop, the database server's CPU, this
// process's CPU and the server's statement, commit, redo-log-write and fsync
// counters, and reports them per item under names every benchmark shares.
// The counters are server-wide and the CPU is read from /proc: measure on a
// private server on this machine.
type Meter struct {
	db    *sql.DB
	dbPID int
	start Usage // the samples Start took
	total Usage
}

// Usage is what a workload cost: CPU seconds and server counters.
type Usage struct {
	DBCPU, SelfCPU                         float64
	Statements, Commits, LogWrites, Fsyncs int64
}

// NewMeter returns a Meter of the server db talks to, or skips b when that
// server's process is not on this machine.
func NewMeter(b *testing.B, db *sql.DB) *Meter {
	b.Helper()
	pid, err := procstat.DBServerPID(context.Background(), db)
	if err != nil {
		b.Skipf("database server not measurable on this machine: %v", err)
	}
	return &Meter{db: db, dbPID: pid}
}

// Start waits for InnoDB's background work of the set-up to drain, so that
// none of it is counted, takes the first samples and starts b's timer.
func (m *Meter) Start(b *testing.B) {
	b.Helper()
	waitPurged(m.db)
	m.start = m.counters(b)
	m.start.DBCPU = m.cpu(b, m.dbPID)
	m.start.SelfCPU = m.cpu(b, os.Getpid())
	b.StartTimer()
}

// Stop stops b's timer and adds what was used since Start to the totals. The
// database CPU is read after InnoDB's background purge and page flushing
// have drained: that is work the workload caused.
func (m *Meter) Stop(b *testing.B) {
	b.Helper()
	b.StopTimer()
	self := m.cpu(b, os.Getpid())
	c := m.counters(b)
	waitPurged(m.db)
	m.total.DBCPU += m.cpu(b, m.dbPID) - m.start.DBCPU
	m.total.SelfCPU += self - m.start.SelfCPU
	m.total.Statements += c.Statements - m.start.Statements - 1 // not the SHOW STATUS itself
	m.total.Commits += c.Commits - m.start.Commits
	m.total.LogWrites += c.LogWrites - m.start.LogWrites
	m.total.Fsyncs += c.Fsyncs - m.start.Fsyncs
}

// Total returns the sums so far, for a benchmark's own figures beside Report's.
func (m *Meter) Total() Usage { return m.total }

// Report reports the totals per item handled (unit names the item: job,
// inst, row, op) as db-ms/<unit> and cpu-ms/<unit> (milliseconds of the
// database server's and this process's CPU), stmts/<unit>, commits/<unit>,
// logwrites/<unit> and fsyncs/<unit>.
func (m *Meter) Report(b *testing.B, items int, unit string) {
	b.Helper()
	if items <= 0 {
		b.Fatalf("meter: %d %ss handled, nothing to report per %s", items, unit, unit)
	}
	n := float64(items)
	b.ReportMetric(m.total.DBCPU/n*1e3, "db-ms/"+unit)
	b.ReportMetric(m.total.SelfCPU/n*1e3, "cpu-ms/"+unit)
	b.ReportMetric(float64(m.total.Statements)/n, "stmts/"+unit)
	b.ReportMetric(float64(m.total.Commits)/n, "commits/"+unit)
	b.ReportMetric(float64(m.total.LogWrites)/n, "logwrites/"+unit)
	b.ReportMetric(float64(m.total.Fsyncs)/n, "fsyncs/"+unit)
}

func (m *Meter) cpu(b *testing.B, pid int) float64 {
	b.Helper()
	u, err := procstat.Read(pid)
	if err != nil {
		b.Fatalf("meter: CPU of process %d: %v", pid, err)
	}
	return u.CPUSeconds
}

// counters reads the server's counters in one statement, which counts itself
// in Questions.
func (m *Meter) counters(b *testing.B) Usage {
	b.Helper()
	rows, err := m.db.Query(`SHOW GLOBAL STATUS WHERE Variable_name IN
('Questions', 'Com_commit', 'Innodb_log_writes', 'Innodb_data_fsyncs')`)
	if err != nil {
		b.Fatalf("meter: server status: %v", err)
	}
	defer rows.Close()
	var u Usage
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			b.Fatalf("meter: server status: %v", err)
		}
		switch name {
		case "Questions":
			u.Statements = v
		case "Com_commit":
			u.Commits = v
		case "Innodb_log_writes":
			u.LogWrites = v
		case "Innodb_data_fsyncs":
			u.Fsyncs = v
		}
	}
	if err := rows.Err(); err != nil {
		b.Fatalf("meter: server status: %v", err)
	}
	return u
}

// waitPurged waits until InnoDB has purged old row versions and flushed
// dirty pages, so that a sample taken after a workload includes the
// background work it caused, and one taken before excludes the set-up's. It
// stops waiting on a figure that has not dropped for a second: an idle
// MariaDB leaves dirty pages below its flushing threshold for later, which
// no wait would see, and waiting 30s for them made every sample that long.
func waitPurged(db *sql.DB) {
	deadline := time.Now().Add(30 * time.Second)
	for _, v := range []string{"Innodb_history_list_length", "Innodb_buffer_pool_pages_dirty"} {
		low, lowAt := int64(-1), time.Now()
		for time.Now().Before(deadline) {
			var name string
			var n int64
			if err := db.QueryRow(`SHOW GLOBAL STATUS LIKE '`+v+`'`).Scan(&name, &n); err != nil {
				break // not MariaDB: nothing to wait for that we can see
			}
			if n < 50 {
				break
			}
			if low < 0 || n < low {
				low, lowAt = n, time.Now()
			} else if time.Since(lowAt) > time.Second {
				break // not going down: not work in progress
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
