package validator

import (
	"testing"

	"github.com/taskserver/taskserver/internal/store"
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
	// A job of one day of a 1 GFLOPS computer: 200 credits by its estimate.
	day := store.Workunit{RscFpopsEst: 86400e9}
	fixed := store.Workunit{RscFpopsEst: 86400e9, FixedCredit: 7}
	tests := []struct {
		name   string
		policy string
		wu     store.Workunit
		claims []float64
		want   float64
	}{
		{"fpops: from the estimate, claims ignored", store.CreditFpops, day, []float64{1, 2}, 200},
		{"empty policy is fpops", "", day, []float64{1}, 200},
		{"unknown policy is fpops", "bogus", day, []float64{1}, 200},
		{"fixed: the job's fixed credit", store.CreditFixed, fixed, []float64{1, 2}, 7},
		{"fixed without fixed_credit falls back to fpops", store.CreditFixed, day, nil, 200},
		{"median of an odd count", store.CreditMedian, day, []float64{30, 10, 20}, 20},
		{"median of an even count: mean of the middle two", store.CreditMedian, day, []float64{40, 10, 30, 20}, 25},
		{"median of one claim", store.CreditMedian, day, []float64{12}, 12},
		{"median leaves out zero claims", store.CreditMedian, day, []float64{0, 10, 0, 30}, 20},
		{"median with all claims zero falls back to fpops", store.CreditMedian, day, []float64{0, 0}, 200},
		{"median without claims falls back to fpops", store.CreditMedian, day, nil, 200},
		{"median is not pulled by one huge claim", store.CreditMedian, day, []float64{10, 11, 1e9}, 11},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := GrantedCredit(tt.policy, tt.wu, tt.claims); got != tt.want {
				t.Errorf("GrantedCredit(%q, fixed %g, claims %v) = %g, want %g", tt.policy, tt.wu.FixedCredit,
					tt.claims, got, tt.want)
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
