package clientpolicy

import (
	"math/rand/v2"
	"testing"
)

// TestSharesConverge runs a host attached to three projects (50/30/20)
// with endless work of mixed task lengths for two simulated days under
// the preemptive strategies: each project's part of the CPU seconds must
// be within 2% of its share.
func TestSharesConverge(t *testing.T) {
	const twoDays = 2 * 86400
	for _, st := range []Strategy{StrategyDebt, StrategyEDF} {
		for _, sc := range []struct {
			ncpus int
			af    float64
		}{{1, 1}, {4, 1}, {8, 0.6}, {2, 0.8}} {
			for seed := uint64(1); seed <= 3; seed++ {
				rng := rand.New(rand.NewPCG(seed, 42))
				projects := threeProjects()
				h := NewHost(sc.ncpus, sc.af, Config{Strategy: st}, projects)
				d := newTestDriver(h, rng, mixedTasks(rng, 14*86400))
				d.run(twoDays)
				errs, worst := shareErrors(projects, d.cpu)
				util := d.busy / (twoDays * float64(sc.ncpus) * sc.af)
				t.Logf("%-4s ncpus=%d af=%.1f seed=%d: share error A %+.4f B %+.4f C %+.4f; utilisation %.4f; rpcs %d; missed %d",
					st, sc.ncpus, sc.af, seed, errs[0], errs[1], errs[2], util, d.rpcs, d.missed)
				if worst > 0.02 {
					t.Errorf("%s ncpus=%d af=%.1f seed=%d: share error %.4f > 0.02", st, sc.ncpus, sc.af, seed, worst)
				}
				if util < 0.99 {
					t.Errorf("%s ncpus=%d af=%.1f seed=%d: utilisation %.4f, CPUs idle with endless work", st, sc.ncpus, sc.af, seed, util)
				}
			}
		}
	}
}
