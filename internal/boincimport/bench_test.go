package boincimport_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/boincimport"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/boinctest"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// BenchmarkImportBOINC times `taskctl import boinc` of a generated project
// of BOINC_IMPORT_USERS users (default 10,000) and as many hosts, a team
// per 50 users and a job of each in-flight kind per 100 users (so 3 jobs
// and 5 instances in flight per 100 users), plus as many finished jobs.
// Each iteration imports into a fresh database of ours; generation is not
// timed. Run with -benchtime 1x:
//
//	BOINC_IMPORT_USERS=1000000 go test -run '^$' -bench ImportBOINC -benchtime 1x -timeout 2h ./internal/boincimport/
func BenchmarkImportBOINC(b *testing.B) {
	storetest.SkipWithoutServer(b)
	n := 10000
	if v := os.Getenv("BOINC_IMPORT_USERS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 100 {
			b.Fatalf("BOINC_IMPORT_USERS=%q: want a number of at least 100", v)
		}
	}
	p := boinctest.Project{Users: n, Hosts: n, Teams: n / 50, Jobs: n / 100, Finished: n / 100, Now: 1_700_000_000,
		DownloadURL: oldDownloadURL, UploadURL: oldUploadURL, Fanout: 1024, DownloadDir: b.TempDir()}
	dsn, name := boinctest.NewDatabase(b)
	ctx := context.Background()
	start := time.Now()
	if err := boinctest.Fill(ctx, dsn, p); err != nil {
		b.Fatal(err)
	}
	b.Logf("generated %d users, %d hosts, %d teams, %d jobs in flight in %.1fs", p.Users, p.Hosts, p.Teams, 3*p.Jobs, time.Since(start).Seconds())
	src, err := store.OpenBoinc(ctx, boinctest.ReadOnlyDSN(b, dsn, name))
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		st := storetest.New(b)
		im, err := boincimport.New(boincimport.Config{OldDownloadURL: oldDownloadURL, OldDownloadDir: p.DownloadDir, DownloadDir: b.TempDir(),
			Fanout: 1024, Progress: os.Stderr}, src, st)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		if _, err := im.Run(ctx); err != nil {
			b.Fatal(err)
		}
		took := time.Since(t0)
		b.StopTimer()
		if cs, err := boincimport.Verify(ctx, src, st); err != nil {
			b.Fatalf("verify: %v\n%s", err, boincimport.FormatComparisons(cs))
		}
		b.ReportMetric(took.Seconds(), "s/import")
		b.ReportMetric(float64(2*n)/took.Seconds(), "users+hosts/s")
		b.StartTimer()
	}
}
