package simreport

import (
	"math"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
)

// near reports whether a and b agree to within 1e-9.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9 }

func TestReportSharesAndTotals(t *testing.T) {
	t.Parallel()
	type want struct {
		resource, achieved, cpu []float64
		missed                  []int64
		util, idle, maxErr      float64
	}
	tests := []struct {
		name   string
		events func(r *Recorder)
		want   want
	}{
		{
			name: "shares follow CPU and targets",
			events: func(r *Recorder) {
				r.AddTarget(0, 2) // a host with 4 CPUs, shares 50/30/20
				r.AddTarget(1, 1.2)
				r.AddTarget(2, 0.8)
				r.AddAvailable(1000)
				r.CPU(0, 100, 450)
				r.CPU(1, 100, 300)
				r.CPU(2, 100, 150)
			},
			want: want{
				resource: []float64{0.5, 0.3, 0.2},
				achieved: []float64{0.5, 300.0 / 900, 150.0 / 900},
				cpu:      []float64{450, 300, 150},
				missed:   []int64{0, 0, 0},
				util:     0.9, idle: 0.1, maxErr: 0.2 - 150.0/900,
			},
		},
		{
			name: "targets add up over hosts",
			events: func(r *Recorder) {
				r.AddTarget(0, 1) // host 1 only in project a
				r.AddTarget(0, 1) // host 2 split evenly
				r.AddTarget(1, 1)
				r.AddAvailable(300)
				r.CPU(0, 10, 200)
				r.CPU(1, 10, 100)
			},
			want: want{
				resource: []float64{2.0 / 3, 1.0 / 3, 0},
				achieved: []float64{2.0 / 3, 1.0 / 3, 0},
				cpu:      []float64{200, 100, 0},
				missed:   []int64{0, 0, 0},
				util:     1, idle: 0, maxErr: 0,
			},
		},
		{
			name: "nothing computed gives zero shares not NaN",
			events: func(r *Recorder) {
				r.AddTarget(0, 1)
				r.AddAvailable(100)
			},
			want: want{
				resource: []float64{1, 0, 0},
				achieved: []float64{0, 0, 0},
				cpu:      []float64{0, 0, 0},
				missed:   []int64{0, 0, 0},
				util:     0, idle: 1, maxErr: 1,
			},
		},
		{
			name: "unusable amounts are ignored",
			events: func(r *Recorder) {
				r.AddTarget(0, math.NaN())
				r.AddTarget(1, -1)
				r.AddTarget(2, 1)
				r.AddAvailable(math.Inf(1))
				r.AddAvailable(10)
				r.CPU(0, 1, -5)
				r.CPU(1, 1, math.NaN())
				r.CPU(2, 1, 10)
			},
			want: want{
				resource: []float64{0, 0, 1},
				achieved: []float64{0, 0, 1},
				cpu:      []float64{0, 0, 10},
				missed:   []int64{0, 0, 0},
				util:     1, idle: 0, maxErr: 0,
			},
		},
		{
			name: "more computed than available never shows negative idle",
			events: func(r *Recorder) {
				r.AddAvailable(50)
				r.CPU(0, 1, 100)
			},
			want: want{
				resource: []float64{0, 0, 0},
				achieved: []float64{1, 0, 0},
				cpu:      []float64{100, 0, 0},
				missed:   []int64{0, 0, 0},
				util:     2, idle: 0, maxErr: 1,
			},
		},
		{
			name: "late reports and missed tasks both count as deadlines missed",
			events: func(r *Recorder) {
				r.Reported(0, false)
				r.Reported(0, true)
				r.Missed(0)
				r.Missed(2)
			},
			want: want{
				resource: []float64{0, 0, 0},
				achieved: []float64{0, 0, 0},
				cpu:      []float64{0, 0, 0},
				missed:   []int64{2, 0, 1},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := NewRecorder([]string{"a", "b", "c"}, 3600)
			tt.events(r)
			rep := r.Report(Report{})
			if len(rep.Projects) != 3 {
				t.Fatalf("Report().Projects has %d entries, want 3", len(rep.Projects))
			}
			for i, p := range rep.Projects {
				if !near(p.ResourceShare, tt.want.resource[i]) || !near(p.AchievedShare, tt.want.achieved[i]) ||
					!near(p.CPUSeconds, tt.want.cpu[i]) || p.DeadlinesMissed != tt.want.missed[i] {
					t.Errorf("project %s: resource %v achieved %v cpu %v missed %d; want %v %v %v %d",
						p.Name, p.ResourceShare, p.AchievedShare, p.CPUSeconds, p.DeadlinesMissed,
						tt.want.resource[i], tt.want.achieved[i], tt.want.cpu[i], tt.want.missed[i])
				}
			}
			tot := rep.Totals
			if !near(tot.CPUUtilisation, tt.want.util) || !near(tot.IdleFraction, tt.want.idle) || !near(tot.MaxShareError, tt.want.maxErr) {
				t.Errorf("totals: utilisation %v idle %v max share error %v; want %v %v %v",
					tot.CPUUtilisation, tot.IdleFraction, tot.MaxShareError, tt.want.util, tt.want.idle, tt.want.maxErr)
			}
			if tot.IdleCPUSeconds < 0 {
				t.Errorf("totals: idle CPU seconds %v, want >= 0", tot.IdleCPUSeconds)
			}
		})
	}
}

