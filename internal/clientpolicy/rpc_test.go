package clientpolicy

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		n       int
		lo, hi  float64
		u, want float64
	}{
		{0, 60, 14400, 0.5, 0},
		{-3, 60, 14400, 0.5, 0},
		{1, 60, 14400, 0.5, 60},
		{1, 60, 14400, 0, 30},
		{3, 60, 14400, 0.5, 240},
		{3, 60, 14400, 0.99, 240 * 1.49},
		{8, 60, 14400, 0.5, 7680},
		{9, 60, 14400, 0.5, 14400}, // 15360 capped
		{9, 60, 14400, 0, 7200},    // capped, then halved
		{1000, 60, 14400, 0.9, 14400},
		{1, 600, 86400, 0.2, 420},
	} {
		if got := Backoff(tc.n, tc.lo, tc.hi, tc.u); !near(got, tc.want) {
			t.Errorf("Backoff(%d, %v, %v, %v) = %v, want %v", tc.n, tc.lo, tc.hi, tc.u, got, tc.want)
		}
	}
}

// TestBackoffBounds: after n failures the back-off lies in
// [min(lo x 2^(n-1), hi) x 0.5, hi].
func TestBackoffBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	lowest, highest := math.Inf(1), 0.0
	for range 10000 {
		n := 1 + rng.IntN(30)
		lo := 1 + rng.Float64()*100
		hi := lo * (1 + rng.Float64()*1000)
		got := Backoff(n, lo, hi, rng.Float64())
		floor := min(lo*math.Pow(2, float64(n-1)), hi) * 0.5
		if got < floor || got > hi {
			t.Fatalf("Backoff(%d, %v, %v) = %v outside [%v, %v]", n, lo, hi, got, floor, hi)
		}
		lowest, highest = min(lowest, got/floor), max(highest, got/floor)
	}
	t.Logf("back-off / lower bound over 10000 draws: %.3f .. %.3f", lowest, highest)
}

func TestRPCOutcomes(t *testing.T) {
	cfg := Config{}.withDefaults()
	for _, tc := range []struct {
		name string
		do   func(h *Host, p *Project)
		// want
		minRPCLo, minRPCHi     float64
		failures, noWork       int
		lastNoWork             bool
		workFetchLo, workFetch float64 // WorkFetchAt range
	}{
		{"success with request_delay", func(h *Host, p *Project) {
			h.RPCSucceeded(p, 100, Reply{RequestDelay: 30, AskedSeconds: 1000, NewTasks: 2}, 0.5)
		}, 130, 130, 0, 0, false, 0, 0},
		{"first failure", func(h *Host, p *Project) { h.RPCFailed(p, 100, 0) },
			100 + cfg.RPCBackoffMin*0.5, 100 + cfg.RPCBackoffMin*0.5, 1, 0, false, 0, 0},
		{"third failure", func(h *Host, p *Project) {
			h.RPCFailed(p, 0, 0.5)
			h.RPCFailed(p, 0, 0.5)
			h.RPCFailed(p, 100, 0.5)
		}, 100 + 4*cfg.RPCBackoffMin, 100 + 4*cfg.RPCBackoffMin, 3, 0, false, 0, 0},
		{"success resets failures", func(h *Host, p *Project) {
			h.RPCFailed(p, 0, 0.5)
			h.RPCSucceeded(p, 100, Reply{}, 0.5)
		}, 100, 100, 0, 0, false, 0, 0},
		{"no work", func(h *Host, p *Project) {
			h.RPCSucceeded(p, 100, Reply{AskedSeconds: 1000}, 0.5)
		}, 100, 100, 0, 1, true, 100 + cfg.WorkFetchBackoffMin, 100 + cfg.WorkFetchBackoffMin},
		{"no work twice", func(h *Host, p *Project) {
			h.RPCSucceeded(p, 0, Reply{AskedSeconds: 1000}, 0.5)
			h.RPCSucceeded(p, 100, Reply{AskedSeconds: 1000}, 0.5)
		}, 100, 100, 0, 2, true, 100 + 2*cfg.WorkFetchBackoffMin, 100 + 2*cfg.WorkFetchBackoffMin},
		{"work after no work", func(h *Host, p *Project) {
			h.RPCSucceeded(p, 0, Reply{AskedSeconds: 1000}, 0.5)
			h.RPCSucceeded(p, 100, Reply{AskedSeconds: 1000, NewTasks: 1}, 0.5)
		}, 100, 100, 0, 0, false, 0, 0},
		{"report only keeps the no-work state", func(h *Host, p *Project) {
			h.RPCSucceeded(p, 0, Reply{AskedSeconds: 1000}, 0.5)
			h.RPCSucceeded(p, 100, Reply{}, 0.5)
		}, 100, 100, 0, 1, true, cfg.WorkFetchBackoffMin, cfg.WorkFetchBackoffMin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, ps := hostWith(1, Config{}, []float64{1})
			p := ps[0]
			tc.do(h, p)
			if p.MinRPC < tc.minRPCLo || p.MinRPC > tc.minRPCHi || p.RPCFailures != tc.failures ||
				p.NoWorkReplies != tc.noWork || p.LastNoWork != tc.lastNoWork ||
				p.WorkFetchAt < tc.workFetchLo || p.WorkFetchAt > tc.workFetch {
				t.Errorf("got MinRPC %v failures %d noWork %d lastNoWork %v WorkFetchAt %v", p.MinRPC, p.RPCFailures,
					p.NoWorkReplies, p.LastNoWork, p.WorkFetchAt)
			}
			// MinRPC is honoured: nothing before it, though the host is starved.
			if _, ok := h.NextRPC(math.Nextafter(p.MinRPC, 0)); ok && p.MinRPC > 0 {
				t.Errorf("RPC before MinRPC %v", p.MinRPC)
			}
		})
	}
}

