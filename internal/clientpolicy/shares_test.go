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

// TestNoWorkProjectBacksOff: a project whose server never has work is
// asked less and less often (the no-work back-off doubles), builds no
// long-term debt, and the other projects fill the CPUs it leaves idle in
// the ratio of their shares.
func TestNoWorkProjectBacksOff(t *testing.T) {
	const twoDays = 2 * 86400
	for _, st := range []Strategy{StrategyDebt, StrategyEDF} {
		for seed := uint64(1); seed <= 3; seed++ {
			rng := rand.New(rand.NewPCG(seed, 9))
			projects := threeProjects()
			h := NewHost(4, 1, Config{Strategy: st}, projects)
			d := newTestDriver(h, rng, mixedTasks(rng, 14*86400))
			d.noWork = func(p *Project, now float64) bool { return p.Name == "C" }
			d.run(twoDays)
			util := d.busy / (twoDays * 4)
			ab := d.cpu[projects[0]] / (d.cpu[projects[0]] + d.cpu[projects[1]])
			t.Logf("%s seed %d: RPCs to C %d (no-work replies %d, back-off until %.0f s); utilisation %.4f; A/(A+B) %.4f; LTD A %.0f B %.0f C %.0f",
				st, seed, d.rpcsTo[projects[2]], projects[2].NoWorkReplies, projects[2].WorkFetchAt, util, ab,
				projects[0].LTD, projects[1].LTD, projects[2].LTD)
			// Back-offs of 600 s doubling to a day at least x0.5: at most
			// 12 requests fit into two days.
			if n := d.rpcsTo[projects[2]]; n > 12 {
				t.Errorf("%s seed %d: %d RPCs to a project without work", st, seed, n)
			}
			if projects[2].LTD > 0 {
				t.Errorf("%s seed %d: C's LTD %v > 0", st, seed, projects[2].LTD)
			}
			if util < 0.99 {
				t.Errorf("%s seed %d: utilisation %.4f", st, seed, util)
			}
			if ab < 0.605 || ab > 0.645 {
				t.Errorf("%s seed %d: A got %.4f of A+B, want 0.625 ± 0.02", st, seed, ab)
			}
		}
	}
}

// TestEDFWithTightDeadlinesKeepsShares: project A's deadlines are shorter
// than its work buffer takes at its share, so EDF runs it ahead of its
// share; the work fetch then stops asking it (it is overworked) until the
// others have caught up. No deadline is missed and the shares hold within
// a few percent over two days.
func TestEDFWithTightDeadlinesKeepsShares(t *testing.T) {
	const twoDays = 2 * 86400
	for seed := uint64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewPCG(seed, 13))
		projects := threeProjects()
		h := NewHost(4, 1, Config{Strategy: StrategyEDF, ConnectPeriod: 8 * 3600}, projects)
		slack := map[string]float64{"A": 10 * 3600, "B": 4 * 86400, "C": 4 * 86400}
		tasks := mixedTasks(rng, 0)
		d := newTestDriver(h, rng, func(p *Project, now float64) *Task {
			t := tasks(p, now)
			t.Deadline = now + slack[p.Name]
			return t
		})
		d.run(twoDays)
		errs, worst := shareErrors(projects, d.cpu)
		t.Logf("seed %d: share error A %+.4f B %+.4f C %+.4f; missed %d of %d; rpcs %d; LTD A %.0f B %.0f C %.0f",
			seed, errs[0], errs[1], errs[2], d.missed, d.finished, d.rpcs, projects[0].LTD, projects[1].LTD, projects[2].LTD)
		if worst > 0.05 {
			t.Errorf("seed %d: share error %.4f > 0.05", seed, worst)
		}
		if d.missed > 0 || d.unfinishedLate() > 0 {
			t.Errorf("seed %d: %d deadlines missed, %d unfinished past their deadlines", seed, d.missed, d.unfinishedLate())
		}
	}
}
