package validator

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/procstat"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// benchJobs is the jobs one benchmark iteration validates: the paper's
// 50,000 scaled down by ten.
const benchJobs = 5000

// benchVolunteers is how many users (one host each) report the instances.
const benchVolunteers = 500

// BenchmarkValidate validates benchJobs jobs of two reported instances with
// identical output files, as phase 3 of the paper's benchmark does, and
// reports per job the statements the database server ran and its redo log writes (one per durable commit when commits come one at a time), its
// CPU and this process's. It needs a database server of its own on this
// machine (TEST_MYSQL_DSN): the figures are the server's global counters.
func BenchmarkValidate(b *testing.B) {
	if os.Getenv("TEST_MYSQL_DSN") == "" {
		b.Skip("TEST_MYSQL_DSN names no database server of the benchmark's own")
	}
	st := storetest.New(b)
	ctx := context.Background()
	appID, err := st.AppInsert(ctx, row.App{CreateTime: t0, Name: "demo", UserFriendlyName: "Demo", Weight: 1})
	if err != nil {
		b.Fatalf("AppInsert: %v", err)
	}
	pid, err := procstat.DBServerPID(ctx, st.DB().DB)
	if err != nil {
		b.Skipf("database server not measurable: %v", err)
	}
	users, hosts := benchVolunteersInsert(b, st)
	var total benchUsage
	for i := range b.N {
		b.StopTimer()
		upload := b.TempDir()
		benchJobsInsert(b, st, appID, upload, fmt.Sprintf("it%d", i), users, hosts)
		svc := New(st, slog.New(slog.DiscardHandler), NewMetrics(prometheus.NewRegistry()),
			Options{App: "demo", UploadDir: upload, Fanout: fanoutN, Now: func() time.Time { return time.Unix(t0+3600, 0) }})
		before := benchSample(b, st, pid)
		b.StartTimer()
		for done := 0; done < benchJobs; {
			n, err := svc.RunOnce(ctx)
			if err != nil {
				b.Fatalf("RunOnce: %v", err)
			}
			if n == 0 {
				b.Fatalf("RunOnce found nothing after %d of %d jobs", done, benchJobs)
			}
			done += n
		}
		b.StopTimer()
		total = total.add(benchSample(b, st, pid).sub(before))
		var left int
		if err := st.DB().Get(&left, `SELECT COUNT(*) FROM workunit WHERE need_validate = 1 OR canonical_resultid = 0`); err != nil {
			b.Fatal(err)
		}
		if left != 0 {
			b.Fatalf("%d jobs left unvalidated", left)
		}
	}
	total.report(b, b.N*benchJobs)
}

// benchVolunteersInsert makes benchVolunteers users with a host each.
func benchVolunteersInsert(b *testing.B, st *store.Store) (users, hosts []int64) {
	b.Helper()
	for i := range benchVolunteers {
		u, err := st.UserInsert(context.Background(), row.User{CreateTime: t0, EmailAddr: fmt.Sprintf("v%d@example.com", i),
			Name: fmt.Sprintf("v%d", i), Authenticator: fmt.Sprintf("auth-v%d", i)})
		if err != nil {
			b.Fatalf("UserInsert: %v", err)
		}
		h, err := st.HostInsert(context.Background(), row.Host{CreateTime: t0, UserID: u})
		if err != nil {
			b.Fatalf("HostInsert: %v", err)
		}
		users, hosts = append(users, u), append(hosts, h)
	}
	return users, hosts
}

