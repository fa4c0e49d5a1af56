package workgenerator_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/workgenerator"
)

// countingStore counts backlog counts.
type countingStore struct {
	*store.Store
	counts int
}

func (c *countingStore) WorkunitCountBacklog(ctx context.Context, appID int64, now int64) (store.Backlog, error) {
	c.counts++
	return c.Store.WorkunitCountBacklog(ctx, appID, now)
}

func TestBacklogCountedOnceWhileFillingALargeShortfall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := &countingStore{Store: b.st}
	clock := func() time.Time { return b.now }
	// Target 20 instances, 2 per job, 3 jobs per pass: after a count of 0,
	// the bound (3 jobs of at most 3 instances each per pass) leaves room for
	// a full batch twice, then a count decides the last passes.
	cfg := workgenerator.Config{App: "demo", UnsentTarget: 20, Mod: 1, Batch: 3,
		CounterFile: workgenerator.CounterPath(b.projectDir, "demo"), Params: jobs.DefaultParams()}
	svc, err := workgenerator.New(cfg, workgenerator.Deps{Store: cs, Creator: jobs.NewCreator(cs, b.downloadDir, fan, clock), Now: clock})
	if err != nil {
		t.Fatalf("workgenerator.New: %v", err)
	}
	var made []int
	for {
		n, err := svc.RunOnce(context.Background())
		if err != nil {
			t.Fatalf("RunOnce: %v", err)
		}
		made = append(made, n)
		if n == 0 {
			break
		}
	}
	total := 0
	for _, n := range made {
		total += n
	}
	if total != 10 {
		t.Errorf("jobs created = %d over passes %v, want 10: target 20 instances, 2 each", total, made)
	}
	if cs.counts >= len(made) {
		t.Errorf("backlog counted %d times in %d passes, want fewer: the bound stands in while a full batch is short",
			cs.counts, len(made))
	}
	// Past recountAfter, a pass counts again even when short.
	if _, err := b.st.DB().Exec(`DELETE FROM workunit`); err != nil {
		t.Fatalf("delete jobs: %v", err)
	}
	before := cs.counts
	b.now = b.now.Add(11 * time.Second)
	if _, err := svc.RunOnce(context.Background()); err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	if cs.counts != before+1 {
		t.Errorf("pass after the count aged: %d counts, want %d", cs.counts, before+1)
	}
}
