package scheduler

import (
	"context"

	"github.com/taskserver/taskserver/internal/hostav"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/shmcache"
	"github.com/taskserver/taskserver/internal/store"
)

// DecideInput is everything the send decision for one request depends on,
// read by the caller: DecideSends does no I/O and reads no clock, so the
// dry run (Explain) and the simulator's server model decide as a request
// would, from whatever state they keep.
type DecideInput struct {
	// Now is the Unix time the decision is made at.
	Now int64
	// Tables are the platforms, apps and app versions, as the feeder
	// publishes them.
	Tables shmcache.Tables
	// Entries are the candidates in the order the walk looks at them (a
	// request starts at a random slot; the decision starts at the first).
	Entries []shmcache.Entry
	Host    row.Host
	// HostAppVersions are what the host has shown of each version it ran.
	HostAppVersions []row.HostAppVersion
	// Held are the tasks the host holds: they fill its queues and count
	// against the in-progress limits, and their jobs are not sent again.
	Held []store.HostResult
	// Request is the request as parsed; it is not modified.
	Request *protocol.SchedulerRequest
	// User is the host's owner; its project preferences apply.
	User row.User
	// SentToUser are jobs an instance of which already went to the user:
	// the real send learns it only from the refused commit.
	SentToUser []int64
	// AskStoredGPUs makes each coprocessor the host row records (when the
	// request has no <coprocs>) ask a day of work per instance, as a dry
	// run for a request nobody sent assumes.
	AskStoredGPUs bool
	Policy        Policy
	// Rand draws the exploration of versions the host has too few results
	// with, uniform in [0, 1); nil explores nothing (the fastest versions
	// are chosen). A seeded source keeps a simulation deterministic.
	Rand func() float64
}

// DecidedSend is one candidate the decision sends.
type DecidedSend struct {
	// Entry indexes DecideInput.Entries.
	Entry int
	// AppVersionID is the version sent with (negative: an
	// anonymous-platform client's own build, by its resource's code).
	AppVersionID int64
	VersionNum   int
	PlanClass    string
	// Resource is the resource a task runs on (protocol.ResourceCPU, …).
	Resource string
	// Flops is the version's rate on the host, sent to the client for its
	// estimates; AvgNCPUs the CPUs a task uses, GPUUsage its GPU share.
	Flops, AvgNCPUs, GPUUsage float64
}

// Decision is the outcome of DecideSends.
type Decision struct {
	Sends []DecidedSend
	// Short is why fewer than asked were sent (a reason of
	// send_shortfall_total; ReasonText says it in words), "" when the
	// request is covered.
	Short string
	// Rejected is, per entry, why it was turned down; "" for one sent or
	// not reached.
	Rejected []string
	// Sent is, per entry, whether it was sent.
	Sent []bool
	// Limit is the most tasks the host may hold; Quarantined says it is
	// quarantined.
	Limit       int
	Quarantined bool
	// PlanClassRefusals are, per app, the plan classes that refuse the
	// host and the rule that fails.
	PlanClassRefusals map[string][]string
	// NoRscApps are the resources the host has that no app has a version
	// for (the reply's <no_rsc_apps>).
	NoRscApps []string
}

// DecideSends runs the scheduler's send decision for one request — the
// version choice, the per-resource queues and deadlines, memory and disk,
// quotas, preferences and in-progress limits, the walk over the candidates
// — without claims or writes, and returns what it would send and why not
// more. A request (the live scan) and this share the walk, so its answer
// is the scheduler's, apart from what only the commit can refuse (a job
// bound to another host class since it was cached) and the walk's random
// start.
func DecideSends(in DecideInput) Decision {
	s := &Service{}
	s.opts.setPolicy(in.Policy)
	h, req := in.Host, in.Request
	if req == nil {
		req = &protocol.SchedulerRequest{}
	}
	prefs := prefsOf(in.User)
	cat := newCatalog(in.Tables, 0, s.opts.PlanClasses)
	ch := cat.choose(req, h, choiceParams{plans: s.opts.PlanClasses, havs: in.HostAppVersions, beta: prefs.AllowBeta,
		rand: in.Rand, quota: s.opts.DailyResultQuota, gpuQuota: s.opts.GPUQuotaMultiplier, day: hostav.Day(in.Now)})
	if in.AskStoredGPUs && req.Coprocs == nil {
		for r := 1; r < len(ch.rsc); r++ {
			c := &ch.rsc[r]
			c.ReqSecs, c.ReqInstances = 86400*float64(c.Count), float64(c.Count)
		}
	}
	q := newHostQueue(in.Now, h, req, ch.rsc, s.opts.MaxResultsPerRPC, ch.quota)
	skip := make(map[int64]bool, len(in.SentToUser)+len(in.Held))
	for _, id := range in.SentToUser {
		skip[id] = true
	}
	for _, hr := range in.Held {
		skip[hr.WorkunitID] = true
		q.add(hr.RscFpopsEst, 0, ch.held(hr.AppVersionID))
	}
	w := s.newWalk(h, cat, ch, q, len(in.Held), skip)
	s.setPrefsLimits(w, prefs, req, in.Held)
	w.dry = true
	d := Decision{Rejected: make([]string, len(in.Entries)), Sent: make([]bool, len(in.Entries)),
		PlanClassRefusals: ch.refusals, NoRscApps: ch.noRscApps()}
	var slots []int // of the sends, in the order they were made
	w.trace = func(i int, _ shmcache.Entry, reason string) {
		// A second pass (other apps) replaces the first's verdicts.
		d.Rejected[i], d.Sent[i] = reason, reason == ""
		if reason == "" {
			slots = append(slots, i)
		}
	}
	x := &rpc{req: req, now: in.Now, host: h, user: row.User{ID: h.UserID}, reply: &protocol.SchedulerReply{}}
	// A dry run makes no call that can fail.
	sent, short, _ := s.scanPasses(context.Background(), x, entryList(in.Entries), w)
	d.Short, d.Limit, d.Quarantined = short, w.limit, w.quar
	for k, it := range sent {
		v := it.v
		d.Sends = append(d.Sends, DecidedSend{Entry: slots[k], AppVersionID: v.sendID(ch), VersionNum: v.versionNum,
			PlanClass: v.planClass, Resource: v.resource(), Flops: v.flops, AvgNCPUs: v.avgNCPUs, GPUUsage: v.gpuUsage})
	}
	return d
}
