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
		{noTransition, int(state.NoTransition)},
		{assimilateReady, int(state.AssimilateReady)},
		{validateInit, int(state.ValidateInit)},
		{validateInconclusive, int(state.ValidateInconclusive)},
	} {
		if got, err := strconv.Atoi(tt.lit); err != nil || got != tt.want {
			t.Errorf("SQL literal %q, want %d", tt.lit, tt.want)
		}
	}
}
