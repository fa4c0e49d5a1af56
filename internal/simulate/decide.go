package simulate

import (
	"fmt"
	"math"
	"strings"

	"github.com/taskserver/taskserver/internal/planclass"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/scheduler"
	"github.com/taskserver/taskserver/internal/shmcache"
	"github.com/taskserver/taskserver/internal/store"
)

// The simulated project's catalogue: one platform, a CPU app (its version
// multi-threaded when the job is) and, when the project has GPU jobs, a
// GPU app with an NVIDIA version.
const (
	simPlatform  = "x86_64-pc-linux-gnu"
	cpuAppID     = 1
	gpuAppID     = 2
	cpuVersionID = 1
	gpuVersionID = 2
	planMT       = "mt"
	planGPU      = "cuda"
)

// catalogue is what the project's server model decides with: the tables
// and policy the real scheduler would have, and the unsent jobs as the
// feeder's cache would hold them.
type catalogue struct {
	tables shmcache.Tables
	policy scheduler.Policy
	// unsent are the jobs waiting to be sent, CPU app's first: the
	// project always has work, so each one sent is replaced by a new one
	// (the feeder refilling its slot).
	unsent []shmcache.Entry
	nextID int64
	// shortfalls counts the decisions that sent less than asked, by the
	// scheduler's reason.
	shortfalls map[string]int64
}

// newCatalogue builds project p's tables, plan classes and unsent jobs.
func newCatalogue(p Project) (*catalogue, error) {
	c := &catalogue{shortfalls: map[string]int64{}}
	c.tables.Platforms = []row.Platform{{ID: 1, Name: simPlatform}}
	c.tables.Apps = []row.App{{ID: cpuAppID, Name: p.Name}}
	var specs strings.Builder
	cpu := row.AppVersion{ID: cpuVersionID, AppID: cpuAppID, VersionNum: 100, PlatformID: 1}
	if p.Job.NCPUs > 1 {
		cpu.PlanClass = planMT
		fmt.Fprintf(&specs, "<plan_class><name>%s</name><max_threads>%d</max_threads></plan_class>", planMT, int(math.Ceil(p.Job.NCPUs)))
	}
	c.tables.AppVersions = []row.AppVersion{cpu}
	if p.GPUJob != nil {
		c.tables.Apps = append(c.tables.Apps, row.App{ID: gpuAppID, Name: p.Name + "_gpu"})
		c.tables.AppVersions = append(c.tables.AppVersions,
			row.AppVersion{ID: gpuVersionID, AppID: gpuAppID, VersionNum: 100, PlatformID: 1, PlanClass: planGPU})
		fmt.Fprintf(&specs, "<plan_class><name>%s</name><gpu_type>nvidia</gpu_type></plan_class>", planGPU)
	}
	c.policy = scheduler.Policy{MaxResultsPerRPC: p.Server.MaxTasks, MaxInProgressPerCPU: p.Server.MaxInProgressPerCPU,
		MaxInProgressPerGPU: p.Server.MaxInProgressPerGPU}
	if specs.Len() > 0 {
		s, err := planclass.Parse(strings.NewReader("<plan_classes>" + specs.String() + "</plan_classes>"))
		if err != nil {
			return nil, fmt.Errorf("project %s: plan classes: %w", p.Name, err)
		}
		c.policy.PlanClasses = s
	}
	// One reply's worth of each app: a request can be covered from the
	// cache, as from a feeder that keeps up.
	for range max(p.Server.MaxTasks, 1) {
		c.unsent = append(c.unsent, c.newEntry(cpuAppID, p.Job))
	}
	if p.GPUJob != nil {
		for range max(p.Server.MaxTasks, 1) {
			c.unsent = append(c.unsent, c.newEntry(gpuAppID, *p.GPUJob))
		}
	}
	return c, nil
}

// newEntry is a new unsent job of app appID shaped as job.
func (c *catalogue) newEntry(appID int64, job Job) shmcache.Entry {
	c.nextID++
	return shmcache.Entry{ResultID: c.nextID, WorkunitID: c.nextID, AppID: appID, RscFpopsEst: job.FpopsEst,
		DelayBound: int64(job.DelayBound.Seconds())}
}

// hostRow is host h as the scheduler's host row describes it: its CPUs
// and their speed, and the fraction of the time it computes as its client
// measures it (the scheduler's on_frac × active_frac).
func hostRow(h *host) row.Host {
	id := int64(h.index) + 1
	return row.Host{ID: id, UserID: id, PNCPUs: h.policy.NCPUs, PFpops: h.flops, OnFrac: 1,
		ActiveFrac: h.policy.ActiveFrac}
}

// request is the scheduler request of host h asking seconds of work for
// one resource (gpu: its GPUs, else its CPUs), its GPUs described.
func request(h *host, gpu bool, seconds float64) *protocol.SchedulerRequest {
	req := &protocol.SchedulerRequest{PlatformName: simPlatform}
	if !gpu {
		req.WorkReqSeconds, req.CPUReqSecs = seconds, seconds
	}
	if h.gpu != nil {
		n := &protocol.CoprocNVIDIA{Count: h.gpu.NCPUs, Name: "simulated GPU", HaveCUDA: 1, PeakFlops: h.gpuFlops,
			AvailableRAM: 8 << 30, TotalGlobalMem: 8 << 30}
		if gpu {
			n.ReqSecs = seconds
		}
		req.Coprocs = &protocol.Coprocs{NVIDIA: n}
	}
	return req
}

// held are the project's tasks host h holds (k: the project's position
// in the host's list), as the scheduler lists them: they fill its queues
// and count against its limits. A task's job is its negated id, apart
// from any unsent job's.
func (srv *server) held(h *host, k int) []store.HostResult {
	var out []store.HostResult
	for _, pol := range h.policies() {
		app, av, fpops := int64(cpuAppID), int64(cpuVersionID), srv.project.Job.FpopsEst
		if pol == h.gpu {
			app, av = gpuAppID, gpuVersionID
			if srv.project.GPUJob != nil {
				fpops = srv.project.GPUJob.FpopsEst
			}
		}
		for _, t := range pol.Tasks {
			if t.Project != pol.Projects[k] {
				continue
			}
			out = append(out, store.HostResult{ID: t.ID, WorkunitID: -t.ID, AppID: app, AppVersionID: av,
				ReportDeadline: int64(t.Deadline), SentTime: int64(t.Received), RscFpopsEst: fpops})
		}
	}
	return out
}

// decide runs the real scheduler's send decision for host h's request
// of seconds of work for one resource, over the project's unsent jobs,
// and takes the jobs it sends out of them (replacing each by a new one).
// It returns the sends with their jobs' shapes, and why it sent less than
// asked ("" if it did not).
func (srv *server) decide(h *host, k int, gpu bool, seconds, now float64) ([]scheduler.DecidedSend, []Job, string) {
	c := srv.cat
	d := scheduler.DecideSends(scheduler.DecideInput{
		Now: int64(now), Tables: c.tables, Entries: c.unsent, Host: hostRow(h), Held: srv.held(h, k),
		Request: request(h, gpu, seconds), Policy: c.policy, Rand: h.rng.Float64,
	})
	if d.Short != "" {
		c.shortfalls[d.Short]++
	}
	jobs := make([]Job, len(d.Sends))
	for i, sd := range d.Sends {
		e := c.unsent[sd.Entry]
		job := srv.project.Job
		if e.AppID == gpuAppID {
			job = *srv.project.GPUJob
		}
		jobs[i] = job
		c.unsent[sd.Entry] = c.newEntry(e.AppID, job)
	}
	return d.Sends, jobs, d.Short
}
