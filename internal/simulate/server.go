package simulate

import (
	"math"
	"math/rand/v2"

	"github.com/taskserver/taskserver/internal/clientpolicy"
)

// server is the in-process model of one project's scheduler: it answers RPCs
// at once (RPC latency is zero in simulated time), fails every RPC during an
// outage, sends nothing during a no-work window, and otherwise sends tasks
// the real scheduler's decision function chooses (scheduler.DecideSends).
type server struct {
	project Project
	// cat is what the real scheduler's decision function decides with.
	cat *catalogue

	// rpcMinutes counts RPCs started in each minute of the run, failed or
	// not; the storm property reads it.
	rpcMinutes []int32
	// reports and lateReports count reported tasks and those reported after
	// their deadline, a check on the recorder's figures.
	reports, lateReports int64
}

func newServer(p Project, duration float64) (*server, error) {
	cat, err := newCatalogue(p)
	if err != nil {
		return nil, err
	}
	return &server{
		project:    p,
		cat:        cat,
		rpcMinutes: make([]int32, int(duration/60)+1),
	}, nil
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

// tasks are the tasks of the jobs the scheduler sent: estCPU and trueCPU
// are running times on job.NCPUs instances of speed flops, or on the
// host's hostCPUs if it has fewer (the real client runs a multi-threaded
// app on the CPUs it has). r draws the true runtimes.
func tasks(jobs []Job, flops, hostCPUs, now float64, r *rand.Rand) []newTask {
	out := make([]newTask, len(jobs))
	for i, job := range jobs {
		ncpus := max(min(job.NCPUs, hostCPUs), 1)
		est := job.FpopsEst / (flops * ncpus)
		out[i] = newTask{
			estCPU:   est,
			trueCPU:  est * runtimeFactor(job.RuntimeSpread, r),
			deadline: now + job.DelayBound.Seconds(),
			ncpus:    ncpus,
		}
	}
	return out
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
