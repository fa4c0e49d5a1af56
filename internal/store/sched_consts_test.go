package store

import (
	"strconv"
	"testing"

	"github.com/taskserver/taskserver/internal/state"
)

func TestSchedBatchStateLiterals(t *testing.T) {
	for _, tt := range []struct {
		lit  string
		want int
	}{
		{stateUnsent, int(state.ServerUnsent)},
		{stateInProgress, int(state.ServerInProgress)},
		{stateOver, int(state.ServerOver)},
		{outcomeCouldntSend, int(state.OutcomeCouldntSend)},
	} {
		if got, err := strconv.Atoi(tt.lit); err != nil || got != tt.want {
			t.Errorf("SQL literal %q, want %d", tt.lit, tt.want)
		}
	}
}

func TestTurnaroundFoldMatchesStepByStep(t *testing.T) {
	samples := []float64{50, 200, 7}
	a, b, c := turnaroundFold(samples)
	for _, old := range []float64{0, 100} {
		want := old
		for _, s := range samples {
			want = NextAvgTurnaround(want, s)
		}
		got := c
		if old > 0 {
			got = old*a + b
		}
		if d := got - want; d > 1e-9 || d < -1e-9 {
			t.Errorf("fold from %v = %v, step by step %v", old, got, want)
		}
	}
}
