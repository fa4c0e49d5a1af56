package clientpolicy

import (
	"math"
	"testing"
)

func TestMinResults(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ncpus      int
		lastNoWork bool // C got nothing last time and has no tasks: not potentially runnable
		want       []int
	}{
		{"4 cpus 50/30/20", 4, false, []int{2, 2, 1}},
		{"1 cpu", 1, false, []int{1, 1, 1}},
		{"8 cpus", 8, false, []int{4, 3, 2}},
		// C is left out: A 50/80 and B 30/80 of 4 CPUs = 2.5 and 1.5.
		{"4 cpus, C not potentially runnable", 4, true, []int{3, 2, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, ps := hostWith(tc.ncpus, Config{}, []float64{50, 30, 20})
			ps[2].LastNoWork = tc.lastNoWork
			for i, p := range ps {
				if got := h.minResults(p); got != tc.want[i] {
					t.Errorf("min_results(%s) = %d, want %d", p.Name, got, tc.want[i])
				}
			}
		})
	}
}

func TestETTPRCSkipsTheLatestDeadlines(t *testing.T) {
	// One CPU, one project: avg_proc_rate 1. Remaining 100, 200, 400 with
	// deadlines 30, 10, 20; ETTPRC(k) leaves out the k latest deadlines.
	h, ps := newQueue(1, Config{}, []float64{1}, [][3]float64{{0, 100, 30}, {0, 200, 10}, {0, 400, 20}})
	for k, want := range []float64{700, 600, 200, 0, 0} {
		if got := h.ettprc(ps[0], k); !near(got, want) {
			t.Errorf("ETTPRC(P, %d) = %v, want %v", k, got, want)
		}
	}
	h.Tasks[2].CPU = 150 // partly computed: its remaining counts
	if got := h.ettprc(ps[0], 1); !near(got, 450) {
		t.Errorf("ETTPRC(P, 1) with a task half done = %v, want 450", got)
	}
	h.ActiveFrac = 0.5 // half the rate: twice the time
	if got := h.ettprc(ps[0], 1); !near(got, 900) {
		t.Errorf("ETTPRC(P, 1) at active fraction 0.5 = %v, want 900", got)
	}
}

func TestWorkFetchRequest(t *testing.T) {
	type want struct {
		urgency Urgency
		request []float64
	}
	for _, tc := range []struct {
		name   string
		ncpus  int
		af     float64
		T      float64
		shares []float64
		tasks  [][3]float64
		want   want
	}{
		{"no work at all", 1, 1, 86400, []float64{100}, nil,
			want{NeedWorkImmediately, []float64{172800}}},
		{"an hour left", 1, 1, 86400, []float64{100}, [][3]float64{{0, 3600, 1e6}},
			want{NeedWork, []float64{169200}}},
		{"more than T left", 1, 1, 86400, []float64{100}, [][3]float64{{0, 100000, 1e6}},
			want{DontNeedWork, []float64{0}}},
		{
			// A: prrs .5, min_results 2, rate .5x4x.5 = 1; the latest (5000)
			// is skipped: S = 700 <= T; asks (2000-700) x 1.
			// B: prrs .3, min_results 2, rate .6; one task: S = 0, starved;
			// asks 2000 x .6. C: min_results 1, rate .4: S = 2500 > 2T:
			// nothing.
			"three projects", 4, 0.5, 1000, []float64{50, 30, 20}, [][3]float64{
				{0, 400, 10}, {0, 300, 20}, {0, 5000, 30}, {1, 800, 10}, {2, 1000, 10},
			},
			want{NeedWorkImmediately, []float64{1300, 1200, 0}},
		},
		{
			// Everyone above T: nobody is asked, even though A is below 2T.
			"all above T", 1, 1, 1000, []float64{1, 1}, [][3]float64{{0, 800, 10}, {1, 5000, 10}},
			want{DontNeedWork, []float64{0, 0}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, ps := newQueue(tc.ncpus, Config{ConnectPeriod: tc.T}, tc.shares, tc.tasks)
			h.ActiveFrac = tc.af
			plan := h.workFetch(0, nil, h.view())
			if plan.urgency != tc.want.urgency {
				t.Errorf("urgency %v, want %v", plan.urgency, tc.want.urgency)
			}
			for i, p := range ps {
				if got := h.WorkRequestSeconds(p, 0); !near(got, tc.want.request[i]) {
					t.Errorf("request(%s) = %v, want %v", p.Name, got, tc.want.request[i])
				}
			}
		})
	}
}