func TestReportCounters(t *testing.T) {
	t.Parallel()
	r := NewRecorder([]string{"a", "b"}, 60)
	r.RPC(0, 1, false)
	r.RPC(0, 2, true)
	r.RPC(1, 3, false)
	r.Fetched(0, 3, 300)
	r.Fetched(1, 1, 50)
	r.Fetched(1, -1, math.NaN()) // nonsense from a caller adds nothing
	r.NoWork(1)
	r.NoWork(1)
	r.Completed(0)
	r.Completed(0)
	r.Completed(1)
	r.Reported(0, false)
	r.Reported(1, true)
	r.Shortfall(1, "deadline")
	r.Shortfall(1, "deadline")
	r.Shortfall(1, "in_progress_limit")
	rep := r.Report(Report{Clock: "simulated", Scenario: "s", Hosts: 2, CPUs: 4})

	want := []ProjectReport{
		{Name: "a", RPCs: 2, RPCFailures: 1, WorkFetchedSeconds: 300, TasksFetched: 3, TasksCompleted: 2, TasksReported: 1},
		{Name: "b", RPCs: 1, WorkFetchedSeconds: 50, TasksFetched: 1, TasksCompleted: 1, TasksReported: 1, DeadlinesMissed: 1, NoWorkReplies: 2,
			Shortfalls: map[string]int64{"deadline": 2, "in_progress_limit": 1}},
	}
	for i, p := range rep.Projects {
		if !reflect.DeepEqual(p, want[i]) {
			t.Errorf("project %d = %+v, want %+v", i, p, want[i])
		}
	}
	wantTotals := Totals{RPCs: 3, RPCFailures: 1, MaxRPCsPerMinute: 3, WorkFetchedSeconds: 350, TasksFetched: 4,
		TasksCompleted: 3, TasksReported: 2, DeadlinesMissed: 1, NoWorkReplies: 2}
	if rep.Totals != wantTotals {
		t.Errorf("totals = %+v, want %+v", rep.Totals, wantTotals)
	}
	if rep.Clock != "simulated" || rep.Scenario != "s" || rep.Hosts != 2 || rep.CPUs != 4 {
		t.Errorf("meta not carried over: %+v", rep)
	}
	if rep.DurationSeconds != 3 {
		t.Errorf("DurationSeconds = %v with no duration given, want the last event's time 3", rep.DurationSeconds)
	}
	if rep.IntervalSeconds != 60 {
		t.Errorf("IntervalSeconds = %v, want 60", rep.IntervalSeconds)
	}
}

func TestMaxRPCsPerMinute(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		at   []float64
		want float64
	}{
		{"none", nil, 0},
		{"one", []float64{5}, 1},
		{"same minute", []float64{0, 30, 59.9}, 3},
		{"minute boundary starts a new minute", []float64{59, 60, 61}, 2},
		{"peak later in the run", []float64{1, 3600, 3601, 3602, 3659}, 4},
		{"out of order", []float64{7200, 10, 7210, 20, 7220}, 3},
		{"negative and NaN times count at the start", []float64{-5, math.NaN(), 0}, 3},
		{"far future times are bounded", []float64{1e300, math.Inf(1), 1}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := NewRecorder([]string{"a"}, 0)
			for _, at := range tt.at {
				r.RPC(0, at, false)
			}
			got := r.Report(Report{DurationSeconds: 1}).Totals
			if got.MaxRPCsPerMinute != tt.want || got.RPCs != int64(len(tt.at)) {
				t.Errorf("RPCs at %v: max per minute %v, rpcs %d; want %v, %d", tt.at, got.MaxRPCsPerMinute, got.RPCs, tt.want, len(tt.at))
			}
		})
	}
}

