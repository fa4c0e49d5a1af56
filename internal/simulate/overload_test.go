package simulate

import "testing"

// An overloaded project is not a project without work: while gamma's
// server is overloaded its hosts keep asking after each request_delay
// (no work-fetch back-off) and its long-term debt keeps growing, so it is
// owed its share when the server recovers; while it has no work it is
// asked rarely and builds no debt.
func TestOverloadedIsNotNoWork(t *testing.T) {
	t.Parallel()
	run := func(overloaded bool) (rpcs int64, maxLTD float64) {
		sc := threeProjects(60, 1, "edf")
		sc.Duration = 12 * hour
		w := []Window{{Start: 0, End: sc.Duration}}
		if overloaded {
			sc.Projects[2].Server.Overloaded = w
		} else {
			sc.Projects[2].Server.NoWork = w
		}
		_, r := simulate(t, sc, runOptions{afterWake: func(h *host, now float64) {
			for k, p := range h.policy.Projects {
				if h.projects[k] == 2 {
					maxLTD = max(maxLTD, p.LTD)
				}
			}
		}})
		return r.Projects[2].RPCs, maxLTD
	}
	oRPCs, oLTD := run(true)
	nRPCs, nLTD := run(false)
	t.Logf("gamma overloaded: %d RPCs, max LTD %.3g; without work: %d RPCs, max LTD %.3g", oRPCs, oLTD, nRPCs, nLTD)
	if oRPCs < 3*nRPCs {
		t.Errorf("gamma got %d RPCs while overloaded, %d without work: want the overloaded one asked far more often", oRPCs, nRPCs)
	}
	if !(oLTD > 0) || nLTD > 1e-6 {
		t.Errorf("max long-term debt to gamma: %.3g overloaded, %.3g without work; want it growing only when overloaded", oLTD, nLTD)
	}
}
