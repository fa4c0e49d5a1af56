package hostav

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/taskserver/taskserver/internal/row"
)

func TestRateFallsBackInOrder(t *testing.T) {
	t.Parallel()
	trusted := row.HostAppVersion{EtN: MinSamples, EtMedian: 1e-10}
	young := row.HostAppVersion{EtN: MinSamples - 1, EtMedian: 1e-10}
	for _, tc := range []struct {
		name                 string
		st                   row.HostAppVersion
		projected, benchmark float64
		want                 float64
		wantSource           Source
	}{
		{"host once MinSamples valid results", trusted, 5e9, 2e9, 1e10, SourceHost},
		{"plan class before MinSamples", young, 5e9, 2e9, 5e9, SourcePlanClass},
		{"benchmark without a projection", young, 0, 2e9, 2e9, SourceBenchmark},
		{"default without anything", row.HostAppVersion{}, 0, 0, DefaultRate, SourceDefault},
		{"a median of 0 is not trusted", row.HostAppVersion{EtN: 50}, 0, 3e9, 3e9, SourceBenchmark},
	} {
		got, src := Rate(tc.st, tc.projected, tc.benchmark)
		if math.Abs(got-tc.want) > tc.want*1e-12 || src != tc.wantSource {
			t.Errorf("%s: Rate(%+v, %g, %g) = %g, %s; want %g, %s", tc.name, tc.st, tc.projected, tc.benchmark,
				got, src, tc.want, tc.wantSource)
		}
	}
}

// TestWelfordMatchesTwoPass: the running mean and variance are the exact
// ones.
func TestWelfordMatchesTwoPass(t *testing.T) {
	t.Parallel()
	xs := []float64{3e-9, 1e-9, 4e-9, 1e-9, 5e-9, 9e-9, 2e-9, 6e-9}
	var st row.HostAppVersion
	for _, x := range xs {
		st = AddValid(st, x*1e12, 1e12, 0, 0)
	}
	var mean, v float64
	for _, x := range xs {
		mean += x / float64(len(xs))
	}
	for _, x := range xs {
		v += (x - mean) * (x - mean) / float64(len(xs))
	}
	if st.EtN != len(xs) || math.Abs(st.EtAvg-mean) > mean*1e-9 || math.Abs(st.EtVar-v) > v*1e-9 {
		t.Errorf("after %v: n %d avg %g var %g; want %d, %g, %g", xs, st.EtN, st.EtAvg, st.EtVar, len(xs), mean, v)
	}
}

// run feeds n samples of gen into fresh statistics.
func run(n int, gen func() float64) row.HostAppVersion {
	var st row.HostAppVersion
	for range n {
		st = AddValid(st, gen()*1e13, 1e13, 0, 0)
	}
	return st
}

// TestMedianConverges: on log-normal samples of several spreads, the
// running median lands about as close to the true median as the exact
// median of the same samples does, and closer as samples come in.
func TestMedianConverges(t *testing.T) {
	t.Parallel()
	const trueMedian = 1e-9
	for _, sigma := range []float64{0.1, 0.5, 1, 2} {
		for _, n := range []int{MinSamples, 30, 300} {
			var ours, exact []float64
			for seed := range 100 {
				r := rand.New(rand.NewPCG(uint64(seed), uint64(n)))
				var xs []float64
				st := run(n, func() float64 {
					x := trueMedian * math.Exp(sigma*r.NormFloat64())
					xs = append(xs, x)
					return x
				})
				slices.Sort(xs)
				ours = append(ours, math.Abs(math.Log(st.EtMedian/trueMedian)))
				exact = append(exact, math.Abs(math.Log(xs[len(xs)/2]/trueMedian)))
			}
			slices.Sort(ours)
			slices.Sort(exact)
			// The typical error (median over seeds) against the exact
			// sample median's; the early estimate is allowed more.
			slack := 1.3
			if n == MinSamples {
				slack = 2
			}
			if ours[50] > exact[50]*slack+0.01 {
				t.Errorf("sigma %g, %d samples: typical |log error| %.3f, exact median's %.3f; want at most %.1fx",
					sigma, n, ours[50], exact[50], slack)
			}
		}
	}
}