// benchJobsInsert inserts benchJobs jobs awaiting validation, each with two
// reported successes by different volunteers whose output files (equal)
// are in upload, in multi-row statements: the set-up is not measured but
// should not take long either.
func benchJobsInsert(b *testing.B, st *store.Store, appID int64, upload, prefix string, users, hosts []int64) {
	b.Helper()
	const chunk = 500
	for start := 0; start < benchJobs; start += chunk {
		var wuRows []string
		var wuArgs []any
		for j := start; j < min(start+chunk, benchJobs); j++ {
			wuRows = append(wuRows, "(?, ?, ?, '', 86400e9, 2, 2, 1, ?)")
			wuArgs = append(wuArgs, t0, appID, fmt.Sprintf("%s_job%d", prefix, j), t0+86400)
		}
		res, err := st.DB().Exec(`INSERT INTO workunit (create_time, appid, name, xml_doc, rsc_fpops_est, min_quorum,
target_nresults, need_validate, transition_time) VALUES `+strings.Join(wuRows, ", "), wuArgs...)
		if err != nil {
			b.Fatalf("insert jobs: %v", err)
		}
		first, err := res.LastInsertId() // the first id of a multi-row insert
		if err != nil {
			b.Fatal(err)
		}
		var rRows []string
		var rArgs []any
		for j := start; j < min(start+chunk, benchJobs); j++ {
			wuID := first + int64(j-start)
			for k := range 2 {
				name := fmt.Sprintf("%s_job%d_%d", prefix, j, k)
				doc, err := jobxml.FormatResult(name, []string{"out"}, 1e6)
				if err != nil {
					b.Fatal(err)
				}
				v := (j*2 + k) % len(users)
				rRows = append(rRows, "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
				rArgs = append(rArgs, t0, wuID, name, state.ServerOver, state.OutcomeSuccess, state.ValidateInit,
					users[v], hosts[v], appID, doc, 100.0)
				path, err := fanout.Path(upload, jobxml.OutputName(name, 0), fanoutN)
				if err != nil {
					b.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					b.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(fmt.Sprintf("output of job %d\n", j)), 0o644); err != nil {
					b.Fatal(err)
				}
				if err := os.Chmod(path, outputfile.FinishedMode); err != nil { // as the data server marks it
					b.Fatal(err)
				}
			}
		}
		if _, err := st.DB().Exec(`INSERT INTO result (create_time, workunitid, name, server_state, outcome, validate_state,
userid, hostid, appid, xml_doc_in, claimed_credit) VALUES `+strings.Join(rRows, ", "), rArgs...); err != nil {
			b.Fatalf("insert results: %v", err)
		}
	}
}

// benchUsage is what a workload cost the database server and this process.
type benchUsage struct {
	dbCPU, selfCPU        float64
	statements, logWrites int64
}

func (u benchUsage) sub(v benchUsage) benchUsage {
	return benchUsage{u.dbCPU - v.dbCPU, u.selfCPU - v.selfCPU, u.statements - v.statements, u.logWrites - v.logWrites}
}

func (u benchUsage) add(v benchUsage) benchUsage {
	return benchUsage{u.dbCPU + v.dbCPU, u.selfCPU + v.selfCPU, u.statements + v.statements, u.logWrites + v.logWrites}
}

// report reports u per job.
func (u benchUsage) report(b *testing.B, jobs int) {
	n := float64(jobs)
	b.ReportMetric(u.dbCPU/n*1e3, "db-ms/job")
	b.ReportMetric(u.selfCPU/n*1e3, "proc-ms/job")
	b.ReportMetric(float64(u.statements)/n, "stmts/job")
	b.ReportMetric(float64(u.logWrites)/n, "logwrites/job")
}

// benchSample reads the server's and this process's CPU and the server's
// statement and log-write counters (a durable commit writes the log once) (the two SHOW statements count themselves;
// they are a few per pass, not per job).
func benchSample(b *testing.B, st *store.Store, pid int) benchUsage {
	b.Helper()
	db, err := procstat.Read(pid)
	if err != nil {
		b.Fatal(err)
	}
	self, err := procstat.Read(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	var u benchUsage
	u.dbCPU, u.selfCPU = db.CPUSeconds, self.CPUSeconds
	var name string
	if err := st.DB().QueryRow(`SHOW GLOBAL STATUS LIKE 'Questions'`).Scan(&name, &u.statements); err != nil {
		b.Fatal(err)
	}
	if err := st.DB().QueryRow(`SHOW GLOBAL STATUS LIKE 'Innodb_log_writes'`).Scan(&name, &u.logWrites); err != nil {
		b.Fatal(err)
	}
	return u
}