func TestSeriesBucketing(t *testing.T) {
	t.Parallel()
	type ev struct {
		project int
		at, cpu float64
	}
	tests := []struct {
		name     string
		duration float64
		events   []ev
		times    []float64   // want sample end times
		shares   [][]float64 // want per-interval shares
		cum      [][]float64 // want cumulative shares
	}{
		{
			name:     "event at an interval's end belongs to that interval",
			duration: 20,
			events:   []ev{{0, 10, 1}, {1, 10.000001, 1}},
			times:    []float64{10, 20},
			shares:   [][]float64{{1, 0}, {0, 1}},
			cum:      [][]float64{{1, 0}, {0.5, 0.5}},
		},
		{
			name:     "a boundary computed with rounding error stays in its interval",
			duration: 20,
			events:   []ev{{0, 3 * 0.1 / 0.1 * 10 / 3, 1}, {1, 10 * (1 + 1e-12), 1}},
			times:    []float64{10, 20},
			shares:   [][]float64{{0.5, 0.5}, {0, 0}},
			cum:      [][]float64{{0.5, 0.5}, {0.5, 0.5}},
		},
		{
			name:     "time zero and before go to the first interval",
			duration: 10,
			events:   []ev{{0, 0, 1}, {1, -3, 3}},
			times:    []float64{10},
			shares:   [][]float64{{0.25, 0.75}},
			cum:      [][]float64{{0.25, 0.75}},
		},
		{
			name:     "out of order events land in their own intervals",
			duration: 30,
			events:   []ev{{0, 25, 2}, {1, 5, 1}, {0, 15, 1}, {1, 29, 2}},
			times:    []float64{10, 20, 30},
			shares:   [][]float64{{0, 1}, {1, 0}, {0.5, 0.5}},
			cum:      [][]float64{{0, 1}, {0.5, 0.5}, {0.5, 0.5}},
		},
		{
			name:     "idle intervals carry the cumulative share and run to the duration",
			duration: 35,
			events:   []ev{{0, 5, 3}, {1, 5, 1}},
			times:    []float64{10, 20, 30, 35},
			shares:   [][]float64{{0.75, 0.25}, {0, 0}, {0, 0}, {0, 0}},
			cum:      [][]float64{{0.75, 0.25}, {0.75, 0.25}, {0.75, 0.25}, {0.75, 0.25}},
		},
		{
			name:     "events past the duration still get their intervals",
			duration: 10,
			events:   []ev{{0, 5, 1}, {1, 21, 1}},
			times:    []float64{10, 20, 30},
			shares:   [][]float64{{1, 0}, {0, 0}, {0, 1}},
			cum:      [][]float64{{1, 0}, {1, 0}, {0.5, 0.5}},
		},
		{
			name:     "no events and no duration gives an empty series",
			duration: 0,
			times:    []float64{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := NewRecorder([]string{"a", "b"}, 10)
			for _, e := range tt.events {
				r.CPU(e.project, e.at, e.cpu)
			}
			got := r.Report(Report{DurationSeconds: tt.duration}).Series
			if len(got) != len(tt.times) {
				t.Fatalf("series has %d samples %+v, want %d", len(got), got, len(tt.times))
			}
			for i, s := range got {
				if s.Time != tt.times[i] {
					t.Errorf("sample %d time %v, want %v", i, s.Time, tt.times[i])
				}
				for p := range 2 {
					if !near(s.Shares[p], tt.shares[i][p]) || !near(s.Cumulative[p], tt.cum[i][p]) {
						t.Errorf("sample %d project %d: share %v cumulative %v, want %v %v",
							i, p, s.Shares[p], s.Cumulative[p], tt.shares[i][p], tt.cum[i][p])
					}
				}
			}
		})
	}
}

func TestSeriesBoundedForStrayTimes(t *testing.T) {
	t.Parallel()
	r := NewRecorder([]string{"a"}, 1)
	r.CPU(0, math.Inf(1), 1)
	r.CPU(0, 1e300, 1)
	r.CPU(0, math.NaN(), 1)
	rep := r.Report(Report{DurationSeconds: 5})
	if len(rep.Series) != maxBuckets {
		t.Errorf("series of %d samples after stray times, want the bound %d", len(rep.Series), maxBuckets)
	}
	if rep.Totals.CPUSeconds != 3 {
		t.Errorf("CPU seconds %v, want 3 (stray times still count)", rep.Totals.CPUSeconds)
	}
}

