package clientpolicy

import (
	"math"
	"slices"
)

// TaskState is where a task is on the host.
type TaskState int

// The task states.
const (
	// TaskWaiting is a task received and never started: it has no slot
	// directory, so it is not "active" in the seeds' sense.
	TaskWaiting TaskState = iota
	// TaskRunning is a task on a CPU now.
	TaskRunning
	// TaskPreempted is a task started before and suspended now: active,
	// not running.
	TaskPreempted
	// TaskDone is a task whose computation finished; it waits to be
	// reported.
	TaskDone
)

func (s TaskState) String() string {
	switch s {
	case TaskWaiting:
		return "waiting"
	case TaskRunning:
		return "running"
	case TaskPreempted:
		return "preempted"
	case TaskDone:
		return "done"
	}
	return "unknown"
}

// overrunRemainder is the fraction of its estimate a task that has run
// past its estimate still claims to need, so it never looks finished to
// the work-fetch and deadline estimates before the caller says it is.
const overrunRemainder = 0.01

// Task is one result the host holds, from receipt until the server
// acknowledges its report.
type Task struct {
	ID       int64 // unique on the host; the caller assigns it
	Project  *Project
	EstCPU   float64 // estimated CPU seconds of the whole task on one CPU of this host
	CPU      float64 // CPU seconds computed so far; the caller advances it while the task runs
	Deadline float64 // report deadline
	Received float64 // when it arrived
	Finished float64 // when computation finished (set by Host.TaskFinished)
	State    TaskState
	// NCPUs is how many CPUs (or, on a coprocessor host, instances) the
	// task occupies while it runs: a multi-threaded app version's avg_ncpus,
	// a GPU version's instance count (0.5: two tasks share a GPU). 0 means
	// 1. EstCPU and CPU are then seconds of running, not CPU seconds: the
	// debts and the work buffer weigh them by NCPUs.
	NCPUs float64

	// cpuAtLastSched is CPU when the scheduler last accounted this task's
	// work into the debts.
	cpuAtLastSched float64
	// picked is scratch space of the CPU scheduler: chosen to run.
	picked bool
}

// Remaining is the estimated CPU seconds left: EstCPU-CPU, 0 once done. A
// task past its estimate still claims 1% of it, so it never looks finished
// before it is.
func (t *Task) Remaining() float64 {
	if t.State == TaskDone {
		return 0
	}
	if r := t.EstCPU - t.CPU; r > 0 {
		return r
	}
	return max(overrunRemainder*t.EstCPU, 1e-3)
}

// width is how many CPUs t occupies while it runs: NCPUs, 1 when unset.
func (t *Task) width() float64 {
	if t.NCPUs > 0 && !math.IsInf(t.NCPUs, 0) {
		return t.NCPUs
	}
	return 1
}

// Project is one project the host is attached to, with the client's
// bookkeeping for it.
type Project struct {
	Name  string
	Share float64 // resource share, any positive number

	Debt float64 // version-4 debt (seed 000), CPU seconds
	STD  float64 // short-term debt (seed 001) over runnable projects: min 0, max Config.MaxSTD
	LTD  float64 // long-term debt (seed 001) over potentially runnable projects: mean 0

	MinRPC        float64 // no scheduler RPC before this time (request_delay, RPC back-off)
	RPCFailures   int     // consecutive failed RPCs (drives the back-off)
	WorkFetchAt   float64 // no work request before this time (back-off after "no work" replies)
	NoWorkReplies int     // consecutive work requests that got nothing
	LastNoWork    bool    // the last work request got nothing: LTD does not accumulate
	// TaskErrors counts consecutive tasks of the project that crashed or
	// whose files failed to transfer; they back its RPCs off (seed 002).
	TaskErrors int
	// NoApps says the project has no app for this host's resource (the
	// reply's <no_rsc_apps>): it is never asked for work for it.
	NoApps bool

	// stats summarises completed task runtimes for the seed-004
	// strategies.
	stats runtimeStats
	// unaccounted is CPU of tasks removed before Schedule accounted it.
	unaccounted float64
	// queue is scratch space of the work-fetch functions: the project's
	// unfinished tasks, earliest deadline first.
	queue []*Task
	// workDone, anticipated and hasWork (an unfinished task) are scratch
	// space of one Schedule call.
	workDone, anticipated float64
	hasWork               bool
}

// Host is one volunteer machine's client state. It is not safe for
// concurrent use: one goroutine owns it.
type Host struct {
	NCPUs int
	// ActiveFrac is the fraction of wall time the client runs and may
	// compute (seed 000's "active fraction"); 0 means 1.
	ActiveFrac float64
	Config     Config
	Projects   []*Project
	// Tasks is every task held, in arrival order.
	Tasks []*Task

	// order is Tasks earliest deadline first (arrival order among equal
	// deadlines), kept up to date by AddTask and RemoveTask so the
	// simulations need not sort.
	order []*Task

	// periodStart is when the current scheduling period began (the last
	// full reschedule); started says whether there was one.
	periodStart float64
	started     bool
	// periodWork is the CPU seconds computed since periodStart; payoff is
	// the expected pay-off of one CPU for a period, from the last period.
	periodWork, payoff float64
	// edfGuardOff leaves seed 001's EDF policy without the feasibility
	// guard, for the tests that show why the guard is there.
	edfGuardOff bool
	// s004 is the state of the seed-004 strategies.
	s004 seed004State
}

