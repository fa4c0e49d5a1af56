package workgenerator_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/store/storetest"
	"github.com/taskserver/taskserver/internal/workgenerator"
)

// benchJobs is the number of jobs each benchmark iteration creates.
const benchJobs = 5000

// BenchmarkCreateJobs: the work generator creates benchJobs jobs per
// iteration in passes of 500 (the --batch default), staging their inputs:
// the demo's jobs (three inputs, one gzip'd, one shared, two outputs), and
// jobs of one input file for comparison.
func BenchmarkCreateJobs(b *testing.B) {
	storetest.SkipWithoutServer(b)
	one := workgenerator.InputJobs(func(_ context.Context, job string) ([]byte, error) { return demoapp.Input(job), nil })
	b.Run("demo", func(b *testing.B) { benchCreateJobs(b, workgenerator.DemoJobs{}) })
	b.Run("one-input", func(b *testing.B) { benchCreateJobs(b, one) })
}

func benchCreateJobs(b *testing.B, maker workgenerator.JobMaker) {
	st := storetest.New(b)
	ctx := context.Background()
	storetest.App(b, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1})
	m := storetest.NewMeter(b, st.DB().DB)
	dir := b.TempDir()
	jobsMade := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		cfg := workgenerator.Config{App: "demo", UnsentTarget: 1 << 30, TotalJobs: int64((i + 1) * benchJobs),
			Mod: 1, Batch: 500, CounterFile: workgenerator.CounterPath(dir, "demo"), Params: jobs.DefaultParams()}
		cfg.Params.MinQuorum, cfg.Params.TargetNResults = 2, 2
		svc, err := workgenerator.New(cfg, workgenerator.Deps{Store: st, Creator: jobs.NewCreator(st, filepath.Join(dir, "download"), 1024, time.Now), Jobs: maker})
		if err != nil {
			b.Fatalf("workgenerator.New: %v", err)
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
			jobsMade += n
		}
		m.Stop(b)
	}
	m.Report(b, jobsMade, "job")
}
