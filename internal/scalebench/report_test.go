package scalebench

import (
	"strings"
	"testing"
)

// TestDeriveQuotesBestLevelWithinBound checks the dispatch figure is the
// fastest level whose p99 is within 100 ms, and that an instance's CPU adds
// dispatch per instance sent to each daemon's per job over two instances.
func TestDeriveQuotesBestLevelWithinBound(t *testing.T) {
	s := Size{Dispatch: &DispatchCost{Levels: []level{
		{Conns: 2, RPS: 100, P99MS: 40, Requests: 1000, Sent: 1000, SchedCPUS: 1, DBCPUS: 1},
		{Conns: 8, RPS: 300, P99MS: 90, Requests: 3000, Sent: 2000, SchedCPUS: 3, FeedCPUS: 1, DBCPUS: 4},
		{Conns: 24, RPS: 500, P99MS: 150, Requests: 5000, Sent: 5000, SchedCPUS: 5, DBCPUS: 5},
	}}, Daemons: map[string]*DaemonCost{"transitioner": {Jobs: 1000, CPUS: 1, DBCPUS: 2}}}
	s.derive()
	if s.DispatchRPS != 300 || s.DispatchP99MS != 90 || !s.DispatchWithinBound {
		t.Errorf("dispatch = %g rps p99 %g within %v, want the 8-connection level", s.DispatchRPS, s.DispatchP99MS, s.DispatchWithinBound)
	}
	// Dispatch: (3+1+4) s / 2000 sent = 4 ms, of it 2 ms database;
	// transitioner: (1+2) ms per job / 2 = 1.5 ms, of it 1 ms database.
	if s.CPUMSPerInstance != 5.5 || s.DBCPUMSPerInstance != 3 {
		t.Errorf("per instance = %g ms, database %g ms; want 5.5 and 3", s.CPUMSPerInstance, s.DBCPUMSPerInstance)
	}
	if s.Transitioner == nil || s.Transitioner.CPUMSPerJob != 1 || s.Transitioner.DBCPUMSPerJob != 2 {
		t.Errorf("transitioner = %+v", s.Transitioner)
	}
	s = Size{Dispatch: &DispatchCost{Levels: []level{{RPS: 50, P99MS: 200}, {RPS: 80, P99MS: 300}}}}
	s.derive()
	if s.DispatchRPS != 50 || s.DispatchWithinBound {
		t.Errorf("no level within the bound: %g rps within %v, want the lowest level, marked outside", s.DispatchRPS, s.DispatchWithinBound)
	}
}

// TestSVGPlotsEverySize checks the plot has a point per size per series.
func TestSVGPlotsEverySize(t *testing.T) {
	r := &Report{Sizes: []Size{{ResultRows: 1e5, CPUMSPerInstance: 3, DBCPUMSPerInstance: 1},
		{ResultRows: 1e6, CPUMSPerInstance: 4, DBCPUMSPerInstance: 2}}}
	svg := string(r.SVG())
	if n := strings.Count(svg, "<circle"); n != 4 {
		t.Errorf("%d points, want 4:\n%s", n, svg)
	}
	if !strings.Contains(svg, "10^5") || !strings.Contains(svg, "10^6") {
		t.Errorf("axis lacks the sizes' decades:\n%s", svg)
	}
}

// TestDeriveSkipsLevelsWhoseBacklogRanDry: at 10^5 rows the unsent backlog
// ran out during the third level, whose 2,000 "no work" replies a second
// (nothing sent) were quoted as the dispatch rate. A dry level is neither
// the rate nor the cost.
func TestDeriveSkipsLevelsWhoseBacklogRanDry(t *testing.T) {
	levels := []level{
		{Conns: 2, RPS: 187, P99MS: 38, Requests: 1870, Sent: 5134, SchedCPUS: 1, DBCPUS: 2},
		{Conns: 8, RPS: 567, P99MS: 75, Requests: 5670, Sent: 8194, SchedCPUS: 3, DBCPUS: 5},
		{Conns: 24, RPS: 2006, P99MS: 20, Requests: 20060, Sent: 0, SchedCPUS: 4, DBCPUS: 4},
	}
	for i := range levels {
		levels[i].BacklogDry = levels[i].dry()
	}
	if levels[0].BacklogDry || levels[1].BacklogDry || !levels[2].BacklogDry {
		t.Fatalf("dry = %v %v %v, want only the level that sent nothing", levels[0].BacklogDry, levels[1].BacklogDry, levels[2].BacklogDry)
	}
	s := Size{Dispatch: &DispatchCost{Levels: levels}}
	s.derive()
	if s.DispatchRPS != 567 || s.DispatchP99MS != 75 {
		t.Errorf("dispatch = %g rps p99 %g, want the 8-connection level, the fastest that sent work", s.DispatchRPS, s.DispatchP99MS)
	}
}
