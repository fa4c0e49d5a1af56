package dbpurge_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/dbpurge"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// benchJobs is the paper's purge phase scaled down: 5,000 finished jobs of
// two instances each, with their workunit_user rows.
const benchJobs = 5000

// BenchmarkPurge archives and deletes benchJobs jobs with their instances,
// as db_purge does in the paper's sixth phase, and reports per job the
// database server's CPU (including InnoDB's background purge of the deleted
// rows), this process's CPU and the statements sent. Run it against a
// private server:
//
//	TEST_MYSQL_DSN='root@tcp(127.0.0.1:3315)/' go test -run '^$' -bench Purge -benchtime 1x ./internal/dbpurge
func BenchmarkPurge(b *testing.B) {
	storetest.SkipWithoutServer(b)
	st := storetest.New(b)
	ctx := context.Background()
	appID := storetest.App(b, st, storetest.AppOptions{CreateTime: 1, Name: "bench", UserFriendlyName: "Bench", Weight: 1}).ID
	m := storetest.NewMeter(b, st.DB().DB)
	jobs := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		seedPurge(b, st, appID, fmt.Sprintf("it%d", i))
		svc, err := dbpurge.New(dbpurge.Config{ArchiveDir: filepath.Join(b.TempDir(), "archive"), MaxArchiveRows: 10000, Mod: 1, Batch: 500},
			dbpurge.Deps{Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: dbpurge.NewMetrics(prometheus.NewRegistry())})
		if err != nil {
			b.Fatal(err)
		}
		m.Start(b)
		for {
			n, err := svc.RunOnce(ctx)
			if err != nil {
				b.Fatalf("RunOnce: %v", err)
			}
			if n == 0 {
				break
			}
			jobs += n
		}
		if err := svc.Close(); err != nil {
			b.Fatal(err)
		}
		m.Stop(b)
		var left int
		if err := st.DB().Get(&left, `SELECT (SELECT COUNT(*) FROM result) + (SELECT COUNT(*) FROM workunit_user)`); err != nil || left != 0 {
			b.Fatalf("rows left after the passes: %d, %v", left, err)
		}
	}
	if want := b.N * benchJobs; jobs != want {
		b.Fatalf("jobs purged = %d, want %d", jobs, want)
	}
	m.Report(b, jobs, "job")
	u := m.Total()
	b.ReportMetric((u.DBCPU+u.SelfCPU)/float64(jobs)*50000, "cpu-s/50k-jobs")
}

// seedPurge inserts benchJobs purgeable jobs, each with two finished
// instances and their workunit_user rows, shaped like the benchmark's.
func seedPurge(b *testing.B, st *store.Store, appID int64, prefix string) {
	b.Helper()
	const chunk = 500
	for start := 0; start < benchJobs; start += chunk {
		var wq strings.Builder
		var wargs []any
		wq.WriteString(`INSERT INTO workunit (create_time, appid, name, xml_doc, rsc_fpops_est, rsc_fpops_bound,
rsc_memory_bound, rsc_disk_bound, canonical_resultid, canonical_credit, transition_time, delay_bound,
file_delete_state, assimilate_state, min_quorum, target_nresults, mod_time) VALUES `)
		for j := start; j < start+chunk; j++ {
			name := fmt.Sprintf("%s_wu%d", prefix, j)
			doc := `<workunit><file_info><name>` + name + `_in</name><open_name>in</open_name><nbytes>64</nbytes>` +
				`<md5_cksum>0123456789abcdef0123456789abcdef</md5_cksum></file_info></workunit>`
			if j > start {
				wq.WriteString(",")
			}
			wq.WriteString("(1700000000, ?, ?, ?, 1e12, 1e13, 1e8, 1e9, 1, 10.5, 1700003600, 86400, ?, ?, 2, 2, 1700007200)")
			wargs = append(wargs, appID, name, doc, int(state.FileDeleteDone), int(state.AssimilateDone))
		}
		res, err := st.DB().Exec(wq.String(), wargs...)
		if err != nil {
			b.Fatal(err)
		}
		first, err := res.LastInsertId() // the first id of a multi-row insert
		if err != nil {
			b.Fatal(err)
		}
		var rq strings.Builder
		var rargs []any
		rq.WriteString(`INSERT INTO result (create_time, workunitid, server_state, outcome, client_state, hostid, userid,
report_deadline, sent_time, received_time, name, cpu_time, xml_doc_in, xml_doc_out, stderr_out, file_delete_state,
validate_state, claimed_credit, granted_credit, appid, app_version_num, mod_time, elapsed_time, app_version_id) VALUES `)
		for j := start; j < start+chunk; j++ {
			for k := 0; k < 2; k++ {
				name := fmt.Sprintf("%s_wu%d_%d", prefix, j, k)
				in := `<result><file_info><name>` + name + `_0</name><open_name>out</open_name><max_nbytes>1000000</max_nbytes></file_info></result>`
				out := `<file_info><name>` + name + `_0</name><nbytes>64</nbytes><md5_cksum>0123456789abcdef0123456789abcdef</md5_cksum></file_info>`
				if len(rargs) > 0 {
					rq.WriteString(",")
				}
				rq.WriteString("(1700000000, ?, ?, ?, 5, ?, ?, 1700086400, 1700000100, 1700000200, ?, 3.5, ?, ?, ?, ?, 1, 10.5, 10.5, ?, 100, 1700007200, 4.5, 1)")
				rargs = append(rargs, first+int64(j-start), int(state.ServerOver), int(state.OutcomeSuccess),
					1+k, 1+k+2*(j%32), name, in, out, "<stderr_txt>\nok\n</stderr_txt>\n", int(state.FileDeleteDone), appID)
			}
		}
		res, err = st.DB().Exec(rq.String(), rargs...)
		if err != nil {
			b.Fatal(err)
		}
		rfirst, err := res.LastInsertId()
		if err != nil {
			b.Fatal(err)
		}
		var uq strings.Builder
		var uargs []any
		uq.WriteString(`INSERT INTO workunit_user (workunitid, userid, resultid) VALUES `)
		for j := start; j < start+chunk; j++ {
			for k := 0; k < 2; k++ {
				if len(uargs) > 0 {
					uq.WriteString(",")
				}
				uq.WriteString("(?, ?, ?)")
				uargs = append(uargs, first+int64(j-start), 1+k+2*(j%32), rfirst+int64(2*(j-start)+k))
			}
		}
		if _, err := st.DB().Exec(uq.String(), uargs...); err != nil {
			b.Fatal(err)
		}
	}
}