// TestReportProperties checks, over random event sequences, what must hold
// whatever the events: achieved and resource shares each sum to 1, every
// interval's shares sum to 1 or (when idle) 0, the last cumulative shares
// equal the achieved shares, and the series holds all CPU seconds.
func TestReportProperties(t *testing.T) {
	t.Parallel()
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		nproj := 1 + rng.IntN(5)
		names := make([]string, nproj)
		for i := range names {
			names[i] = string(rune('a' + i))
		}
		interval := 60 * float64(1+rng.IntN(120))
		r := NewRecorder(names, interval)
		duration := 86400 * (0.5 + 2*rng.Float64())
		weights := make([]float64, nproj)
		for p := range nproj {
			weights[p] = 1 + 9*rng.Float64()
			r.AddTarget(p, weights[p])
		}
		var total float64
		for range 5000 {
			p := rng.IntN(nproj)
			if rng.Float64()*10 > weights[p] { // CPU roughly follows the weights
				continue
			}
			c := 3600 * rng.Float64()
			r.CPU(p, duration*rng.Float64(), c)
			total += c
		}
		r.AddAvailable(total * 1.1)
		rep := r.Report(Report{DurationSeconds: duration})

		var sumRes, sumAch float64
		for _, p := range rep.Projects {
			sumRes += p.ResourceShare
			sumAch += p.AchievedShare
		}
		if !near(sumRes, 1) || !near(sumAch, 1) {
			t.Errorf("seed %d: resource shares sum to %v, achieved to %v; want 1 and 1", seed, sumRes, sumAch)
		}
		if math.Abs(rep.Totals.CPUSeconds-total) > 1e-6*total {
			t.Errorf("seed %d: total CPU %v, want %v", seed, rep.Totals.CPUSeconds, total)
		}
		if want := int(math.Ceil(duration / interval)); len(rep.Series) != want {
			t.Errorf("seed %d: %d samples over %v s at %v s, want %d", seed, len(rep.Series), duration, interval, want)
		}
		for i, s := range rep.Series {
			var sum float64
			for _, v := range s.Shares {
				sum += v
			}
			if !near(sum, 1) && sum != 0 {
				t.Errorf("seed %d sample %d: shares sum to %v, want 1 or 0", seed, i, sum)
			}
		}
		last := rep.Series[len(rep.Series)-1]
		if last.Time != duration {
			t.Errorf("seed %d: last sample ends at %v, want the duration %v", seed, last.Time, duration)
		}
		for p, proj := range rep.Projects {
			if !near(last.Cumulative[p], proj.AchievedShare) {
				t.Errorf("seed %d project %s: last cumulative share %v, achieved %v", seed, proj.Name, last.Cumulative[p], proj.AchievedShare)
			}
		}
		t.Logf("seed %d: %d projects, %d samples, utilisation %.3f, max share error %.3f",
			seed, nproj, len(rep.Series), rep.Totals.CPUUtilisation, rep.Totals.MaxShareError)
	}
}

// TestRecorderConcurrent drives one recorder from many goroutines, as the
// live client does, and checks nothing was lost. Amounts are whole numbers
// so that float sums are exact whatever the order.
func TestRecorderConcurrent(t *testing.T) {
	t.Parallel()
	const goroutines, perGoroutine, nproj = 64, 500, 3
	r := NewRecorder([]string{"a", "b", "c"}, 60)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 42))
			for i := range perGoroutine {
				p := i % nproj
				at := float64(rng.IntN(7200))
				r.CPU(p, at, 2)
				r.RPC(p, at, i%10 == 0)
				r.AddAvailable(3)
				r.AddTarget(p, 1)
				r.Fetched(p, 1, 4)
				r.Completed(p)
				r.Reported(p, i%50 == 0)
				if i%100 == 0 {
					r.Missed(p)
					r.NoWork(p)
					_ = r.Report(Report{}) // reading while others write
				}
			}
		})
	}
	wg.Wait()
	rep := r.Report(Report{})
	const n = goroutines * perGoroutine
	tot := rep.Totals
	if tot.CPUSeconds != 2*n || tot.AvailableCPUSeconds != 3*n || tot.RPCs != n || tot.RPCFailures != n/10 ||
		tot.TasksFetched != n || tot.WorkFetchedSeconds != 4*n || tot.TasksCompleted != n || tot.TasksReported != n ||
		tot.DeadlinesMissed != n/50+n/100 || tot.NoWorkReplies != n/100 {
		t.Errorf("totals after %d events from %d goroutines: %+v", n, goroutines, tot)
	}
	var seriesCPU float64
	for _, c := range r.buckets {
		seriesCPU += c
	}
	if seriesCPU != 2*n {
		t.Errorf("series holds %v CPU seconds, want %v", seriesCPU, 2*n)
	}
	t.Logf("%d goroutines x %d events: peak %v RPCs/minute over %d samples", goroutines, perGoroutine, tot.MaxRPCsPerMinute, len(rep.Series))
}

func BenchmarkRecorderCPU(b *testing.B) {
	r := NewRecorder([]string{"a", "b", "c"}, 3600)
	rng := rand.New(rand.NewPCG(1, 2))
	at := 0.0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		at += rng.Float64() // time advances, as in the simulator's event loop
		r.CPU(i%3, at, 1.5)
	}
}
