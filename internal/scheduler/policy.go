package scheduler

import (
	"math"
	"slices"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/shmcache"
)

// defaultFlops is the speed assumed for a host that reports none.
const defaultFlops = 1e9

// hostQueue predicts when a host will finish the work it holds, per
// resource, in the fair-share manner: a resource's predicted queue end is
// max(now, end of what it already has) plus the runtime of each job added,
// the queue being shared by the resource's instances (the CPUs, or the GPUs
// of one type). A task occupies its version's share of the resource
// (avg_ncpus CPUs, gpu_usage GPUs) for rsc_fpops_est / rate seconds, the
// rate being its version's on this host. A job fits if it would finish
// before its deadline. The queue also keeps what the request asked of each
// resource and what has been sent for it.
type hostQueue struct {
	now float64
	// avail is the fraction of the time the host computes (BOINC's
	// on_frac × active_frac): a host that computes part of the time gets
	// through its queue proportionally slower.
	avail  float64
	memory float64 // bytes of RAM, 0 = unknown
	disk   float64 // bytes of free disk left for new jobs, 0 = unknown
	rsc    []rscQueue
	// left are the jobs each chosen version may still get today
	// (version.qi).
	left []int
	// saved and savedLeft are copies of rsc and left (save, restore),
	// kept to reuse their memory.
	saved     []rscQueue
	savedLeft []int
	savedDisk float64
}

// rscQueue is one resource's queue and request.
type rscQueue struct {
	instances float64
	queued    float64 // instance-seconds of work the host holds
	delay     float64 // seconds until an instance is free, as the client estimates it
	// wantSecs and wantInst are the request: instance-seconds of work,
	// and idle instances to fill; secs, inst and njobs what was sent.
	wantSecs, wantInst float64
	secs, inst         float64
	njobs              int
}

