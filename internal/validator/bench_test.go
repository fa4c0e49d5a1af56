package validator

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/outputfile"
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
	storetest.SkipWithoutServer(b)
	st := storetest.New(b)
	ctx := context.Background()
	appID := storetest.App(b, st, storetest.AppOptions{CreateTime: t0, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
	m := storetest.NewMeter(b, st.DB().DB)
	users, hosts := benchVolunteersInsert(b, st)
	for i := range b.N {
		b.StopTimer()
		upload := b.TempDir()
		benchJobsInsert(b, st, appID, upload, fmt.Sprintf("it%d", i), users, hosts)
		svc := mustNew(New(withDefaults(Config{App: "demo", UploadDir: upload, Fanout: fanoutN}),
			Deps{Store: st, Now: func() time.Time { return time.Unix(t0+3600, 0) }}))
		m.Start(b)
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
		m.Stop(b)
		var left int
		if err := st.DB().Get(&left, `SELECT COUNT(*) FROM workunit WHERE need_validate = 1 OR canonical_resultid = 0`); err != nil {
			b.Fatal(err)
		}
		if left != 0 {
			b.Fatalf("%d jobs left unvalidated", left)
		}
	}
	m.Report(b, b.N*benchJobs, "job")
}

// benchVolunteersInsert makes benchVolunteers users with a host each.
func benchVolunteersInsert(b *testing.B, st *store.Store) (users, hosts []int64) {
	b.Helper()
	for i := range benchVolunteers {
		u := storetest.User(b, st, storetest.UserOptions{CreateTime: t0, EmailAddr: fmt.Sprintf("v%d@example.com", i),
			Name: fmt.Sprintf("v%d", i), Authenticator: fmt.Sprintf("auth-v%d", i)}).ID
		h := storetest.Host(b, st, storetest.HostOptions{CreateTime: t0, User: u}).ID
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
				doc, err := jobxml.FormatResult(storetest.Outputs(name, []string{"out"}, 1e6))
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
