package validator

import (
	"math"
	"slices"

	"github.com/taskserver/taskserver/internal/row"
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
	case "", row.CreditFpops, row.CreditFixed, row.CreditMedian:
		return true
	}
	return false
}

// HistoryFactor bounds a claim by the host's record: a host may claim at
// most this many times what its own validated work has been worth per
// estimated FLOP (see ClaimBound). Four leaves room for the spread between
// honest hosts (a claim is CPU time times the host's benchmark, and apps
// reach different shares of the benchmark on different hosts) while a claim
// a million times the job's worth is cut.
const HistoryFactor = 4

// Claim is the claimed credit of one valid instance with its host's record.
type Claim struct {
	// Credit is what the host claimed (result.claimed_credit).
	Credit float64
	// HostRate is what the host's recent validated work was worth per
	// estimated FLOP (see HostRate); 0 when it has no record.
	HostRate float64
}

// ClaimBound is the most a claim for job wu counts for, from a host whose
// record is hostRate (see HostRate):
//   - what the job can cost: Credit(rsc_fpops_bound), since the client
//     aborts a task that exceeds its FLOP bound (or the estimate, if the
//     bound is below it);
//   - the host's history: HistoryFactor times the larger of the host's rate
//     and 1, times Credit(rsc_fpops_est). A host without a record (a fresh
//     host id costs a cheater nothing) is held to HistoryFactor times the
//     estimate; a host whose work has been worth more than its estimates,
//     confirmed by other hosts' claims, may claim more.
//
// With neither an estimate nor a bound there is no bound (+Inf).
func ClaimBound(wu row.Workunit, hostRate float64) float64 {
	bound := math.Inf(1)
	if fb := max(wu.RscFpopsBound, wu.RscFpopsEst); fb > 0 {
		bound = Credit(fb)
	}
	if wu.RscFpopsEst > 0 {
		bound = min(bound, HistoryFactor*max(hostRate, 1)*Credit(wu.RscFpopsEst))
	}
	return bound
}

// HostRate is a host's record for ClaimBound: the median, over its recent
// valid instances, of granted credit divided by Credit(rsc_fpops_est) of
// their job. Granted, not claimed, credit: a grant under the median policy
// was checked against other hosts' claims (and bounded), so a cheater
// cannot build a record by claiming. Jobs without an estimate say
// nothing; no record is 0.
func HostRate(grants []row.HostGrant) float64 {
	var rates []float64
	for _, g := range grants {
		if g.RscFpopsEst > 0 {
			rates = append(rates, g.GrantedCredit/Credit(g.RscFpopsEst))
		}
	}
	return Median(rates)
}

// GrantedCredit is the credit each valid instance of job wu gets when its
// canonical instance is found, under the app's credit policy:
//   - fpops (also "" and any unknown policy): Credit(rsc_fpops_est);
//   - fixed: the job's fixed_credit, or fpops when that is 0;
//   - median: from the claims of the valid instances, each first cut to
//     its ClaimBound, leaving out zero claims (an instance that claimed
//     nothing has no say): one claim stands; of two, the lower, as BOINC's
//     median_mean_credit granted (with two, the median is their mean and
//     either host alone would set it); of three or more, the median. With
//     no claim left, fpops.
func GrantedCredit(policy string, wu row.Workunit, claims []Claim) float64 {
	switch policy {
	case row.CreditFixed:
		if wu.FixedCredit > 0 {
			return wu.FixedCredit
		}
	case row.CreditMedian:
		var pos []float64
		for _, c := range claims {
			if c.Credit > 0 {
				pos = append(pos, min(c.Credit, ClaimBound(wu, c.HostRate)))
			}
		}
		switch len(pos) {
		case 0:
		case 2:
			return min(pos[0], pos[1])
		default:
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
