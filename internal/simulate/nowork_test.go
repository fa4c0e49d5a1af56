package simulate

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// TestNoWorkBuildsNoDebt is property 4, first half: a project that has no
// work for the whole run builds up no debt. On every host, after every
// wake-up, its long-term debt (seed 001) and version-4 debt (seed 000) are
// at most 0, and the projects that do have work split the CPU by their
// relative shares (50:30 of the 80 they hold between them).
func TestNoWorkBuildsNoDebt(t *testing.T) {
	t.Parallel()
	for _, strategy := range []string{"edf", "debt"} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			sc := threeProjects(60, 1, strategy)
			sc.Projects[2].Server.NoWork = []Window{{Start: 0, End: sc.Duration}}
			var maxLTD, maxDebt float64
			_, r := simulate(t, sc, runOptions{afterWake: func(h *host, now float64) {
				for k, p := range h.policy.Projects {
					if h.projects[k] == 2 {
						maxLTD = max(maxLTD, p.LTD)
						maxDebt = max(maxDebt, p.Debt)
					}
				}
			}})
			alpha, beta, gamma := r.Projects[0], r.Projects[1], r.Projects[2]
			rel := alpha.CPUSeconds / (alpha.CPUSeconds + beta.CPUSeconds)
			t.Logf("%s: gamma got %.0f CPU s, %d no-work replies, max LTD %.3g, max debt %.3g; alpha's part of alpha+beta %.4f (want 0.625); utilisation %.4f",
				strategy, gamma.CPUSeconds, gamma.NoWorkReplies, maxLTD, maxDebt, rel, r.Totals.CPUUtilisation)
			if gamma.NoWorkReplies == 0 || gamma.CPUSeconds != 0 {
				t.Fatalf("premise broken: gamma got %d no-work replies and %.0f CPU seconds; want > 0 and 0", gamma.NoWorkReplies, gamma.CPUSeconds)
			}
			if maxLTD > 1e-6 {
				t.Errorf("%s: a host's long-term debt to the project without work reached %.3g CPU s; want <= 0", strategy, maxLTD)
			}
			if maxDebt > 1e-6 {
				t.Errorf("%s: a host's version-4 debt to the project without work reached %.3g CPU s; want <= 0", strategy, maxDebt)
			}
			if math.Abs(rel-0.625) > 0.03 {
				t.Errorf("%s: alpha got %.4f of the CPU alpha and beta shared; want 0.625 ± 0.03 (50:30)", strategy, rel)
			}
			if r.Totals.CPUUtilisation < 0.97 {
				t.Errorf("%s: utilisation %.4f with two projects that have work; want >= 0.97", strategy, r.Totals.CPUUtilisation)
			}
		})
	}
}

// TestReturningWorkTakesNoMoreThanShare is property 4, second half: a
// project without work for the first day has no debt to collect when its
// work returns, so it climbs back to its share and does not stay above it.
// Had it built debt for that day it would be owed a day of its share (24
// hour-fractions x 0.2 = 4.8) and would take whole CPUs for hours. Wanted:
// at most 3 hours after its return in which it gets more than its share +
// 0.05; its excess over its share, summed over those hours, at most a tenth
// of that day's debt; and within 0.03 of its share over the last 12 hours.
func TestReturningWorkTakesNoMoreThanShare(t *testing.T) {
	t.Parallel()
	for _, strategy := range []string{"edf", "debt"} {
		for _, seed := range []uint64{1, 2} {
			t.Run(fmt.Sprintf("%s/seed=%d", strategy, seed), func(t *testing.T) {
				t.Parallel()
				sc := threeProjects(60, seed, strategy)
				back := 24 * hour
				sc.Projects[2].Server.NoWork = []Window{{Start: 0, End: back}}
				// The no-work back-off would keep some hosts away for up to
				// a day after the work returns; cap it so the return is seen.
				sc.WorkFetchBackoff = DurationRange{Min: Duration(10 * time.Minute), Max: 2 * hour}
				_, r := simulate(t, sc, runOptions{})
				g := projectIndex(t, r, "gamma")
				share := r.Projects[g].ResourceShare
				dayOfDebt := back.Seconds() / 3600 * share
				var peak, peakAt, excess, lateSum, lateN float64
				hoursOver := 0
				for _, smp := range r.Series {
					if smp.Time <= back.Seconds() {
						continue
					}
					x := smp.Shares[g]
					if x > peak {
						peak, peakAt = x, smp.Time
					}
					excess += max(0, x-share)
					if x > share+0.05 {
						hoursOver++
					}
					if smp.Time > sc.Duration.Seconds()-12*3600 {
						// Every hour of the run has about the same capacity,
						// so the mean of the hourly fractions is the share.
						lateSum += x
						lateN++
					}
				}
				late := lateSum / lateN
				t.Logf("%s seed %d: gamma's share %.3f; after its work returned: hourly peak %.3f at %.0fh, %d hours above share+0.05, excess %.3f hour-fractions (a day of debt: %.1f), mean over the last 12h %.3f",
					strategy, seed, share, peak, peakAt/3600, hoursOver, excess, dayOfDebt, late)
				if hoursOver > 3 {
					t.Errorf("%s seed %d: gamma got more than its share %.3f + 0.05 in %d hours after its work returned; want at most 3", strategy, seed, share, hoursOver)
				}
				if excess > dayOfDebt/10 {
					t.Errorf("%s seed %d: gamma took %.3f hour-fractions above its share after its work returned; want at most %.3f (a tenth of a day's debt)",
						strategy, seed, excess, dayOfDebt/10)
				}
				if math.Abs(late-share) > 0.03 {
					t.Errorf("%s seed %d: gamma's mean share over the last 12h %.3f; want its share %.3f ± 0.03", strategy, seed, late, share)
				}
			})
		}
	}
}
