package simulate

import (
	"fmt"
	"testing"
)

// alwaysOn is a population of hosts that never switch off and whose
// tasks take exactly their estimates, so that a queue the policy judges
// feasible really is.
func alwaysOn(hosts int, seed uint64, strategy string, connect Duration, projects ...Project) Scenario {
	return Scenario{
		Name:          "deadlines",
		Seed:          seed,
		Hosts:         hosts,
		Duration:      48 * hour,
		Strategy:      strategy,
		ConnectPeriod: connect,
		SchedPeriod:   hour,
		Population: Population{
			NCPUs:  []CPUChoice{{CPUs: 1}, {CPUs: 2}, {CPUs: 4}},
			Flops:  Range{Min: 1e9, Max: 1e10},
			OnFrac: Range{Min: 1, Max: 1},
		},
		Projects: projects,
	}
}

// TestEDFMeetsFeasibleDeadlines is property 2, first half: when every
// queue a host holds can be finished in time (the policy's own Feasible
// check after every fetch) and EDF is on, no deadline is missed, although
// deadlines of 12 to 36 hours fall due all through the two-day run.
func TestEDFMeetsFeasibleDeadlines(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			sc := alwaysOn(60, seed, "edf", 4*hour,
				Project{Name: "alpha", Share: 50, Job: Job{FpopsEst: 1e13, DelayBound: 24 * hour}},
				Project{Name: "beta", Share: 30, Job: Job{FpopsEst: 5e12, DelayBound: 12 * hour}},
				Project{Name: "gamma", Share: 20, Job: Job{FpopsEst: 2e13, DelayBound: 36 * hour}},
			)
			s, r := simulate(t, sc, runOptions{checkFeasible: true})
			t.Logf("seed %d: %d fetches, %d left an infeasible queue; %d tasks reported, %d deadlines missed",
				seed, s.stats.fetches, s.stats.infeasibleFetches, r.Totals.TasksReported, r.Totals.DeadlinesMissed)
			if s.stats.infeasibleFetches > 0 {
				t.Fatalf("premise broken: %d of %d fetches left a queue EDF cannot finish in time; loosen the scenario",
					s.stats.infeasibleFetches, s.stats.fetches)
			}
			if r.Totals.TasksReported < 1000 {
				t.Fatalf("only %d tasks reported; want >= 1000 for the property to say something", r.Totals.TasksReported)
			}
			for _, p := range r.Projects {
				if p.DeadlinesMissed > 0 {
					t.Errorf("seed %d: project %s missed %d deadlines with EDF on and every queue feasible, want 0",
						seed, p.Name, p.DeadlinesMissed)
				}
			}
		})
	}
}

// TestEDFMissesFewerDeadlinesThanDebt is property 2, second half: with a
// small-share project whose deadlines are shorter than the time its work
// buffer takes at its share, version-4 debt scheduling (round-robin by
// share) misses many of its deadlines, and EDF, which runs the tasks at
// risk first, misses at most a tenth as many. EDF must not buy that by
// starving the other projects: the urgent project gets at most its share
// + 0.1 of the CPU (the work-fetch policy stops asking an overworked
// project for more).
func TestEDFMissesFewerDeadlinesThanDebt(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			missed := map[string]int64{}
			for _, strategy := range []string{"debt", "edf"} {
				sc := alwaysOn(60, seed, strategy, 8*hour,
					Project{Name: "urgent", Share: 20, Job: Job{FpopsEst: 1e13, DelayBound: 10 * hour}},
					Project{Name: "steady", Share: 40, Job: Job{FpopsEst: 2e13, DelayBound: 96 * hour}},
					Project{Name: "patient", Share: 40, Job: Job{FpopsEst: 2e13, DelayBound: 96 * hour}},
				)
				_, r := simulate(t, sc, runOptions{})
				u := r.Projects[projectIndex(t, r, "urgent")]
				missed[strategy] = r.Totals.DeadlinesMissed
				if u.AchievedShare > u.ResourceShare+0.1 {
					t.Errorf("seed %d %s: urgent got %.3f of the CPU, share %.3f; want at most share + 0.1",
						seed, strategy, u.AchievedShare, u.ResourceShare)
				}
				t.Logf("seed %d %s: urgent got %.3f of the CPU (share %.3f), reported %d, missed %d; all projects missed %d",
					seed, strategy, u.AchievedShare, u.ResourceShare, u.TasksReported, u.DeadlinesMissed, r.Totals.DeadlinesMissed)
			}
			if missed["debt"] < 50 {
				t.Fatalf("premise broken: debt scheduling missed only %d deadlines; want a scenario where round robin misses many", missed["debt"])
			}
			if missed["edf"]*10 > missed["debt"] {
				t.Errorf("seed %d: EDF missed %d deadlines, debt %d; want EDF to miss at most a tenth as many",
					seed, missed["edf"], missed["debt"])
			}
		})
	}
}
