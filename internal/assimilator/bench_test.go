package assimilator

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
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// benchJobs is the jobs one benchmark iteration assimilates: the paper's
// 50,000 scaled down by ten.
const benchJobs = 5000

// BenchmarkAssimilate assimilates benchJobs validated jobs with the copy
// handler, as phase 4 of the paper's benchmark does (hard links, the
// upload and results directories being on one file system; and forced to
// copy, as across file systems), and with a handler
// that does nothing (what the assimilator itself costs, as the paper's
// dummy assimilator measured), and reports per job
// the statements the database server ran, its redo log writes (one per
// durable commit when commits come one at a time), its CPU and this
// process's (which includes the handler's file copies). It needs a
// database server of its own on this machine (TEST_MYSQL_DSN): the figures
// are the server's global counters.
func BenchmarkAssimilate(b *testing.B) {
	storetest.SkipWithoutServer(b)
	b.Run("copy", func(b *testing.B) {
		benchAssimilate(b, func(upload, results string) Handler {
			return &FileHandler{Dir: results, UploadDir: upload, Fanout: fanoutN}
		})
	})
	b.Run("copy-nolink", func(b *testing.B) {
		benchAssimilate(b, func(upload, results string) Handler {
			return &FileHandler{Dir: results, UploadDir: upload, Fanout: fanoutN, link: noLink}
		})
	})
	b.Run("noop", func(b *testing.B) {
		benchAssimilate(b, func(string, string) Handler { return noopHandler{} })
	})
}

// noopHandler takes every job and does nothing with it.
type noopHandler struct{}

func (noopHandler) Handle(context.Context, row.Workunit, *row.Result) error { return nil }

// benchAssimilate runs BenchmarkAssimilate with the handler newHandler
// returns for the upload and results directories.
func benchAssimilate(b *testing.B, newHandler func(upload, results string) Handler) {
	st := storetest.New(b)
	ctx := context.Background()
	appID := storetest.App(b, st, storetest.AppOptions{CreateTime: t0, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
	m := storetest.NewMeter(b, st.DB().DB)
	for i := range b.N {
		b.StopTimer()
		dir := b.TempDir()
		upload, results := filepath.Join(dir, "upload"), filepath.Join(dir, "results")
		benchJobsInsert(b, st, appID, upload, fmt.Sprintf("it%d", i))
		svc := mustNew(New(Config{App: "demo", Mod: 1, Batch: 500},
			Deps{Store: st, Handler: newHandler(upload, results), Now: func() time.Time { return time.Unix(t0+3600, 0) }}))
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
		if err := st.DB().Get(&left, `SELECT COUNT(*) FROM workunit WHERE assimilate_state <> ?`, state.AssimilateDone); err != nil {
			b.Fatal(err)
		}
		if left != 0 {
			b.Fatalf("%d jobs left unassimilated", left)
		}
	}
	m.Report(b, b.N*benchJobs, "job")
}

// benchJobsInsert inserts benchJobs jobs ready for assimilation, each with
// a canonical instance whose output file is in upload, in multi-row
// statements.
func benchJobsInsert(b *testing.B, st *store.Store, appID int64, upload, prefix string) {
	b.Helper()
	const chunk = 500
	for start := 0; start < benchJobs; start += chunk {
		end := min(start+chunk, benchJobs)
		var wuRows []string
		var wuArgs []any
		for j := start; j < end; j++ {
			wuRows = append(wuRows, "(?, ?, ?, '', 86400e9, 2, 2, ?, 200, ?)")
			wuArgs = append(wuArgs, t0, appID, fmt.Sprintf("%s_job%d", prefix, j), state.AssimilateReady, t0+86400)
		}
		res, err := st.DB().Exec(`INSERT INTO workunit (create_time, appid, name, xml_doc, rsc_fpops_est, min_quorum,
target_nresults, assimilate_state, canonical_credit, transition_time) VALUES `+strings.Join(wuRows, ", "), wuArgs...)
		if err != nil {
			b.Fatalf("insert jobs: %v", err)
		}
		first, err := res.LastInsertId() // the first id of a multi-row insert
		if err != nil {
			b.Fatal(err)
		}
		var rRows []string
		var rArgs []any
		for j := start; j < end; j++ {
			for k := range 2 {
				name := fmt.Sprintf("%s_job%d_%d", prefix, j, k)
				doc, err := jobxml.FormatResult(storetest.Outputs(name, []string{"out"}, 1e6))
				if err != nil {
					b.Fatal(err)
				}
				rRows = append(rRows, "(?, ?, ?, ?, ?, ?, ?, ?, 200)")
				rArgs = append(rArgs, t0, first+int64(j-start), name, state.ServerOver, state.OutcomeSuccess,
					state.ValidateValid, appID, doc)
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
appid, xml_doc_in, granted_credit) VALUES `+strings.Join(rRows, ", "), rArgs...); err != nil {
			b.Fatalf("insert results: %v", err)
		}
	}
	// Each job's first instance is its canonical one.
	if _, err := st.DB().Exec(`UPDATE workunit w JOIN result r ON r.workunitid = w.id AND r.name = CONCAT(w.name, '_0')
SET w.canonical_resultid = r.id WHERE w.canonical_resultid = 0`); err != nil {
		b.Fatalf("set canonical results: %v", err)
	}
}