func TestNextRPCChoosesProject(t *testing.T) {
	threeProjectQueue := func() (*Host, []*Project) {
		h, ps := newQueue(4, Config{ConnectPeriod: 1000}, []float64{50, 30, 20}, [][3]float64{
			{0, 400, 10}, {0, 300, 20}, {0, 5000, 30}, {1, 800, 10}, {2, 1000, 10},
		})
		h.ActiveFrac = 0.5
		return h, ps
	}
	for _, tc := range []struct {
		name  string
		setup func(ps []*Project)
		want  string // "" for no RPC
	}{
		// A: LTD - 700; B: LTD - 0 (starved).
		{"starved project first", func(ps []*Project) {}, "B"},
		{"long-term debt outweighs", func(ps []*Project) { ps[0].LTD = 1000 }, "A"},
		{"MinRPC honoured", func(ps []*Project) { ps[1].MinRPC = 1 }, "A"},
		{"no-work back-off honoured", func(ps []*Project) { ps[1].WorkFetchAt = 1 }, "A"},
		{"nobody may be asked", func(ps []*Project) { ps[0].MinRPC, ps[1].WorkFetchAt = 1, 1 }, ""},
		{"C never: it needs nothing", func(ps []*Project) { ps[2].LTD = 1e9 }, "B"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, ps := threeProjectQueue()
			tc.setup(ps)
			req, ok := h.NextRPC(0)
			switch {
			case tc.want == "" && ok:
				t.Errorf("RPC to %s, want none", req.Project.Name)
			case tc.want != "" && !ok:
				t.Errorf("no RPC, want one to %s", tc.want)
			case ok && req.Project.Name != tc.want:
				t.Errorf("RPC to %s, want %s", req.Project.Name, tc.want)
			case ok && (req.Seconds <= 0 || req.Report):
				t.Errorf("request %+v: want work, no report", req)
			}
		})
	}
}

func TestReportSessions(t *testing.T) {
	for _, tc := range []struct {
		name        string
		reportAfter float64
		deadline    float64
		minRPC      float64
		due         float64 // first time a report session is due; Inf: never
	}{
		{"waits ReportAfter", 0, 1e6, 0, 1000 + 86400},
		{"custom ReportAfter", 600, 1e6, 0, 1600},
		{"deadline near", 0, 5000, 0, 5000 - 3600},
		{"at once", ReportImmediately, 1e6, 0, 1000},
		{"MinRPC holds it", ReportImmediately, 1e6, 2000, 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// One CPU, one project with plenty of work: no work is needed.
			h, ps := newQueue(1, Config{ReportAfter: tc.reportAfter}, []float64{1}, [][3]float64{
				{0, 500, tc.deadline}, {0, 1e6, 1e7},
			})
			ps[0].MinRPC = tc.minRPC
			tk := h.Tasks[0]
			tk.CPU = 500
			h.TaskFinished(tk, 1000)
			if got := h.NextRPCTime(1000); !near(got, tc.due) {
				t.Errorf("NextRPCTime = %v, want %v", got, tc.due)
			}
			if _, ok := h.NextRPC(math.Nextafter(tc.due, 0)); ok {
				t.Errorf("report session before %v", tc.due)
			}
			req, ok := h.NextRPC(tc.due)
			if !ok || !req.Report || req.Project != ps[0] || req.Seconds != 0 {
				t.Errorf("at %v: NextRPC = %+v, %v; want a report-only session", tc.due, req, ok)
			}
		})
	}
	t.Run("report session asks for work when some is needed", func(t *testing.T) {
		h, ps := newQueue(1, Config{ReportAfter: ReportImmediately}, []float64{1}, [][3]float64{{0, 500, 1e6}})
		ps[0].MinRPC = 10 // no get-work session yet
		tk := h.Tasks[0]
		tk.CPU = 500
		h.TaskFinished(tk, 5)
		if _, ok := h.NextRPC(5); ok {
			t.Fatal("RPC before MinRPC")
		}
		req, ok := h.NextRPC(10)
		if !ok || !req.Report || !near(req.Seconds, 172800) || req.Urgency != NeedWorkImmediately {
			t.Errorf("NextRPC = %+v, %v; want report + 2T of work, immediately", req, ok)
		}
	})
}

func TestOverworkedProjectIsAskedOnlyForAnIdleCPU(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tasks [][3]float64
		want  []bool // asked for work: A (overworked), B
	}{
		// Two CPUs, T 1000, shares 1:1 (rate 1 each, min_results 1): A
		// is overworked.
		{"A low, B fine: nobody", [][3]float64{{0, 300, 10}, {1, 5000, 10}}, []bool{false, false}},
		{"A low, B low: only B", [][3]float64{{0, 300, 10}, {1, 400, 10}}, []bool{false, true}},
		{"A starved, B fine: not A while both CPUs have work", [][3]float64{{1, 5000, 10}, {1, 5000, 20}}, []bool{false, false}},
		{"A starved, a CPU idle: A", [][3]float64{{1, 5000, 10}}, []bool{true, false}},
		{"B starved, a CPU idle: both", [][3]float64{{0, 300, 10}}, []bool{true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, ps := newQueue(2, Config{ConnectPeriod: 1000, SchedPeriod: 100}, []float64{1, 1}, tc.tasks)
			ps[0].LTD, ps[1].LTD = -201, 201
			if !h.overworked(ps[0]) || h.overworked(ps[1]) {
				t.Fatal("A should be overworked, B not")
			}
			for i, p := range ps {
				if got := h.WorkRequestSeconds(p, 0) > 0; got != tc.want[i] {
					t.Errorf("%s asked: %v, want %v", p.Name, got, tc.want[i])
				}
			}
		})
	}
}
