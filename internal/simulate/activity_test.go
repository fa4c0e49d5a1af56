package simulate

import (
	"math"
	"testing"
)

// Each host's work fetch runs on the active fraction it measured, which
// follows its own on/off record: near its long-run on fraction on
// average, different from it host by host, and changing during the run.
func TestActiveFractionIsMeasured(t *testing.T) {
	t.Parallel()
	sc := threeProjects(200, 3, "edf")
	seen := map[int32]map[float64]bool{}
	var diffSum float64
	var n int
	_, _ = simulate(t, sc, runOptions{afterWake: func(h *host, now float64) {
		af := h.policy.ActiveFrac
		if seen[h.index] == nil {
			seen[h.index] = map[float64]bool{}
		}
		seen[h.index][af] = true
		diffSum += af - h.onFrac
		n++
		if !(af > 0 && af <= 1) {
			t.Fatalf("host %d: active fraction %v, want in (0, 1]", h.index, af)
		}
	}})
	changing := 0
	for _, vals := range seen {
		if len(vals) > 1 {
			changing++
		}
	}
	mean := diffSum / float64(n)
	t.Logf("%d of %d hosts saw their fraction change; mean measured - configured = %.3f", changing, len(seen), mean)
	if changing < len(seen)/2 {
		t.Errorf("only %d of %d hosts' active fraction changed during the run: want it continually updated", changing, len(seen))
	}
	if math.Abs(mean) > 0.1 {
		t.Errorf("measured active fraction is off its hosts' on fraction by %.3f on average: want it to track it", mean)
	}
}
