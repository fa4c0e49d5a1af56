package simulate

import (
	"fmt"
	"math"
	"testing"
)

// TestSharesConverge is property 1: when every project always has work,
// two simulated days give each project its resource share of the CPU,
// within 0.03 over the population and within 0.05 on nine hosts in ten,
// and keep the CPUs busy. The seed-004 strategies are held to the same
// bounds as the seed 000/001 ones.
func TestSharesConverge(t *testing.T) {
	t.Parallel()
	cases := []struct {
		strategy string
		seed     uint64
		maxError float64
	}{
		{"edf", 1, 0.03},
		{"edf", 2, 0.03},
		{"debt", 1, 0.03},
		{"debt", 2, 0.03},
		{"fair-share", 1, 0.03},
		{"wrr", 1, 0.03},
		{"iwrr", 1, 0.03},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/seed=%d", c.strategy, c.seed), func(t *testing.T) {
			t.Parallel()
			sc := threeProjects(60, c.seed, c.strategy)
			s, r := simulate(t, sc, runOptions{})
			errs := hostShareErrors(s)
			t.Logf("%s seed %d: per-host worst share error: median %.3f, 90th percentile %.3f, max %.3f",
				c.strategy, c.seed, quantile(errs, 0.5), quantile(errs, 0.9), quantile(errs, 1))
			if q := quantile(errs, 0.9); q > 0.05 {
				t.Errorf("%s seed %d: 10%% of hosts are more than %.3f off their own shares, want at most 0.05", c.strategy, c.seed, q)
			}
			for _, p := range r.Projects {
				t.Logf("%s seed %d: %s resource %.4f achieved %.4f (error %+.4f)",
					c.strategy, c.seed, p.Name, p.ResourceShare, p.AchievedShare, p.AchievedShare-p.ResourceShare)
				if d := math.Abs(p.AchievedShare - p.ResourceShare); d > c.maxError {
					t.Errorf("%s seed %d: project %s achieved %.4f of the CPU, resource share %.4f: off by %.4f, want at most %.2f",
						c.strategy, c.seed, p.Name, p.AchievedShare, p.ResourceShare, d, c.maxError)
				}
			}
			t.Logf("%s seed %d: utilisation %.4f, RPCs %d, deadlines missed %d", c.strategy, c.seed,
				r.Totals.CPUUtilisation, r.Totals.RPCs, r.Totals.DeadlinesMissed)
			if r.Totals.CPUUtilisation < 0.97 {
				t.Errorf("%s seed %d: CPU utilisation %.4f, want >= 0.97 (every project always has work)",
					c.strategy, c.seed, r.Totals.CPUUtilisation)
			}
		})
	}
}
