package clientpolicy

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestRuntimeStatsValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		runtimes []float64
		stat     RuntimeStat
		fallback float64
		want     float64
	}{
		{"nothing completed reads the fallback (average)", nil, StatAverage, 321, 321},
		{"nothing completed reads the fallback (median)", nil, StatMedian, 321, 321},
		{"one completion is both statistics (average)", []float64{50}, StatAverage, 321, 50},
		{"one completion is both statistics (median)", []float64{50}, StatMedian, 321, 50},
		{"average of equal runtimes", []float64{10, 10, 10}, StatAverage, 0, 10},
		{"average is pulled by one huge runtime", []float64{100, 100, 100, 100, 100000}, StatAverage, 0, 20080},
		{"median ignores one huge runtime", []float64{100, 100, 100, 100, 100000}, StatMedian, 0, 100},
		{"median ignores one tiny runtime", []float64{1, 500, 500, 500, 500}, StatMedian, 0, 500},
		{"median of an even count is the middle pair's mean", []float64{4, 1, 3, 2}, StatMedian, 0, 2.5},
		{"median of an odd count is the middle value", []float64{9, 1, 5}, StatMedian, 0, 5},
		{"an unknown statistic reads as the average", []float64{1, 2, 6}, RuntimeStat("mode"), 0, 3},
		{"negative and NaN runtimes are ignored", []float64{-5, 10, math.NaN(), 20}, StatAverage, 0, 15},
		{"zero runtimes count", []float64{0, 0, 30}, StatAverage, 99, 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var s runtimeStats
			for _, r := range tc.runtimes {
				s.add(r)
			}
			if got := s.value(tc.stat, tc.fallback); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("after add(%v): value(%q, %v) = %v, want %v", tc.runtimes, tc.stat, tc.fallback, got, tc.want)
			}
		})
	}
}

// TestRuntimeStatsMedianMemoryIsBounded feeds many runtimes and checks that the history never grows past
// medianHistory and that the median is exactly that of the latest medianHistory runtimes, while the
// average still covers all of them.
func TestRuntimeStatsMedianMemoryIsBounded(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2, 3} {
		rng := rand.New(rand.NewPCG(seed, 4))
		var s runtimeStats
		var all []float64
		for i := range 5000 {
			// The runtimes drift upwards so that a stale window would show in the median.
			r := float64(i) + 1000*rng.Float64()
			s.add(r)
			all = append(all, r)
			if len(s.window) > medianHistory {
				t.Fatalf("seed %d: after %d runtimes the median history holds %d, want at most %d", seed, i+1, len(s.window), medianHistory)
			}
			if i%997 != 0 && i != 4999 {
				continue
			}
			latest := all[max(0, len(all)-medianHistory):]
			if got, want := s.value(StatMedian, 0), medianOf(latest); got != want {
				t.Fatalf("seed %d: after %d runtimes median = %v, want %v (of the latest %d)", seed, i+1, got, want, len(latest))
			}
		}
		sum := 0.0
		for _, r := range all {
			sum += r
		}
		if got, want := s.value(StatAverage, 0), sum/float64(len(all)); math.Abs(got-want) > 1e-6*want {
			t.Errorf("seed %d: average over %d runtimes = %v, want %v", seed, len(all), got, want)
		}
		if s.count() != int64(len(all)) {
			t.Errorf("seed %d: count = %d, want %d", seed, s.count(), len(all))
		}
		t.Logf("seed %d: %d runtimes, median history %d values (cap %d), median %.0f, average %.0f",
			seed, len(all), len(s.window), cap(s.window), s.value(StatMedian, 0), s.value(StatAverage, 0))
	}
}

func TestMedianOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{7}, 7},
		{[]float64{3, 1, 2}, 2},
		{[]float64{10, 0}, 5},
		{[]float64{5, 5, 1, 9, 9, 9}, 7},
	}
	for _, tc := range tests {
		in := slices.Clone(tc.in)
		if got := medianOf(in); got != tc.want {
			t.Errorf("medianOf(%v) = %v, want %v", tc.in, got, tc.want)
		}
		if !slices.Equal(in, tc.in) {
			t.Errorf("medianOf(%v) reordered its input to %v", tc.in, in)
		}
	}
}
