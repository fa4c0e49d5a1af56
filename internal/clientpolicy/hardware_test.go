package clientpolicy

import (
	"math"
	"testing"
)

func TestMultiThreadedTaskTakesItsCPUs(t *testing.T) {
	for _, st := range Strategies() {
		t.Run(string(st), func(t *testing.T) {
			// Four CPUs: a 3-thread task and two single-threaded ones of
			// another project, which is owed more. Whatever runs may not
			// occupy more than the four CPUs, unless the wide task runs
			// alone.
			h, ps := newQueue(4, Config{Strategy: st}, []float64{1, 1}, [][3]float64{
				{1, 100, 1e6}, {1, 100, 1e6}, {0, 100, 1e6},
			})
			ps[1].Debt, ps[1].STD = 1e5, 1e5
			h.Tasks[2].NCPUs = 3
			running := h.Schedule(0)
			used := 0.0
			for _, r := range running {
				used += r.width()
			}
			if len(running) == 0 || (used > 4 && len(running) > 1) {
				t.Fatalf("running %v, %g CPUs: want at most 4 CPUs busy", ids(running), used)
			}
			// The work buffer counts the wide task's CPU seconds: 100 s
			// on 3 CPUs is 300 CPU seconds.
			v := h.view()
			if sum, _ := v.queuedCPU(ps[0], 0); !near(sum, 300) {
				t.Errorf("queued CPU of the 3-thread task = %v, want 300", sum)
			}
		})
	}
}

func TestHalfGPUTasksShareAnInstance(t *testing.T) {
	// A one-GPU resource, tasks using half a GPU each: two run at once.
	h, _ := newQueue(1, Config{Strategy: StrategyEDF}, []float64{1}, [][3]float64{
		{0, 100, 1e6}, {0, 100, 1e6}, {0, 100, 1e6},
	})
	for _, tk := range h.Tasks {
		tk.NCPUs = 0.5
	}
	if running := h.Schedule(0); len(running) != 2 {
		t.Fatalf("running %v: want two half-GPU tasks", ids(running))
	}
}

func TestActivityMeasuresTheOnFraction(t *testing.T) {
	a := Activity{Window: 1000}
	if got := a.Frac(0); got != 1 {
		t.Fatalf("before any observation: %v, want the prior 1", got)
	}
	// On 30 s, off 70 s, over and over: the average converges to 0.3.
	now := 0.0
	for range 200 {
		a.Observe(now, true)
		now += 30
		a.Observe(now, false)
		now += 70
	}
	if got := a.Frac(now); math.Abs(got-0.3) > 0.03 {
		t.Errorf("after 200 cycles of 30%% on: %v, want about 0.3", got)
	}
	// Then always on: it climbs back towards 1.
	a.Observe(now, true)
	if got := a.Frac(now + 5000); got < 0.95 {
		t.Errorf("after 5 windows on: %v, want near 1", got)
	}
	// It is never 0, so rates stay finite.
	b := Activity{Window: 10, Prior: 0.5}
	b.Observe(0, false)
	if got := b.Frac(1e6); got <= 0 {
		t.Errorf("always off: %v, want a small positive fraction", got)
	}
}

func TestTaskFailuresBackOffExponentially(t *testing.T) {
	h, ps := hostWith(1, Config{ErrorBackoffMin: 60, ErrorBackoffMax: 14400}, []float64{1})
	p := ps[0]
	var prev float64
	for n := 1; n <= 10; n++ {
		p.MinRPC = 0
		h.TaskFailed(p, 0, 0.5) // jitter 0.5: the nominal back-off
		want := math.Min(60*math.Pow(2, float64(n-1)), 14400)
		if !near(p.MinRPC, want) {
			t.Errorf("after %d failures MinRPC = %v, want %v", n, p.MinRPC, want)
		}
		if p.MinRPC < prev {
			t.Errorf("after %d failures the back-off shrank: %v < %v", n, p.MinRPC, prev)
		}
		prev = p.MinRPC
	}
	h.TaskSucceeded(p)
	p.MinRPC = 0
	h.TaskFailed(p, 0, 0.5)
	if !near(p.MinRPC, 60) {
		t.Errorf("after a success the back-off restarts: %v, want 60", p.MinRPC)
	}
}

func TestOverloadIsNotNoWork(t *testing.T) {
	h, ps := hostWith(1, Config{}, []float64{1})
	p := ps[0]
	h.RPCSucceeded(p, 100, Reply{RequestDelay: 30, AskedSeconds: 1000, Overloaded: true}, 0.5)
	if p.LastNoWork || p.NoWorkReplies != 0 || p.WorkFetchAt != 0 {
		t.Errorf("overloaded reply: LastNoWork %v, NoWorkReplies %d, WorkFetchAt %v; want the no-work state untouched",
			p.LastNoWork, p.NoWorkReplies, p.WorkFetchAt)
	}
	if p.MinRPC != 130 {
		t.Errorf("overloaded reply: MinRPC %v, want now + request_delay = 130", p.MinRPC)
	}
	h.RPCSucceeded(p, 200, Reply{AskedSeconds: 1000}, 0.5)
	if !p.LastNoWork || p.NoWorkReplies != 1 || !(p.WorkFetchAt > 200) {
		t.Errorf("no-work reply: LastNoWork %v, NoWorkReplies %d, WorkFetchAt %v; want the no-work back-off",
			p.LastNoWork, p.NoWorkReplies, p.WorkFetchAt)
	}
}

func TestNoAppsIsNeverAskedForWork(t *testing.T) {
	h, ps := hostWith(2, Config{}, []float64{1, 1})
	if h.WorkRequestSeconds(ps[0], 0) <= 0 {
		t.Fatal("an empty host asks for no work")
	}
	ps[0].NoApps = true
	if got := h.WorkRequestSeconds(ps[0], 0); got != 0 {
		t.Errorf("project without apps for the resource asked for %v s", got)
	}
	if req, ok := h.NextRPC(0); !ok || req.Project != ps[1] {
		t.Errorf("NextRPC = %+v, %v: want the other project", req, ok)
	}
	// With no project to ask, no RPC is ever due: an event loop must not
	// wake for one.
	ps[1].NoApps = true
	if _, ok := h.NextRPC(0); ok {
		t.Error("NextRPC with every project without apps: want none")
	}
	if at := h.NextRPCTime(0); !math.IsInf(at, 1) {
		t.Errorf("NextRPCTime with every project without apps = %v, want +Inf", at)
	}
}

func TestActivityHistory(t *testing.T) {
	// Two windows of a host on a quarter of the time: it starts near 0.25.
	var a Activity
	a.Window = 1000
	on := 0
	a.History(0, 2000, true, func(isOn bool) float64 {
		on++
		if isOn {
			return 10
		}
		return 30
	}, true)
	if got := a.Frac(0); math.Abs(got-0.25) > 0.1 {
		t.Errorf("after a history on 25%% of the time: %v, want about 0.25", got)
	}
}
