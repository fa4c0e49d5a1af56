package workgenerator_test

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/procstat"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store/storetest"
	"github.com/taskserver/taskserver/internal/workgenerator"
)

// benchJobs is the number of jobs each benchmark iteration creates.
const benchJobs = 5000

// usage is what the database server and this process had used, and the
// statements and commits the server had counted. Measure on a private
// server: the counters are server-wide.
type usage struct {
	dbCPU, cpu     float64
	stmts, commits int64
}

func sample(b *testing.B, db *sql.DB, dbPID int) usage {
	b.Helper()
	d, err := procstat.Read(dbPID)
	if err != nil {
		b.Fatalf("read database server usage: %v", err)
	}
	p, err := procstat.Read(os.Getpid())
	if err != nil {
		b.Fatalf("read own usage: %v", err)
	}
	u := usage{dbCPU: d.CPUSeconds, cpu: p.CPUSeconds}
	rows, err := db.Query(`SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_commit')`)
	if err != nil {
		b.Fatalf("read server status: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			b.Fatalf("scan server status: %v", err)
		}
		if name == "Questions" {
			u.stmts = v
		} else {
			u.commits = v
		}
	}
	return u
}

// BenchmarkCreateJobs: the work generator creates benchJobs jobs per
// iteration in passes of 500 (the --batch default), staging their inputs.
func BenchmarkCreateJobs(b *testing.B) {
	db, err := sql.Open("mysql", storetest.ServerDSN())
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = db.PingContext(ctx)
		cancel()
		db.Close()
	}
	if err != nil {
		b.Skipf("no test database server: %v", err)
	}
	st := storetest.New(b)
	ctx := context.Background()
	if _, err := st.AppInsert(ctx, row.App{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1}); err != nil {
		b.Fatalf("AppInsert: %v", err)
	}
	dbPID, err := procstat.DBServerPID(ctx, st.DB().DB)
	if err != nil {
		b.Skipf("database server's pid: %v (measure on a local private server)", err)
	}
	dir := b.TempDir()
	var tot usage
	jobsMade := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		cfg := workgenerator.Config{App: "demo", UnsentTarget: 1 << 30, TotalJobs: int64((i + 1) * benchJobs),
			Batch: 500, CounterFile: workgenerator.CounterPath(dir, "demo"), Params: jobs.DefaultParams()}
		cfg.Params.MinQuorum, cfg.Params.TargetNResults = 2, 2
		svc, err := workgenerator.New(st, jobs.NewCreator(st, filepath.Join(dir, "download"), 1024, time.Now), cfg,
			slog.New(slog.NewTextHandler(io.Discard, nil)), workgenerator.NewMetrics(prometheus.NewRegistry()), time.Now)
		if err != nil {
			b.Fatalf("workgenerator.New: %v", err)
		}
		b.StartTimer()
		before := sample(b, st.DB().DB, dbPID)
		for {
			n, err := svc.RunOnce(ctx)
			if err != nil {
				b.Fatalf("RunOnce: %v", err)
			}
			if n == 0 {
				break
			}
			jobsMade += n
		}
		after := sample(b, st.DB().DB, dbPID)
		tot.dbCPU += after.dbCPU - before.dbCPU
		tot.cpu += after.cpu - before.cpu
		tot.stmts += after.stmts - before.stmts - 1
		tot.commits += after.commits - before.commits
	}
	b.StopTimer()
	n := float64(jobsMade)
	b.ReportMetric(tot.dbCPU/n*1e3, "db-ms/job")
	b.ReportMetric(tot.cpu/n*1e3, "cpu-ms/job")
	b.ReportMetric(float64(tot.stmts)/n, "stmts/job")
	b.ReportMetric(float64(tot.commits)/n, "commits/job")
	b.ReportMetric(0, "ns/op")
}
