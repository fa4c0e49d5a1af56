package validator

import (
	"math"
	"testing"

	"github.com/taskserver/taskserver/internal/row"
)

func TestCredit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ fpops, want float64 }{{0, 0}, {86400e9, 200}, {43200e9, 100}} {
		if got := Credit(tt.fpops); got != tt.want {
			t.Errorf("Credit(%g) = %g, want %g", tt.fpops, got, tt.want)
		}
	}
}

func TestGrantedCredit(t *testing.T) {
	t.Parallel()
	// A job of one day of a 1 GFLOPS computer: 200 credits by its estimate,
	// 2,000 by its FLOP bound.
	day := row.Workunit{RscFpopsEst: 86400e9, RscFpopsBound: 864000e9}
	fixed := row.Workunit{RscFpopsEst: 86400e9, FixedCredit: 7}
	tests := []struct {
		name   string
		policy string
		wu     row.Workunit
		claims []float64
		want   float64
	}{
		{"fpops: from the estimate, claims ignored", row.CreditFpops, day, []float64{1, 2}, 200},
		{"empty policy is fpops", "", day, []float64{1}, 200},
		{"unknown policy is fpops", "bogus", day, []float64{1}, 200},
		{"fixed: the job's fixed credit", row.CreditFixed, fixed, []float64{1, 2}, 7},
		{"fixed without fixed_credit falls back to fpops", row.CreditFixed, day, nil, 200},
		{"median of an odd count", row.CreditMedian, day, []float64{30, 10, 20}, 20},
		{"median of four: mean of the middle two", row.CreditMedian, day, []float64{40, 10, 30, 20}, 25},
		{"median of one claim", row.CreditMedian, day, []float64{12}, 12},
		{"two claims: the lower, as BOINC's median_mean_credit", row.CreditMedian, day, []float64{30, 10}, 10},
		{"two claims, one huge: the lower", row.CreditMedian, day, []float64{2.3e13, 2.3}, 2.3},
		{"median leaves out zero claims", row.CreditMedian, day, []float64{0, 10, 0, 30}, 10},
		{"median with all claims zero falls back to fpops", row.CreditMedian, day, []float64{0, 0}, 200},
		{"median without claims falls back to fpops", row.CreditMedian, day, nil, 200},
		{"median is not pulled by one huge claim", row.CreditMedian, day, []float64{10, 11, 1e9}, 11},
		{"one huge claim is cut to the job's FLOP bound", row.CreditMedian, row.Workunit{RscFpopsEst: 86400e9,
			RscFpopsBound: 172800e9}, []float64{2.3e13}, 400},
		{"two huge claims are cut to the job's FLOP bound", row.CreditMedian, row.Workunit{RscFpopsEst: 86400e9,
			RscFpopsBound: 172800e9}, []float64{2.3e13, 1e9}, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			claims := make([]Claim, len(tt.claims))
			for i, c := range tt.claims {
				claims[i] = Claim{Credit: c}
			}
			if got := GrantedCredit(tt.policy, tt.wu, claims); got != tt.want {
				t.Errorf("GrantedCredit(%q, fixed %g, claims %v) = %g, want %g", tt.policy, tt.wu.FixedCredit,
					tt.claims, got, tt.want)
			}
		})
	}
}

func TestClaimBound(t *testing.T) {
	t.Parallel()
	// Estimate 200 credits, FLOP bound 2,000 (the default ten times).
	day := row.Workunit{RscFpopsEst: 86400e9, RscFpopsBound: 864000e9}
	tests := []struct {
		name     string
		wu       row.Workunit
		hostRate float64
		want     float64
	}{
		{"no record: HistoryFactor times the estimate", day, 0, HistoryFactor * 200},
		{"a record below the estimate still allows HistoryFactor times the estimate", day, 0.5, HistoryFactor * 200},
		{"a record above the estimate raises the bound", day, 2, HistoryFactor * 2 * 200},
		{"never above the job's FLOP bound", day, 100, 2000},
		{"a FLOP bound below the estimate: the estimate", row.Workunit{RscFpopsEst: 86400e9, RscFpopsBound: 1}, 0, 200},
		{"no estimate: only the FLOP bound", row.Workunit{RscFpopsBound: 86400e9}, 0, 200},
		{"neither: no bound", row.Workunit{}, 0, math.Inf(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := ClaimBound(tt.wu, tt.hostRate); got != tt.want {
				t.Errorf("ClaimBound(est %g, bound %g, host rate %g) = %g, want %g", tt.wu.RscFpopsEst,
					tt.wu.RscFpopsBound, tt.hostRate, got, tt.want)
			}
		})
	}
}

func TestGrantedCreditCutsClaimAboveHostHistory(t *testing.T) {
	t.Parallel()
	day := row.Workunit{RscFpopsEst: 86400e9, RscFpopsBound: 864000e9}
	// A host whose validated work was worth its estimate claims 1,900
	// credits for a 200-credit job: cut to HistoryFactor times 200. The
	// same claim from a host whose work has been worth twice the estimate
	// is cut less.
	if got, want := GrantedCredit(row.CreditMedian, day, []Claim{{Credit: 1900, HostRate: 1}}), HistoryFactor*200.0; got != want {
		t.Errorf("claim 1900 from a host at rate 1 granted %g, want %g", got, want)
	}
	if got, want := GrantedCredit(row.CreditMedian, day, []Claim{{Credit: 1900, HostRate: 2}}), HistoryFactor*400.0; got != want {
		t.Errorf("claim 1900 from a host at rate 2 granted %g, want %g", got, want)
	}
	// Three claims: the cut cheater's claim is still the largest, so the
	// median is an honest one.
	claims := []Claim{{Credit: 190, HostRate: 1}, {Credit: 210, HostRate: 1}, {Credit: 1e12, HostRate: 1}}
	if got := GrantedCredit(row.CreditMedian, day, claims); got != 210 {
		t.Errorf("claims 190, 210, 1e12 granted %g, want 210", got)
	}
}

func TestHostRate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		grants []row.HostGrant
		want   float64
	}{
		{"no record", nil, 0},
		{"median of granted over the estimate's credit", []row.HostGrant{
			{GrantedCredit: 200, RscFpopsEst: 86400e9}, {GrantedCredit: 100, RscFpopsEst: 86400e9},
			{GrantedCredit: 800, RscFpopsEst: 86400e9}}, 1},
		{"jobs without an estimate say nothing", []row.HostGrant{{GrantedCredit: 5, RscFpopsEst: 0}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := HostRate(tt.grants); got != tt.want {
				t.Errorf("HostRate(%v) = %g, want %g", tt.grants, got, tt.want)
			}
		})
	}
}

func TestMedianLeavesInputAlone(t *testing.T) {
	t.Parallel()
	xs := []float64{3, 1, 2}
	if got := Median(xs); got != 2 || xs[0] != 3 || xs[1] != 1 || xs[2] != 2 {
		t.Errorf("Median(3 1 2) = %g and input %v, want 2 and input unchanged", got, xs)
	}
	if got := Median(nil); got != 0 {
		t.Errorf("Median(nil) = %g, want 0", got)
	}
}