// NewHost returns a host with ncpus CPUs (at least 1) attached to
// projects, with cfg's zero fields set to their defaults.
func NewHost(ncpus int, activeFrac float64, cfg Config, projects []*Project) *Host {
	return &Host{
		NCPUs:      max(ncpus, 1),
		ActiveFrac: activeFrac,
		Config:     cfg.withDefaults(),
		Projects:   projects,
	}
}

// cfg is the host's configuration with defaults, so callers may set Config
// fields after NewHost.
func (h *Host) cfg() Config { return h.Config.withDefaults() }

// activeFrac is ActiveFrac with 0 (unset) meaning 1.
func (h *Host) activeFrac() float64 {
	if h.ActiveFrac <= 0 || h.ActiveFrac > 1 {
		return 1
	}
	return h.ActiveFrac
}

func (h *Host) ncpus() int { return max(h.NCPUs, 1) }

// AddTask takes a task the host received; it starts out waiting. The
// caller then calls Schedule so a free CPU picks it up.
func (h *Host) AddTask(t *Task) {
	t.State = TaskWaiting
	t.cpuAtLastSched = t.CPU
	h.Tasks = append(h.Tasks, t)
	if len(h.order) == len(h.Tasks)-1 {
		i, _ := slices.BinarySearchFunc(h.order, t, func(e, t *Task) int {
			if e.Deadline <= t.Deadline {
				return -1 // after every equal deadline: arrival order
			}
			return 1
		})
		h.order = slices.Insert(h.order, i, t)
	}
}

// RemoveTask forgets a task, after the server acknowledged its report or
// the task was aborted. CPU it computed since the last Schedule still
// counts for its project.
func (h *Host) RemoveTask(t *Task) {
	i := slices.Index(h.Tasks, t)
	if i < 0 {
		return
	}
	if d := t.CPU - t.cpuAtLastSched; d > 0 && t.Project != nil {
		t.Project.unaccounted += d
	}
	h.Tasks = slices.Delete(h.Tasks, i, i+1)
	if j := slices.Index(h.order, t); j >= 0 {
		h.order = slices.Delete(h.order, j, j+1)
	}
}

// deadlineOrder is every task held, earliest deadline first, arrival order
// among equal deadlines. It re-sorts only if the caller changed Tasks or a
// deadline without AddTask and RemoveTask.
func (h *Host) deadlineOrder() []*Task {
	ok := len(h.order) == len(h.Tasks)
	for i := 1; ok && i < len(h.order); i++ {
		ok = h.order[i-1].Deadline <= h.order[i].Deadline
	}
	if !ok {
		h.order = append(h.order[:0], h.Tasks...)
		slices.SortStableFunc(h.order, byDeadline)
	}
	return h.order
}

// TaskFinished marks t's computation finished at now: its CPU is free and
// its runtime feeds its project's statistics. The caller then calls
// Schedule to give the CPU to another task.
func (h *Host) TaskFinished(t *Task, now float64) {
	t.State = TaskDone
	t.Finished = now
	if t.Project != nil {
		t.Project.stats.add(t.CPU)
	}
}

// runnable returns p's unfinished tasks, earliest deadline first (arrival
// order among equal deadlines).
func (h *Host) runnable(p *Project) []*Task {
	var ts []*Task
	for _, t := range h.deadlineOrder() {
		if t.Project == p && t.State != TaskDone {
			ts = append(ts, t)
		}
	}
	return ts
}

// freeCPUs is how many CPUs no task is running on.
func (h *Host) freeCPUs() int {
	return max(int(math.Floor(float64(h.ncpus())-h.busyCPUs()+1e-9)), 0)
}

// busyCPUs is how many CPUs the running tasks occupy.
func (h *Host) busyCPUs() float64 {
	n := 0.0
	for _, t := range h.Tasks {
		if t.State == TaskRunning {
			n += t.width()
		}
	}
	return n
}

// running returns the tasks on a CPU now.
func (h *Host) running() []*Task {
	var ts []*Task
	for _, t := range h.Tasks {
		if t.State == TaskRunning {
			ts = append(ts, t)
		}
	}
	return ts
}

func byDeadline(a, b *Task) int {
	switch {
	case a.Deadline < b.Deadline:
		return -1
	case a.Deadline > b.Deadline:
		return 1
	}
	return 0
}

// shareOf is p's share, with nonsense (zero, negative, NaN) read as a
// tiny positive share so divisions stay finite.
func shareOf(p *Project) float64 {
	if !(p.Share > 0) || math.IsInf(p.Share, 0) {
		return 1e-9
	}
	return p.Share
}