// newHostQueue makes the queues of the host's resources (rsc, the CPU
// first) with the request's asks. A client that asks per resource (7.x:
// cpu_req_secs or a coprocessor's req_secs) gets each resource filled
// separately; an older one's work_req_seconds is CPU work. Instances asked
// are capped at maxPerRPC jobs' worth.
func newHostQueue(now int64, h row.Host, req *protocol.SchedulerRequest, rsc []protocol.Coproc, maxPerRPC int, quota []int) *hostQueue {
	q := &hostQueue{now: float64(now), memory: h.MNbytes, disk: h.DFree, avail: 1,
		rsc: make([]rscQueue, len(rsc)), saved: make([]rscQueue, len(rsc)),
		left: slices.Clone(quota), savedLeft: make([]int, len(quota))}
	if avail := fraction(h.OnFrac) * fraction(h.ActiveFrac); avail < 1 {
		q.avail = max(avail, 0.01)
	}
	if !finitePositive(q.memory) {
		q.memory = 0
	}
	if !finitePositive(q.disk) {
		q.disk = 0
	}
	perRsc := len(rsc) > 1 && finite(req.CPUReqSecs) > 0
	for _, c := range rsc[1:] {
		if finite(c.ReqSecs) > 0 {
			perRsc = true
		}
	}
	for i, c := range rsc {
		r := &q.rsc[i]
		r.instances = max(float64(c.Count), 1)
		if d := c.EstimatedDelay; finitePositive(d) {
			r.delay = d
		}
		r.wantSecs, r.wantInst = finite(c.ReqSecs), finite(c.ReqInstances)
		if i == 0 && !perRsc {
			r.wantSecs = max(finite(req.WorkReqSeconds), r.wantSecs)
		}
		if !(r.wantSecs > 0) {
			r.wantSecs = 0
		}
		r.wantInst = math.Ceil(min(max(r.wantInst, 0), float64(maxPerRPC)))
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

// runtime is the estimated time of a job run with version v on the host.
func (q *hostQueue) runtime(fpopsEst float64, v *version) float64 {
	if !finitePositive(fpopsEst) {
		return 0
	}
	flops := v.flops
	if !finitePositive(flops) {
		flops = defaultFlops
	}
	return fpopsEst / (flops * q.avail)
}

// end is the predicted time at which an instance of resource r becomes
// free for a new job.
func (q *hostQueue) end(r int) float64 {
	rq := &q.rsc[r]
	return q.now + max(rq.queued/rq.instances, rq.delay)
}

// add records a job the host holds.
func (q *hostQueue) add(fpopsEst, diskBound float64, v *version) {
	q.rsc[v.rsc].queued += q.runtime(fpopsEst, v) * v.usage()
	if q.disk > 0 && finitePositive(diskBound) {
		q.disk = max(q.disk-diskBound, 1) // 1: known, and nearly full
	}
}

// send records a job being sent: held, and counted against the request.
func (q *hostQueue) send(fpopsEst, diskBound float64, v *version) {
	q.add(fpopsEst, diskBound, v)
	r := &q.rsc[v.rsc]
	r.secs += q.runtime(fpopsEst, v) * v.usage()
	r.inst += v.usage()
	r.njobs++
	if v.qi >= 0 && v.qi < len(q.left) {
		q.left[v.qi]--
	}
}

// quotaLeft reports whether version v may still go out today.
func (q *hostQueue) quotaLeft(v *version) bool {
	return v.qi < 0 || v.qi >= len(q.left) || q.left[v.qi] > 0
}

// asked reports whether the request asks work of resource r.
func (q *hostQueue) asked(r int) bool { return q.rsc[r].wantSecs > 0 || q.rsc[r].wantInst > 0 }

// needs reports whether resource r still needs work: asked, and not yet
// covered by at least one job, the seconds and the instances asked.
func (q *hostQueue) needs(r int) bool {
	rq := &q.rsc[r]
	return q.asked(r) && (rq.njobs == 0 || rq.secs < rq.wantSecs || rq.inst < rq.wantInst)
}

// fill is how much of its request resource r has been sent, as a
// fraction: of the seconds asked, or of the instances when it asked none.
func (q *hostQueue) fill(r int) float64 {
	rq := &q.rsc[r]
	if rq.wantSecs > 0 {
		return rq.secs / rq.wantSecs
	}
	if rq.wantInst > 0 {
		return rq.inst / rq.wantInst
	}
	return 1
}

// covered reports whether the request is covered: it asked some work,
// and no resource needs more.
func (q *hostQueue) covered() bool {
	asked := false
	for r := range q.rsc {
		if q.needs(r) {
			return false
		}
		asked = asked || q.asked(r)
	}
	return asked
}

// save keeps the queues as they are; restore returns to them.
func (q *hostQueue) save() {
	copy(q.saved, q.rsc)
	copy(q.savedLeft, q.left)
	q.savedDisk = q.disk
}

func (q *hostQueue) restore() {
	copy(q.rsc, q.saved)
	copy(q.left, q.savedLeft)
	q.disk = q.savedDisk
}

// fits returns "" if the job fits the host's memory and disk, or the
// reason it does not (one of the no_work reasons).
func (q *hostQueue) fits(e shmcache.Entry) string {
	return cmpOrStr(q.fitsMemory(e.RscMemoryBound), q.fitsDisk(e))
}

// fitsMemory returns "" if a task needing bound bytes of memory fits the
// host's, else reasonMemory.
func (q *hostQueue) fitsMemory(bound float64) string {
	if q.memory > 0 && finitePositive(bound) && bound > q.memory {
		return reasonMemory
	}
	return ""
}

// fitsDisk returns "" if the job fits the host's free disk, else
// reasonDisk.
func (q *hostQueue) fitsDisk(e shmcache.Entry) string {
	if q.disk > 0 && finitePositive(e.RscDiskBound) && e.RscDiskBound > q.disk {
		return reasonDisk
	}
	return ""
}

// deadline returns "" if the job, run with v, would finish before its
// deadline, else reasonDeadline.
func (q *hostQueue) deadline(e shmcache.Entry, v *version) string {
	// A job without a delay bound would be overdue the moment it is sent.
	if e.DelayBound <= 0 || q.end(v.rsc)+q.runtime(e.RscFpopsEst, v) > q.now+float64(e.DelayBound) {
		return reasonDeadline
	}
	return ""
}
