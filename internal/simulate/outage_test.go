package simulate

import (
	"fmt"
	"testing"
	"time"
)

// TestBackoffPreventsReconnectStorm is property 3: a project whose
// scheduler is down for six hours gets its clients back gradually. With
// randomised exponential back-off the peak RPCs per minute in the six
// hours after the outage stays within a small multiple of the peak before
// it; with the back-off fixed at one minute and no jitter (the client seed
// 002 warns against), every host that was waiting comes back in the same
// minute, which the same check catches.
func TestBackoffPreventsReconnectStorm(t *testing.T) {
	t.Parallel()
	const (
		outageStart = 12 * hour
		outageEnd   = 18 * hour
	)
	cases := []struct {
		name        string
		backoff     DurationRange
		fixedJitter bool
		storm       bool
	}{
		{"random exponential back-off", DurationRange{Min: Duration(time.Minute), Max: 4 * hour}, false, false},
		{"fixed one-minute retry", DurationRange{Min: Duration(time.Minute), Max: Duration(time.Minute)}, true, true},
	}
	for _, c := range cases {
		for _, seed := range []uint64{1, 2} {
			t.Run(fmt.Sprintf("%s/seed=%d", c.name, seed), func(t *testing.T) {
				t.Parallel()
				// One project keeps the run cheap; the debt scheduler is
				// enough, as RPC timing does not depend on the CPU strategy.
				sc := threeProjects(200, seed, "debt")
				sc.Projects = sc.Projects[:1]
				sc.ReportAfter = new(Duration(6 * time.Hour))
				sc.RPCBackoff = c.backoff
				sc.Projects[0].Server.Outages = []Window{{Start: outageStart, End: outageEnd}}
				s, r := simulate(t, sc, runOptions{fixedJitter: c.fixedJitter})
				srv := s.servers[0]
				steadyMean, steadyPeak := rpcsPerMinute(srv, (4 * hour).Seconds(), outageStart.Seconds())
				afterMean, afterPeak := rpcsPerMinute(srv, outageEnd.Seconds(), (outageEnd + 6*hour).Seconds())
				ratio := float64(afterPeak) / float64(max(steadyPeak, 1))
				t.Logf("%s seed %d: before the outage %.2f RPCs/min (peak %d); after it %.2f RPCs/min (peak %d, %.1fx); %d RPCs, %d failed",
					c.name, seed, steadyMean, steadyPeak, afterMean, afterPeak, ratio, r.Totals.RPCs, r.Totals.RPCFailures)
				if r.Totals.RPCFailures == 0 {
					t.Fatal("premise broken: no RPC failed during the outage")
				}
				if c.storm {
					if ratio < 10 {
						t.Errorf("fixed retry: peak after the outage %.1fx the steady peak; want >= 10x (the storm this check exists to catch)", ratio)
					}
					return
				}
				if ratio > 3 {
					t.Errorf("random back-off: peak after the outage %d RPCs/min, %.1fx the steady peak %d; want at most 3x",
						afterPeak, ratio, steadyPeak)
				}
			})
		}
	}
}
