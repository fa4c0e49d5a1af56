package clientpolicy

import "math"

// NextRPC decides whether to contact a scheduler now, and which one. A
// project with a finished task overdue for reporting (it finished
// Config.ReportAfter ago, or its deadline is Config.ReportMargin away)
// gets a report-result session, which asks for work too if the host needs
// some (seed 002). Otherwise, if some project will starve within T, a
// get-work session goes to the project with work_request_size > 0 and the
// greatest LTD - time_until_work_done (seed 001). Projects with MinRPC >
// now are never chosen, nor asked for work during no-work back-off. ok is
// false when no RPC is due now.
func (h *Host) NextRPC(now float64) (req WorkRequest, ok bool) {
	c := h.cfg()
	due := h.reportDue(c)
	var report *Project
	reportAt := math.Inf(1)
	for _, p := range h.Projects {
		if at, ok := due[p]; ok && p.MinRPC <= now && at <= now && at < reportAt {
			report, reportAt = p, at
		}
	}
	v := h.view()
	if report != nil {
		plan := h.workFetch(now, report, v)
		return WorkRequest{Project: report, Seconds: plan.request[report], Urgency: plan.urgency, Report: true}, true
	}

	plan := h.workFetch(now, nil, v)
	if plan.urgency == DontNeedWork {
		return WorkRequest{}, false
	}
	var best *Project
	for _, p := range h.Projects {
		if plan.request[p] <= 0 {
			continue
		}
		if best == nil || p.LTD-plan.ttwd[p] > best.LTD-plan.ttwd[best] {
			best = p
		}
	}
	if best == nil {
		return WorkRequest{}, false
	}
	return WorkRequest{
		Project: best,
		Seconds: plan.request[best],
		Urgency: plan.urgency,
		Report:  hasKey(due, best),
	}, true
}

// overdueAt is when finished task t forces a report-result session.
func overdueAt(t *Task, c Config) float64 {
	if c.ReportAfter == ReportImmediately {
		return t.Finished
	}
	return min(t.Finished+c.ReportAfter, t.Deadline-c.ReportMargin)
}

// NextRPCTime is the earliest time at which NextRPC could return ok if
// nothing else changes (no task finishes, nothing arrives, running tasks
// go on computing): over the projects, the time a finished task becomes
// overdue or the work buffer can fall to T, not before the project's
// MinRPC (and WorkFetchAt, for work). It is never before now, and +Inf
// when nothing is ever due. Event loops sleep until then; the answer errs
// early, never late.
func (h *Host) NextRPCTime(now float64) float64 {
	c := h.cfg()
	due := h.reportDue(c)
	v := h.view()
	next := math.Inf(1)
	for _, p := range h.Projects {
		open := max(now, p.MinRPC)
		if at, ok := due[p]; ok {
			next = min(next, max(at, open))
		}
		if p.NoApps {
			continue // never asked for work
		}
		next = min(next, max(v.starveTime(p, now), open, p.WorkFetchAt))
	}
	return max(next, now)
}

func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}

// Reply is what the caller learned from a successful RPC.
type Reply struct {
	RequestDelay float64 // the reply's <request_delay>, seconds (0: none)
	AskedSeconds float64 // the work asked for
	NewTasks     int     // tasks received (the caller has AddTask-ed them)
	// Overloaded says the server sent nothing because it is busy (it
	// marked the reply <overloaded/>), not because it has no work: the
	// project keeps its place in the work fetch, its debt keeps
	// accumulating, and only RequestDelay holds the next RPC back.
	Overloaded bool
}

// RPCSucceeded records a successful RPC to p at now: the failure count
// resets and MinRPC honours the reply's request_delay. A work request
// that got nothing starts or lengthens the no-work back-off (and stops
// the project's long-term debt from accumulating); one that got tasks
// ends it. u is a uniform random number in [0,1) for the jitter.
func (h *Host) RPCSucceeded(p *Project, now float64, r Reply, u float64) {
	c := h.cfg()
	p.RPCFailures = 0
	p.MinRPC = now + max(r.RequestDelay, 0)
	switch {
	case r.Overloaded && r.NewTasks == 0:
		// Neither a no-work reply nor a success: the back-off and the
		// long-term debt stay as they were.
	case r.NewTasks > 0:
		p.NoWorkReplies, p.LastNoWork, p.WorkFetchAt = 0, false, 0
	case r.AskedSeconds > 0:
		p.NoWorkReplies++
		p.LastNoWork = true
		p.WorkFetchAt = now + Backoff(p.NoWorkReplies, c.WorkFetchBackoffMin, c.WorkFetchBackoffMax, u)
	}
}

// TaskFailed records that a task of p crashed (a compute error) or that
// one of its files failed to download or upload, at now: the project's
// minimum RPC time backs off exponentially in the number of consecutive
// such failures (seed 002: "to prevent a cycle of rapid failures"),
// between Config.ErrorBackoffMin and ErrorBackoffMax, with jitter u in
// [0,1).
func (h *Host) TaskFailed(p *Project, now float64, u float64) {
	c := h.cfg()
	p.TaskErrors++
	p.MinRPC = max(p.MinRPC, now+Backoff(p.TaskErrors, c.ErrorBackoffMin, c.ErrorBackoffMax, u))
}

// TaskSucceeded records a task of p that computed and uploaded its
// output: the failure back-off starts again from its minimum.
func (h *Host) TaskSucceeded(p *Project) { p.TaskErrors = 0 }

// RPCFailed records a failed RPC to p at now: no RPC to p until a
// randomised exponential back-off has passed (seed 002), so hosts that
// failed together do not come back together. u is a uniform random number
// in [0,1).
func (h *Host) RPCFailed(p *Project, now float64, u float64) {
	c := h.cfg()
	p.RPCFailures++
	p.MinRPC = now + Backoff(p.RPCFailures, c.RPCBackoffMin, c.RPCBackoffMax, u)
}

// Backoff is the randomised exponential back-off after n >= 1 consecutive
// failures: lo x 2^(n-1) capped at hi, times (0.5+u), capped at hi again.
// It is 0 for n < 1.
func Backoff(n int, lo, hi, u float64) float64 {
	if n < 1 {
		return 0
	}
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return min(d*(0.5+u), hi)
}
