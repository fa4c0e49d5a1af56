package scheduler

import (
	"math"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/shmcache"
)

// defaultFlops is the speed assumed for a host that reports none.
const defaultFlops = 1e9

// hostQueue predicts when a host will finish the work it holds, in the
// fair-share manner: the host's predicted queue end is max(now, end of what it
// already has) plus the runtime of each job added, the queue being shared by
// its CPUs. A job fits if it would finish before its deadline.
type hostQueue struct {
	now    float64
	flops  float64 // effective speed of one CPU, floating-point ops per second
	ncpus  float64
	memory float64 // bytes of RAM, 0 = unknown
	disk   float64 // bytes of free disk left for new jobs, 0 = unknown
	queued float64 // CPU-seconds of work the host holds, across all CPUs
	delay  float64 // seconds until a CPU is free, as the client estimates it
}

func newHostQueue(now int64, h row.Host, req *protocol.SchedulerRequest) *hostQueue {
	q := &hostQueue{now: float64(now), flops: h.PFpops, ncpus: float64(h.PNCPUs), memory: h.MNbytes, disk: h.DFree}
	if !(q.flops > 0) || math.IsInf(q.flops, 0) {
		q.flops = defaultFlops
	}
	// A host that computes only part of the time gets through its queue
	// proportionally slower (BOINC's on_frac × active_frac availability).
	if avail := fraction(h.OnFrac) * fraction(h.ActiveFrac); avail < 1 {
		q.flops *= max(avail, 0.01)
	}
	if q.ncpus < 1 {
		q.ncpus = 1
	}
	if !finitePositive(q.memory) {
		q.memory = 0
	}
	if !finitePositive(q.disk) {
		q.disk = 0
	}
	if d := req.EstimatedDelay; finitePositive(d) {
		q.delay = d
	}
	return q
}

// fraction reads a reported fraction; an unknown one (0, negative, nonsense)
// counts as 1.
func fraction(f float64) float64 {
	if f > 0 && f <= 1 {
		return f
	}
	return 1
}

func finitePositive(f float64) bool { return f > 0 && !math.IsInf(f, 0) && !math.IsNaN(f) }

// runtime is the estimated time of a job on one CPU of the host.
func (q *hostQueue) runtime(fpopsEst float64) float64 {
	if !finitePositive(fpopsEst) {
		return 0
	}
	return fpopsEst / q.flops
}

// end is the predicted time at which a CPU becomes free for a new job.
func (q *hostQueue) end() float64 {
	return q.now + max(q.queued/q.ncpus, q.delay)
}

// add records a job the host holds or is being sent.
func (q *hostQueue) add(fpopsEst, diskBound float64) {
	q.queued += q.runtime(fpopsEst)
	if q.disk > 0 && finitePositive(diskBound) {
		q.disk = max(q.disk-diskBound, 1) // 1: known, and nearly full
	}
}

// check returns "" if the job may be sent to the host, or the reason it may
// not (one of the no_work reasons).
func (q *hostQueue) check(e shmcache.Entry) string {
	if q.memory > 0 && finitePositive(e.RscMemoryBound) && e.RscMemoryBound > q.memory {
		return reasonMemory
	}
	if q.disk > 0 && finitePositive(e.RscDiskBound) && e.RscDiskBound > q.disk {
		return reasonDisk
	}
	// A job without a delay bound would be overdue the moment it is sent.
	if e.DelayBound <= 0 || q.end()+q.runtime(e.RscFpopsEst) > q.now+float64(e.DelayBound) {
		return reasonDeadline
	}
	return ""
}