// TestMedianBeatsMeanOnHeavyTail: one run in ten is interrupted and takes 10
// to 50 times as long. The mean drifts far from the typical run; the median
// stays on it, and so Rate is the host's usual speed.
func TestMedianBeatsMeanOnHeavyTail(t *testing.T) {
	t.Parallel()
	const typical = 2e-9 // seconds per FLOP: 0.5 GFLOPS
	r := rand.New(rand.NewPCG(4, 4))
	st := run(200, func() float64 {
		x := typical * math.Exp(0.1*r.NormFloat64())
		if r.IntN(10) == 0 {
			x *= 10 + 40*r.Float64()
		}
		return x
	})
	medErr := math.Abs(st.EtMedian/typical - 1)
	meanErr := math.Abs(st.EtAvg/typical - 1)
	if medErr > 0.15 {
		t.Errorf("median %g for typical %g: off by %.0f%%, want within 15%%", st.EtMedian, typical, medErr*100)
	}
	if meanErr < 1 {
		t.Errorf("mean %g for typical %g: off by only %.0f%%; the sample is not heavy-tailed", st.EtAvg, typical,
			meanErr*100)
	}
	rate, src := Rate(st, 0, 0)
	if src != SourceHost || math.Abs(rate*typical-1) > 0.15 {
		t.Errorf("Rate = %g (%s), want about %g from the host", rate, src, 1/typical)
	}
	if rate, src := RateBy(Mean, st, 0, 0); src != SourceHost || rate != 1/st.EtAvg {
		t.Errorf("RateBy(Mean) = %g (%s), want 1/et_avg = %g from the host", rate, src, 1/st.EtAvg)
	}
}

// TestFirstSampleStartsMedian and samples that say nothing are skipped.
func TestSamplesWithoutRuntimeAreSkipped(t *testing.T) {
	t.Parallel()
	st := AddValid(row.HostAppVersion{}, 100, 1e11, 30, 0)
	if st.EtN != 1 || st.EtMedian != 1e-9 || st.EtAvg != 1e-9 || st.EtVar != 0 {
		t.Errorf("first sample: %+v, want n 1, median and mean 1e-9", st)
	}
	for _, tc := range [][2]float64{{0, 1e11}, {100, 0}, {-1, 1e11}} {
		got := AddValid(st, tc[0], tc[1], 0, 0)
		if got.EtN != 1 || got.EtMedian != st.EtMedian || got.NValid != 2 || got.ConsecutiveValid != 2 {
			t.Errorf("AddValid(elapsed %g, fpops %g) = %+v: want the et statistics unchanged, the counts up",
				tc[0], tc[1], got)
		}
	}
	if st.TurnaroundN != 1 || st.TurnaroundAvg != 30 {
		t.Errorf("turnaround: n %d avg %g, want 1, 30", st.TurnaroundN, st.TurnaroundAvg)
	}
}

// TestQuotaShrinksAndGrowsBack: a host failing every job drops to one a
// day, one less per error; valid results double it back to the project's
// quota, never above.
func TestQuotaShrinksAndGrowsBack(t *testing.T) {
	t.Parallel()
	const q = 10
	st := row.HostAppVersion{ConsecutiveValid: 7}
	var got []int
	for range 12 {
		st = AddError(st, q)
		got = append(got, st.MaxJobsPerDay)
	}
	if want := []int{9, 8, 7, 6, 5, 4, 3, 2, 1, 1, 1, 1}; !slices.Equal(got, want) {
		t.Errorf("quota after each error from unset: %v, want %v", got, want)
	}
	if st.ConsecutiveValid != 0 || st.NErrors != 12 {
		t.Errorf("after errors: consecutive_valid %d, n_errors %d; want 0, 12", st.ConsecutiveValid, st.NErrors)
	}
	got = nil
	for range 6 {
		st = AddValid(st, 10, 1e10, 60, q)
		got = append(got, st.MaxJobsPerDay)
	}
	if want := []int{2, 4, 8, 10, 10, 10}; !slices.Equal(got, want) {
		t.Errorf("quota after each valid result from 1: %v, want %v", got, want)
	}
	if st.ConsecutiveValid != 6 || st.NValid != 6 {
		t.Errorf("after valid results: consecutive_valid %d, n_valid %d; want 6, 6", st.ConsecutiveValid, st.NValid)
	}
}

func TestQuotaRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                   string
		quota, project, errors int
		shrunk, grown          int
	}{
		{"unset shrinks from the project quota", 0, 100, 1, 99, 0},
		{"above the project quota (lowered since) is capped first", 300, 100, 1, 99, 300},
		{"several errors at once", 50, 100, 20, 30, 100},
		{"never below one", 3, 100, 10, 1, 6},
		{"no project quota: nothing changes", 7, 0, 3, 7, 7},
		{"no errors: nothing changes", 7, 100, 0, 7, 14},
	} {
		if got := ShrinkQuota(tc.quota, tc.project, tc.errors); got != tc.shrunk {
			t.Errorf("%s: ShrinkQuota(%d, %d, %d) = %d, want %d", tc.name, tc.quota, tc.project, tc.errors, got, tc.shrunk)
		}
		if got := GrowQuota(tc.quota, tc.project); got != tc.grown {
			t.Errorf("%s: GrowQuota(%d, %d) = %d, want %d", tc.name, tc.quota, tc.project, got, tc.grown)
		}
	}
	// ShrinkQuota with n errors is n AddErrors.
	for quota := 0; quota <= 12; quota++ {
		for n := 0; n <= 12; n++ {
			st := row.HostAppVersion{MaxJobsPerDay: quota}
			for range n {
				st = AddError(st, 10)
			}
			if got := ShrinkQuota(quota, 10, n); got != st.MaxJobsPerDay {
				t.Errorf("ShrinkQuota(%d, 10, %d) = %d, %d AddErrors give %d", quota, n, got, n, st.MaxJobsPerDay)
			}
		}
	}
}

