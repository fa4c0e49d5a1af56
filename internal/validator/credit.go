package validator

import (
	"slices"

	"github.com/taskserver/taskserver/internal/store"
)

// CobblestonesPerFpop is BOINC's credit scale: 200 credits (cobblestones)
// for a day of a 1 GFLOPS computer, i.e. 86400e9 floating-point operations.
const CobblestonesPerFpop = 200 / 86400e9

// Credit is the credit granted for a valid instance of a job estimated at
// fpopsEst floating-point operations.
func Credit(fpopsEst float64) float64 { return fpopsEst * CobblestonesPerFpop }

// KnownCreditPolicy reports whether policy is an app.credit_policy this
// validator understands ("" is the default, fpops).
func KnownCreditPolicy(policy string) bool {
	switch policy {
	case "", store.CreditFpops, store.CreditFixed, store.CreditMedian:
		return true
	}
	return false
}

// GrantedCredit is the credit each valid instance of job wu gets when its
// canonical instance is found, under the app's credit policy:
//   - fpops (also "" and any unknown policy): Credit(rsc_fpops_est);
//   - fixed: the job's fixed_credit, or fpops when that is 0;
//   - median: the median of claims, the claimed credit of the valid
//     instances, leaving out zero claims (an instance that claimed nothing
//     has no say), or fpops when none is left. With a quorum of one the
//     single claim stands: median suits apps whose jobs are replicated.
func GrantedCredit(policy string, wu store.Workunit, claims []float64) float64 {
	switch policy {
	case store.CreditFixed:
		if wu.FixedCredit > 0 {
			return wu.FixedCredit
		}
	case store.CreditMedian:
		var pos []float64
		for _, c := range claims {
			if c > 0 {
				pos = append(pos, c)
			}
		}
		if len(pos) > 0 {
			return Median(pos)
		}
	}
	return Credit(wu.RscFpopsEst)
}

// Median returns the median of xs (the mean of the middle two for an even
// count), 0 for none. xs is not changed.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