// randomHost makes a host in an arbitrary state for the NextRPCTime
// property.
func randomHost(rng *rand.Rand) (*Host, float64) {
	now := rng.Float64() * 1e5
	cfg := Config{
		ConnectPeriod: []float64{3600, 86400, 20000}[rng.IntN(3)],
		ReportAfter:   []float64{0, ReportImmediately, 600, 7200}[rng.IntN(4)],
		ReportMargin:  []float64{0, 60, 3600}[rng.IntN(3)],
	}
	var projects []*Project
	for i := range 1 + rng.IntN(4) {
		p := &Project{Name: string(rune('A' + i)), Share: float64(1 + rng.IntN(100)), LTD: rng.NormFloat64() * 20000}
		if rng.IntN(3) == 0 {
			p.MinRPC = now + rng.Float64()*20000
		}
		if rng.IntN(4) == 0 {
			p.WorkFetchAt = now + rng.Float64()*20000
		}
		p.LastNoWork = rng.IntN(5) == 0
		projects = append(projects, p)
	}
	h := NewHost(1+rng.IntN(8), []float64{1, 0.5, 0.9}[rng.IntN(3)], cfg, projects)
	for i := range rng.IntN(25) {
		tk := &Task{
			ID: int64(i + 1), Project: projects[rng.IntN(len(projects))],
			EstCPU: 600 + rng.Float64()*30000, Received: now - rng.Float64()*1e4,
		}
		tk.Deadline = now + (rng.Float64()-0.1)*3e5
		h.AddTask(tk)
		switch rng.IntN(4) {
		case 0:
			tk.CPU = rng.Float64() * tk.EstCPU * 1.2
			h.TaskFinished(tk, now-rng.Float64()*1e4)
		case 1:
			tk.CPU = rng.Float64() * tk.EstCPU
			tk.State = TaskPreempted
		}
	}
	h.Schedule(now)
	return h, now
}

// TestNextRPCTimeIsNeverLate: NextRPC(t) is never ok for now <= t <
// NextRPCTime(now) (up to rounding) while nothing arrives or finishes, whether the running
// tasks stand still, compute at the active fraction or at full speed.
func TestNextRPCTimeIsNeverLate(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 5))
	hosts, probes, exact, never := 0, 0, 0, 0
	for range 4000 {
		h, now := randomHost(rng)
		if _, ok := h.NextRPC(now); ok {
			continue // something is due now: the property is about waiting
		}
		hosts++
		next := h.NextRPCTime(now)
		if next < now {
			t.Fatalf("NextRPCTime %v before now %v", next, now)
		}
		end := next
		if math.IsInf(next, 1) {
			never++
			end = now + 1e6
		}
		base := map[*Task]float64{}
		for _, tk := range h.Tasks {
			base[tk] = tk.CPU
		}
		at := func(tt, rate float64) bool {
			for _, tk := range h.Tasks {
				if tk.State == TaskRunning {
					tk.CPU = base[tk] + (tt-now)*rate
				}
			}
			_, ok := h.NextRPC(tt)
			return ok
		}
		for _, rate := range []float64{0, h.activeFrac(), 1} {
			for i := range 20 {
				tt := now + (end-now)*float64(i)/20
				if i == 19 {
					// Just before it, allowing for the rounding of the
					// CPU sums.
					tt = max(now, end-1e-9*max(1, end))
				}
				probes++
				if at(tt, rate) {
					t.Fatalf("NextRPC ok at %v, before NextRPCTime %v (now %v, rate %v)", tt, next, now, rate)
				}
			}
		}
		if !math.IsInf(next, 1) && at(next+1e-3, 1) {
			exact++
		}
	}
	t.Logf("%d waiting hosts, %d probes before NextRPCTime: none ok; NextRPC ok just after it (full speed) for %d, never due for %d",
		hosts, probes, exact, never)
	if hosts < 800 {
		t.Errorf("only %d waiting hosts: the property was hardly tested", hosts)
	}
}
