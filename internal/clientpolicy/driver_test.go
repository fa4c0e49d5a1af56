package clientpolicy

import (
	"math"
	"math/rand/v2"
)

// testDriver steps one Host through time for the property tests: running
// tasks compute ActiveFrac CPU seconds per second (a fluid active
// fraction), a task finishes when it reaches its true runtime, Schedule
// runs at every finish, arrival and period end, and every RPC NextRPC asks
// for is answered at once by a generous in-test server that reports the
// finished tasks and hands out new ones until the request is covered.
type testDriver struct {
	h   *Host
	rng *rand.Rand
	now float64

	// newTask makes a task of p at now (EstCPU, Deadline; the driver sets
	// ID, Project and Received).
	newTask func(p *Project, now float64) *Task
	// runtime is a task's true CPU seconds; nil means its estimate.
	runtime func(t *Task) float64
	// requestDelay is the server's request_delay.
	requestDelay float64
	// maxTasksPerRPC caps one reply (0: 1000).
	maxTasksPerRPC int
	// noWork, when set, says p's server has no work at now.
	noWork func(p *Project, now float64) bool

	nextID   int64
	truth    map[*Task]float64
	cpu      map[*Project]float64 // CPU seconds computed per project
	missed   int                  // tasks finished after their deadlines
	finished int
	rpcs     int
	rpcsTo   map[*Project]int
	requests int // RPCs that asked for work
	fetched  int
	busy     float64 // CPU seconds computed in all
}

func newTestDriver(h *Host, rng *rand.Rand, newTask func(p *Project, now float64) *Task) *testDriver {
	return &testDriver{
		h: h, rng: rng, newTask: newTask, requestDelay: 60,
		truth: map[*Task]float64{}, cpu: map[*Project]float64{}, rpcsTo: map[*Project]int{},
	}
}

// driveHost runs h from time 0 until `until` with endless work from
// newTask and returns the CPU seconds each project got.
func driveHost(h *Host, until float64, rng *rand.Rand, newTask func(p *Project, now float64) *Task) map[*Project]float64 {
	d := newTestDriver(h, rng, newTask)
	d.run(until)
	return d.cpu
}

func (d *testDriver) trueRuntime(t *Task) float64 {
	if r, ok := d.truth[t]; ok {
		return r
	}
	r := t.EstCPU
	if d.runtime != nil {
		r = d.runtime(t)
	}
	d.truth[t] = r
	return r
}

// run advances the host to until.
func (d *testDriver) run(until float64) {
	h := d.h
	h.Schedule(d.now)
	for d.now < until {
		if d.idle() {
			return
		}
		if d.doRPCs() {
			h.Schedule(d.now)
		}
		af := h.activeFrac()
		next := min(until, h.NextSchedule(), h.NextRPCTime(d.now))
		for _, t := range h.Tasks {
			if t.State == TaskRunning {
				next = min(next, d.now+(d.trueRuntime(t)-t.CPU)/af)
			}
		}
		if next <= d.now {
			next = d.now + 1e-6 // a conservative NextRPCTime: look again a moment later
		}
		dt := next - d.now
		finished := false
		for _, t := range h.Tasks {
			if t.State != TaskRunning {
				continue
			}
			work := min(dt*af, d.trueRuntime(t)-t.CPU)
			t.CPU += work
			d.cpu[t.Project] += work
			d.busy += work
			if t.CPU >= d.trueRuntime(t)-1e-9 {
				t.CPU = d.trueRuntime(t)
				h.TaskFinished(t, next)
				d.finished++
				if !onTime(next, t.Deadline) {
					d.missed++
				}
				finished = true
			}
		}
		d.now = next
		if finished || d.now >= h.NextSchedule() {
			h.Schedule(d.now)
		}
	}
}

// idle reports whether nothing can happen any more: no unfinished task
// and no RPC ever due.
func (d *testDriver) idle() bool {
	for _, t := range d.h.Tasks {
		if t.State != TaskDone {
			return false
		}
	}
	return math.IsInf(d.h.NextRPCTime(d.now), 1)
}

// doRPCs makes every RPC due now and reports whether tasks arrived.
func (d *testDriver) doRPCs() bool {
	h := d.h
	arrived := false
	for range 2 * len(h.Projects) {
		req, ok := h.NextRPC(d.now)
		if !ok {
			break
		}
		d.rpcs++
		p := req.Project
		d.rpcsTo[p]++
		var done []*Task
		for _, t := range h.Tasks {
			if t.Project == p && t.State == TaskDone {
				done = append(done, t)
			}
		}
		for _, t := range done {
			h.RemoveTask(t)
		}
		n := 0
		if req.Seconds > 0 {
			d.requests++
			limit := d.maxTasksPerRPC
			if limit == 0 {
				limit = 1000
			}
			if d.noWork == nil || !d.noWork(p, d.now) {
				for got := 0.0; got < req.Seconds && n < limit; n++ {
					t := d.newTask(p, d.now)
					d.nextID++
					t.ID, t.Project, t.Received = d.nextID, p, d.now
					h.AddTask(t)
					got += t.EstCPU
				}
			}
		}
		d.fetched += n
		arrived = arrived || n > 0
		h.RPCSucceeded(p, d.now, Reply{RequestDelay: d.requestDelay, AskedSeconds: req.Seconds, NewTasks: n}, d.rng.Float64())
	}
	return arrived
}

// unfinishedLate counts tasks still unfinished whose deadlines have
// passed.
func (d *testDriver) unfinishedLate() int {
	n := 0
	for _, t := range d.h.Tasks {
		if t.State != TaskDone && t.Deadline < d.now {
			n++
		}
	}
	return n
}

// shareErrors returns, for each project in order, achieved minus target
// share of the CPU seconds computed, and the largest absolute error.
func shareErrors(projects []*Project, cpu map[*Project]float64) (errs []float64, worst float64) {
	total, shares := 0.0, 0.0
	for _, p := range projects {
		total += cpu[p]
		shares += p.Share
	}
	for _, p := range projects {
		e := cpu[p]/total - p.Share/shares
		errs = append(errs, e)
		worst = max(worst, math.Abs(e))
	}
	return errs, worst
}

// threeProjects is the reference mix: shares 50/30/20.
func threeProjects() []*Project {
	return []*Project{{Name: "A", Share: 50}, {Name: "B", Share: 30}, {Name: "C", Share: 20}}
}

// mixedTasks makes tasks of mixed lengths per project (A short, B long, C
// in between, each spread x0.5..x1.5) with deadlines `slack` after
// arrival.
func mixedTasks(rng *rand.Rand, slack float64) func(p *Project, now float64) *Task {
	base := map[string]float64{"A": 1800, "B": 4 * 3600, "C": 3600}
	return func(p *Project, now float64) *Task {
		b, ok := base[p.Name]
		if !ok {
			b = 3600
		}
		return &Task{EstCPU: b * (0.5 + rng.Float64()), Deadline: now + slack}
	}
}
