package scalebench

import (
	"slices"
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
// (nothing sent) were quoted as the dispatch rate; the second level sent
// about half as many instances per request as the first, the backlog
// already thin. A dry level is neither the rate nor the cost.
func TestDeriveSkipsLevelsWhoseBacklogRanDry(t *testing.T) {
	levels := []level{
		{Conns: 2, RPS: 187, P99MS: 38, Requests: 1870, Sent: 5134, SchedCPUS: 1, DBCPUS: 2},
		{Conns: 8, RPS: 567, P99MS: 75, Requests: 5670, Sent: 8194, SchedCPUS: 3, DBCPUS: 5},
		{Conns: 24, RPS: 2006, P99MS: 20, Requests: 20060, Sent: 0, SchedCPUS: 4, DBCPUS: 4},
	}
	for i := range levels {
		levels[i].BacklogDry = levels[i].dry(levels[0])
	}
	if levels[0].BacklogDry || !levels[1].BacklogDry || !levels[2].BacklogDry {
		t.Fatalf("dry = %v %v %v, want the two that sent 1.4 and 0 per request after 2.7", levels[0].BacklogDry,
			levels[1].BacklogDry, levels[2].BacklogDry)
	}
	s := Size{Dispatch: &DispatchCost{Levels: levels}}
	s.derive()
	if s.DispatchRPS != 187 || s.DispatchP99MS != 38 {
		t.Errorf("dispatch = %g rps p99 %g, want the 2-connection level, the only one with the backlog whole", s.DispatchRPS, s.DispatchP99MS)
	}
	// At 10^6 rows: levels that still sent more than half an instance per
	// request, but a fifth and a half of what the first sent per request.
	first := level{Conns: 2, Requests: 3110, Sent: 8892}
	if l := (level{Conns: 50, Requests: 23960, Sent: 13200}); !l.dry(first) {
		t.Error("50 connections sending 0.55 instances per request after 2.9: not dry, want dry")
	}
	if l := (level{Conns: 50, Requests: 14070, Sent: 21642}); !l.dry(first) {
		t.Error("50 connections sending 1.54 instances per request after 2.9: not dry, want dry")
	}
	if l := (level{Conns: 39, Requests: 8790, Sent: 31102}); l.dry(first) {
		t.Error("39 connections sending 3.5 instances per request after 2.9: dry, want not")
	}
}

// TestWorkingSetIsSmallestPoolWithinTenPercentOfBest checks the sweep's
// derivation: per phase, the smallest pool whose database CPU per unit is
// within 10% of the best; "only largest" when no smaller pool is; dispatch
// compared at the highest level every pool ran with work; the feeder per
// 1000 rows; a phase no pool measured left out.
func TestWorkingSetIsSmallestPoolWithinTenPercentOfBest(t *testing.T) {
	pools := []string{"256M", "1G", "4G"}
	run := func(validatorDB, purgeDB float64, levels ...level) *Size {
		return &Size{
			StatusPage: &DaemonCost{Jobs: 1, DBCPUS: 2, BufferPoolDiskReads: 10, BufferPoolPagesRead: 12},
			Feeder:     &FeederCost{EnumeratedRows: 20000, DBCPUS: 0.1},
			Dispatch:   &DispatchCost{Levels: levels},
			Daemons: map[string]*DaemonCost{
				"validator": {Jobs: 1000, DBCPUS: validatorDB, BufferPoolDiskReads: int64(validatorDB * 100)},
				"db_purge":  {Jobs: 1000, DBCPUS: purgeDB},
			},
		}
	}
	runs := []*Size{
		// The smallest pool: the validator and db_purge miss; dispatch's
		// p99 passed its bound at 8 connections, so no 24.
		run(0.3, 0.9, level{Conns: 2, Requests: 1000, Sent: 1000, DBCPUS: 1.5}, level{Conns: 8, Requests: 2000, Sent: 2000, DBCPUS: 5, DiskReads: 77}),
		run(0.105, 0.5, level{Conns: 2, Requests: 1000, Sent: 1000, DBCPUS: 1}, level{Conns: 8, Requests: 2000, Sent: 2000, DBCPUS: 2.1},
			level{Conns: 24, Requests: 3000, Sent: 3000, DBCPUS: 3}),
		run(0.1, 0.3, level{Conns: 2, Requests: 1000, Sent: 1000, DBCPUS: 1}, level{Conns: 8, Requests: 2000, Sent: 2000, DBCPUS: 2},
			level{Conns: 24, Requests: 3000, Sent: 3000, DBCPUS: 3}, level{Conns: 64, Requests: 3000, Sent: 0, DBCPUS: 1}),
	}
	// The transitioner misses 5 times in 1000 jobs at 256M, none above:
	// too few to count.
	for i, r := range runs {
		r.Daemons["transitioner"] = &DaemonCost{Jobs: 1000, DBCPUS: 1, BufferPoolDiskReads: int64(5 * (1 - min(i, 1)))}
	}
	ws := workingSet(pools, runs)
	check := func(phase, unit string, mb float64, onlyLargest bool, readsMB float64) *PhaseWorkingSet {
		t.Helper()
		p := ws.Phases[phase]
		if p == nil {
			t.Fatalf("no %s in %+v", phase, ws.Phases)
		}
		if p.Unit != unit || p.WorkingSetMB != mb || p.OnlyLargest != onlyLargest || len(p.Pools) != 3 {
			t.Errorf("%s = %s, %g MB, only largest %v, %d pools; want %s, %g, %v, 3", phase, p.Unit, p.WorkingSetMB, p.OnlyLargest, len(p.Pools), unit, mb, onlyLargest)
		}
		if p.ReadsWorkingSetMB != readsMB || p.ReadsOnlyLargest {
			t.Errorf("%s by reads = %g MB, only largest %v; want %g, false", phase, p.ReadsWorkingSetMB, p.ReadsOnlyLargest, readsMB)
		}
		return p
	}
	// 0.105 is within 10% of 0.1: 1G keeps the validator at its best; its
	// reads (30, 10, 10 per 1000 jobs) say the same.
	v := check("validator", "job", 1024, false, 1024)
	if v.Pools[0].DBCPUMSPerUnit != 0.3 || v.Pools[0].DiskReads != 30 || v.Pools[0].PoolMB != 256 {
		t.Errorf("validator at 256M = %+v", v.Pools[0])
	}
	// db_purge's CPU falls to the largest pool, but it read nothing from
	// disk under any: by reads the smallest pool holds it.
	check("db_purge", "job", 4096, true, 256)
	check("status_page", "request", 256, false, 256)
	check("transitioner", "job", 256, false, 256)
	f := check("feeder", "1000 rows", 256, false, 256)
	if f.Pools[0].DBCPUMSPerUnit != 5 {
		t.Errorf("feeder = %g ms per 1000 rows, want 5", f.Pools[0].DBCPUMSPerUnit)
	}
	// At 8 connections, the most all three ran: 2.5, 1.05, 1 ms a request.
	d := check("dispatch", "request", 1024, false, 1024)
	if d.DispatchConns != 8 || d.Pools[0].DBCPUMSPerUnit != 2.5 || d.Pools[0].DiskReads != 77 {
		t.Errorf("dispatch at %d connections, 256M = %+v; want 8, 2.5 ms, 77 reads", d.DispatchConns, d.Pools[0])
	}
	if ws.Phases["assimilator"] != nil {
		t.Errorf("assimilator, never measured, = %+v", ws.Phases["assimilator"])
	}
	var b strings.Builder
	ws.writeTable(&b, 1e7)
	for _, want := range []string{"validator", "0.3 (30/0)", "4096+", "request@8"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestTableListsEachPhasesStatements checks report.txt's statement lists
// (--statements): dispatch's at the quoted level only, each daemon's, with
// each form's share of its phase; and none without --statements.
func TestTableListsEachPhasesStatements(t *testing.T) {
	s := Size{ResultRows: 1000, Dispatch: &DispatchCost{Levels: []level{
		{Conns: 2, RPS: 100, P99MS: 40, Requests: 1000, Sent: 1000,
			Statements: []Statement{{Text: "SELECT at two", Count: 1, TimeMS: 1}}},
		{Conns: 8, RPS: 300, P99MS: 90, Requests: 3000, Sent: 3000,
			Statements: []Statement{{Text: "UPDATE `result` at eight", Count: 30, TimeMS: 75, RowsAffected: 90},
				{Text: "COMMIT", Count: 10, TimeMS: 25}}},
	}}, Daemons: map[string]*DaemonCost{"validator": {Jobs: 10,
		Statements: []Statement{{Text: "SELECT `workunit`", Count: 2, TimeMS: 4, RowsExamined: 20, RowsSent: 10}}}}}
	s.derive()
	var b strings.Builder
	if err := (&Report{Sizes: []Size{s}}).WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	txt := b.String()
	for _, want := range []string{
		"dispatch at 8 connections:\n",
		"75.0 ms  75.0%      30         0/0/90  UPDATE `result` at eight\n",
		"25.0 ms  25.0%      10         0/0/0  COMMIT\n",
		"validator:\n",
		"4.0 ms 100.0%       2        20/10/0  SELECT `workunit`\n",
	} {
		if !strings.Contains(txt, want) {
			t.Errorf("report.txt lacks %q:\n%s", want, txt)
		}
	}
	if strings.Contains(txt, "SELECT at two") {
		t.Errorf("report.txt lists a level that is not the quoted one:\n%s", txt)
	}
	s.Dispatch.Levels[0].Statements, s.Dispatch.Levels[1].Statements, s.Daemons["validator"].Statements = nil, nil, nil
	b.Reset()
	if err := (&Report{Sizes: []Size{s}}).WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "statements at") {
		t.Errorf("report.txt lists statements of a run without them:\n%s", b.String())
	}
}

// TestLevelPlanNarrowsInOnTheBound checks the dispatch levels: the fixed
// ones until one is past the p99 bound, then two between the last within
// it and the first past it; all fixed ones when none is past; one when the
// first is.
func TestLevelPlanNarrowsInOnTheBound(t *testing.T) {
	run := func(limit int) []int {
		var plan levelPlan
		var ran []int
		for len(ran) < 20 {
			conns, ok := plan.next()
			if !ok {
				break
			}
			ran = append(ran, conns)
			if !plan.record(conns, conns <= limit) {
				break
			}
		}
		return ran
	}
	for _, c := range []struct {
		limit int
		want  []int
	}{
		{50, []int{2, 8, 24, 64, 39, 50}}, // 24..64: 39 within; 39..64: 50 within
		{30, []int{2, 8, 24, 64, 39, 31}}, // 24..64: 39 past; 24..39: 31 past
		{1000, []int{2, 8, 24, 64, 128}},
		{1, []int{2}},
	} {
		if got := run(c.limit); !slices.Equal(got, c.want) {
			t.Errorf("p99 within the bound up to %d connections: levels %v, want %v", c.limit, got, c.want)
		}
	}
	if _, ok := between(24, 28); ok {
		t.Error("between(24, 28): want none, they are within 1.25x")
	}
}
