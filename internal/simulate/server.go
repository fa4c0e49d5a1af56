package simulate

import (
	"math"
	"math/rand/v2"

	"github.com/taskserver/taskserver/internal/clientpolicy"
)

// server is the in-process model of one project's scheduler: it answers RPCs
// at once (RPC latency is zero in simulated time), fails every RPC during an
// outage, sends nothing during a no-work window, and otherwise sends tasks
// whose estimated CPU covers the request.
type server struct {
	project Project

	// rpcMinutes counts RPCs started in each minute of the run, failed or
	// not; the storm property reads it.
	rpcMinutes []int32
	// reports and lateReports count reported tasks and those reported after
	// their deadline, a check on the recorder's figures.
	reports, lateReports int64
}

func newServer(p Project, duration float64) *server {
	return &server{
		project:    p,
		rpcMinutes: make([]int32, int(duration/60)+1),
	}
}

// down reports whether the project's scheduler is unreachable at now.
func (s *server) down(now float64) bool { return inWindows(s.project.Server.Outages, now) }

// noWork reports whether the project has no work to send at now.
func (s *server) noWork(now float64) bool { return inWindows(s.project.Server.NoWork, now) }

// overloaded reports whether the project is too busy to send work at now.
func (s *server) overloaded(now float64) bool { return inWindows(s.project.Server.Overloaded, now) }

func inWindows(ws []Window, now float64) bool {
	for _, w := range ws {
		if w.contains(now) {
			return true
		}
	}
	return false
}

// countRPC tallies one RPC started at now.
func (s *server) countRPC(now float64) {
	if m := int(now / 60); m >= 0 && m < len(s.rpcMinutes) {
		s.rpcMinutes[m]++
	}
}

// countReport tallies one task reported at now and says whether it was late.
func (s *server) countReport(t *clientpolicy.Task, now float64) (late bool) {
	s.reports++
	late = now > t.Deadline
	if late {
		s.lateReports++
	}
	return late
}

// newTask is one task as the server sends it: the host's estimate of its CPU
// time and the CPU time it will really take.
type newTask struct {
	estCPU, trueCPU, deadline float64
	ncpus                     float64 // threads of a multi-threaded task
}

// work answers a request for seconds of CPU work from a host whose CPUs run
// flops each: tasks until their estimated CPU covers the request, at least
// one and at most MaxTasks. r draws the true runtimes.
func (s *server) work(seconds, flops, ncpus, now float64, r *rand.Rand) []newTask {
	return s.jobs(s.project.Job, seconds, flops, ncpus, now, r)
}

// gpuWork is work for a GPU of the given speed, from the project's GPU
// jobs.
func (s *server) gpuWork(seconds, flops, _, now float64, r *rand.Rand) []newTask {
	return s.jobs(*s.project.GPUJob, seconds, flops, 1, now, r)
}

// jobs is tasks of job until their estimated CPU seconds (CPU-seconds of
// all their threads) cover seconds, at least one and at most MaxTasks;
// estCPU and trueCPU are running times on job.NCPUs instances of speed
// flops, or on the host's hostCPUs if it has fewer (the real client runs
// a multi-threaded app on the CPUs it has).
func (s *server) jobs(job Job, seconds, flops, hostCPUs, now float64, r *rand.Rand) []newTask {
	ncpus := max(min(job.NCPUs, hostCPUs), 1)
	est := job.FpopsEst / (flops * ncpus)
	n := int(math.Ceil(seconds / (est * ncpus)))
	n = max(1, min(n, s.project.Server.MaxTasks))
	tasks := make([]newTask, n)
	deadline := now + job.DelayBound.Seconds()
	for i := range tasks {
		tasks[i] = newTask{
			estCPU:   est,
			trueCPU:  est * runtimeFactor(job.RuntimeSpread, r),
			deadline: deadline,
			ncpus:    ncpus,
		}
	}
	return tasks
}

// runtimeFactor is true/estimated runtime: lognormal with mean 1 and the
// given standard deviation of its log, clamped to [0.1, 10] so one outlier
// cannot stall a host for the whole run.
func runtimeFactor(sigma float64, r *rand.Rand) float64 {
	if sigma == 0 {
		return 1
	}
	f := math.Exp(sigma*r.NormFloat64() - sigma*sigma/2)
	return min(max(f, 0.1), 10)
}
