package filedeleter_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/filedeleter"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// benchJobs is the paper's file-deletion phase scaled down: 5,000 jobs of
// one input file and two instances of one output file each (15,000 files).
const benchJobs = 5000

// BenchmarkFileDeletion deletes the files of benchJobs jobs and their
// instances, as the file deleter does in the paper's fifth phase, and reports
// per row handled (workunit or result) the database server's CPU, this
// process's CPU and the statements sent. Run it against a private server:
//
//	TEST_MYSQL_DSN='root@tcp(127.0.0.1:3315)/' go test -run '^$' -bench FileDeletion -benchtime 1x ./internal/filedeleter
func BenchmarkFileDeletion(b *testing.B) {
	storetest.SkipWithoutServer(b)
	st := storetest.New(b)
	ctx := context.Background()
	appID := storetest.App(b, st, storetest.AppOptions{CreateTime: 1, Name: "bench", UserFriendlyName: "Bench", Weight: 1}).ID
	m := storetest.NewMeter(b, st.DB().DB)
	const fan = 1024
	rows := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := b.TempDir()
		download, upload := filepath.Join(dir, "download"), filepath.Join(dir, "upload")
		seedFileDeletion(b, st, appID, fmt.Sprintf("it%d", i), download, upload, fan)
		svc := newService(b, filedeleter.Config{DownloadDir: download, UploadDir: upload, Fanout: fan, Mod: 1, Batch: 500, OrphanEvery: time.Hour},
			filedeleter.Deps{Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: filedeleter.NewMetrics(prometheus.NewRegistry())})
		m.Start(b)
		for {
			n, err := svc.RunOnce(ctx)
			if err != nil {
				b.Fatalf("RunOnce: %v", err)
			}
			if n == 0 {
				break
			}
			rows += n
		}
		m.Stop(b)
		var left int
		if err := st.DB().Get(&left, `SELECT COUNT(*) FROM result WHERE file_delete_state = ?`, state.FileDeleteReady); err != nil || left != 0 {
			b.Fatalf("results still READY after the passes: %d, %v", left, err)
		}
	}
	if want := b.N * benchJobs * 3; rows != want {
		b.Fatalf("rows handled = %d, want %d", rows, want)
	}
	m.Report(b, rows, "row")
	u := m.Total()
	b.ReportMetric((u.DBCPU+u.SelfCPU)/float64(rows)*50000*3, "cpu-s/50k-jobs")
}

// seedFileDeletion inserts benchJobs jobs with two instances each, all
// READY for file deletion, and writes their files.
func seedFileDeletion(b *testing.B, st *store.Store, appID int64, prefix, download, upload string, fan int) {
	b.Helper()
	const chunk = 500
	// Done long before their deadline, as in the paper's benchmark: their
	// upload certificates still hold, so outputs become tombstones.
	deadline := time.Now().Add(7 * 24 * time.Hour).Unix()
	write := func(root, name string) {
		p, err := fanout.Path(root, name, fan)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("bench file "+name), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for start := 0; start < benchJobs; start += chunk {
		var wq strings.Builder
		var wargs []any
		wq.WriteString(`INSERT INTO workunit (create_time, appid, name, xml_doc, file_delete_state, min_quorum, target_nresults) VALUES `)
		for j := start; j < start+chunk; j++ {
			name := fmt.Sprintf("%s_wu%d", prefix, j)
			doc, err := jobxml.FormatWorkunit(jobxml.Workunit{Inputs: []jobxml.InputFile{{Name: name + "_in", OpenName: "in", Nbytes: 16}}})
			if err != nil {
				b.Fatal(err)
			}
			if j > start {
				wq.WriteString(",")
			}
			wq.WriteString("(1, ?, ?, ?, ?, 2, 2)")
			wargs = append(wargs, appID, name, doc, int(state.FileDeleteReady))
			write(download, name+"_in")
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
		rq.WriteString(`INSERT INTO result (create_time, workunitid, server_state, outcome, name, xml_doc_in, file_delete_state, report_deadline) VALUES `)
		for j := start; j < start+chunk; j++ {
			for k := 0; k < 2; k++ {
				name := fmt.Sprintf("%s_wu%d_%d", prefix, j, k)
				doc, err := jobxml.FormatResult(storetest.Outputs(name, []string{"out"}, 1e6))
				if err != nil {
					b.Fatal(err)
				}
				if len(rargs) > 0 {
					rq.WriteString(",")
				}
				rq.WriteString("(1, ?, ?, ?, ?, ?, ?, ?)")
				rargs = append(rargs, first+int64(j-start), int(state.ServerOver), int(state.OutcomeSuccess), name, doc, int(state.FileDeleteReady), deadline)
				write(upload, jobxml.OutputName(name, 0))
			}
		}
		if _, err := st.DB().Exec(rq.String(), rargs...); err != nil {
			b.Fatal(err)
		}
	}
}