func TestAddInvalidEndsStreakKeepsQuota(t *testing.T) {
	t.Parallel()
	st := AddInvalid(row.HostAppVersion{ConsecutiveValid: 9, MaxJobsPerDay: 4, EtN: 3, NValid: 9})
	if st.ConsecutiveValid != 0 || st.MaxJobsPerDay != 4 || st.EtN != 3 || st.NValid != 9 || st.NErrors != 0 {
		t.Errorf("AddInvalid = %+v: want only consecutive_valid zeroed", st)
	}
}

func TestDailyLimit(t *testing.T) {
	t.Parallel()
	const today = 20000
	for _, tc := range []struct {
		name      string
		st        row.HostAppVersion
		project   int
		instances float64
		want      int
	}{
		{"unset is the project quota per instance", row.HostAppVersion{}, 10, 4, 40},
		{"jobs sent today count", row.HostAppVersion{NJobsToday: 15, Day: today}, 10, 4, 25},
		{"yesterday's jobs do not", row.HostAppVersion{NJobsToday: 15, Day: today - 1}, 10, 4, 40},
		{"shrunk quota per instance", row.HostAppVersion{MaxJobsPerDay: 3}, 10, 4, 12},
		{"a quota of one is not multiplied", row.HostAppVersion{MaxJobsPerDay: 1}, 10, 8, 1},
		{"and used up", row.HostAppVersion{MaxJobsPerDay: 1, NJobsToday: 1, Day: today}, 10, 8, 0},
		{"never negative", row.HostAppVersion{MaxJobsPerDay: 2, NJobsToday: 50, Day: today}, 10, 2, 0},
		{"GPU instances times multiplier", row.HostAppVersion{MaxJobsPerDay: 5}, 10, 2 * 3, 30},
		{"fractional instances round down", row.HostAppVersion{}, 10, 1.5, 15},
		{"at least one instance", row.HostAppVersion{}, 10, 0, 10},
		{"no project quota", row.HostAppVersion{MaxJobsPerDay: 1, NJobsToday: 9, Day: today}, 0, 1, NoLimit},
	} {
		if got := DailyLimit(tc.st, tc.project, tc.instances, today); got != tc.want {
			t.Errorf("%s: DailyLimit(%+v, %d, %g, %d) = %d, want %d", tc.name, tc.st, tc.project, tc.instances,
				today, got, tc.want)
		}
	}
}

func TestDay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ now, want int64 }{
		{0, 0}, {86399, 0}, {86400, 1}, {1_700_000_000, 19675}, {-1, -1},
	} {
		if got := Day(tc.now); got != tc.want {
			t.Errorf("Day(%d) = %d, want %d", tc.now, got, tc.want)
		}
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	if got := GeneralizedID(7, AnonNVIDIA); got != -7000003 {
		t.Errorf("GeneralizedID(7, AnonNVIDIA) = %d, want -7000003", got)
	}
	if app, res, ok := SplitGeneralizedID(GeneralizedID(7, AnonAMD)); !ok || app != 7 || res != AnonAMD ||
		AnonResourceName(res) != "ati" {
		t.Errorf("SplitGeneralizedID(GeneralizedID(7, AnonAMD)) = %d, %d (%s), %v; want 7, %d (ati), true", app, res,
			AnonResourceName(res), ok, AnonAMD)
	}
	if _, _, ok := SplitGeneralizedID(42); ok {
		t.Errorf("SplitGeneralizedID(42): ok, want a real version id")
	}
	for _, tc := range []struct{ avid, appid, want int64 }{
		{42, 7, 42},
		{0, 7, -7000002},
		{-AnonAMD, 7, -7000004},
		{-7000005, 7, -7000005},
	} {
		if got := Key(tc.avid, tc.appid); got != tc.want {
			t.Errorf("Key(%d, %d) = %d, want %d", tc.avid, tc.appid, got, tc.want)
		}
	}
}

func TestQuotaInstances(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ncpus      int
		gpus       float64
		multiplier int
		want       float64
	}{
		{8, 0, 5, 8}, {0, 0, 1, 1}, {8, 2, 5, 10}, {8, 2, 0, 2}, {8, 1, 1, 1},
	} {
		if got := QuotaInstances(tc.ncpus, tc.gpus, tc.multiplier); got != tc.want {
			t.Errorf("QuotaInstances(%d, %g, %d) = %g, want %g", tc.ncpus, tc.gpus, tc.multiplier, got, tc.want)
		}
	}
}
