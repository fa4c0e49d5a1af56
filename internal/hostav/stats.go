package hostav

import "math"

// addSample is the statistics (count, mean, variance, median estimate) of
// et after one more sample x > 0. Mean and variance are Welford's running
// ones (the population variance), exact and stable in one pass.
//
// The median cannot be kept exactly in one column, so it is a stochastic
// approximation (Robbins–Monro for the 0.5 quantile) run on log(x): the
// median of log(x) is the log of the median, and in log space a step is a
// ratio, the same for a fast host and a slow one. Each sample moves the
// estimate a step towards itself, never past it. The step is 1.5·s/n, s the
// spread of the samples seen so far (taken from the coefficient of
// variation as a log-normal spread): 1/n is the rate that converges
// fastest, and 1.5·s is close to the gain that is optimal for a sign-based
// quantile estimate, 1/(2·density at the median) = 1.25·s for a
// log-normal. With it the estimate is about as close as the exact sample
// median (TestMedianConverges). n stops growing at medianWindow, so the
// estimate keeps following a host whose speed changes (a new driver, a
// new GPU) instead of freezing. Heavy tails inflate the spread, which only
// makes the steps larger; the sign of a sample, not its size, decides the direction, so an
// outlier moves the median no more than any other sample. The first sample
// is the first estimate. (P², the other usual choice, needs five markers: a
// column each.)
func addSample(n int, avg, variance, median, x float64) (int, float64, float64, float64) {
	if n <= 0 || median <= 0 {
		return 1, x, 0, x
	}
	n1 := n + 1
	d := x - avg
	avg += d / float64(n1)
	// Welford's M2 is variance*n; carried as the population variance.
	variance = (variance*float64(n) + d*(x-avg)) / float64(n1)

	spread := medianSpreadMin
	if avg > 0 {
		cv2 := variance / (avg * avg)
		spread = math.Min(math.Max(math.Sqrt(math.Log1p(cv2)), medianSpreadMin), medianSpreadMax)
	}
	step := medianStepScale * spread / float64(min(n1, medianWindow))
	lm, lx := math.Log(median), math.Log(x)
	switch {
	case lx > lm:
		lm = math.Min(lm+step, lx)
	case lx < lm:
		lm = math.Max(lm-step, lx)
	}
	return n1, avg, variance, math.Exp(lm)
}

// Bounds of the median estimate's step scale, in log units: a host whose
// runs all take the same time still corrects a first sample that was off
// by a few percent, and one wildly spread sample set does not throw the
// estimate across orders of magnitude.
const (
	medianSpreadMin = 0.05
	medianSpreadMax = 1.5
	medianStepScale = 1.5
	// medianWindow is the sample count after which the step stays
	// constant: the last few hundred results weigh most.
	medianWindow = 200
)
