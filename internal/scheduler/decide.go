package scheduler

import (
	"cmp"

	"github.com/taskserver/taskserver/internal/projectprefs"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/shmcache"
)

// reasonText explains each reason of send_shortfall_total to an operator
// (taskctl host explain); it is also the fixed label set, pre-created at 0.
var reasonText = map[string]string{
	reasonNoCachedWork:     "the cache held nothing more the host could be offered (empty, or taken by other hosts)",
	reasonCacheUnavailable: "the feeder's shared-memory cache could not be read (is the feeder running?)",
	reasonPlatform:         "no app version for the host's platforms",
	reasonAppDeprecated:    "the job's app is deprecated",
	reasonMemory:           "the job needs more memory than the host has (rsc_memory_bound > m_nbytes)",
	reasonDisk:             "the job needs more free disk than the host has left (rsc_disk_bound > d_free)",
	reasonDeadline:         "the host would not finish the job before its deadline (queue + runtime > delay_bound)",
	reasonInProgressLimit:  "the host holds as many tasks as it may (--max-in-progress-per-cpu × CPUs)",
	reasonQuarantined:      "the host is quarantined (error streak ≥ --quarantine-streak): one task at a time",
	reasonOnePerUser:       "an instance of the job is already on this host or went to its user",
	reasonHR:               "the job is bound to another homogeneous-redundancy host class",
	reasonReliableOnly:     "the instance is reserved for reliable hosts (trusted, quick to report)",
	reasonRPCLimit:         "the reply is full (--max-results-per-rpc)",
	reasonDatabase:         "the database failed during the request",
	reasonPlanClass:        "the plan classes of the app's versions refuse the host (taskctl host explain names the rule)",
	reasonResource:         "the job's versions use only resources the request asks no (more) work for",
	reasonDailyQuota:       "the host has had its daily quota of jobs of the app's versions (--daily-result-quota, shrunk by its errors)",
	// Preferences and limits (prefslimits.go).
	reasonNotSelected:     "the volunteer's project preferences select other apps (<app_id>), and those had work or other apps are not accepted (<allow_non_preferred_apps>)",
	reasonBeta:            "the app or its version is a beta, and the volunteer's project preferences do not allow beta work (<allow_beta_work>)",
	reasonResourcePref:    "the volunteer's project preferences say not to use this resource (<no_cpu>, <no_cuda>, <no_ati>, <no_intel_gpu>, <no_apple_gpu>, <no_gpus>)",
	reasonGPUInProgress:   "the host holds as many tasks for this GPU type as it may (--max-in-progress-per-gpu × its GPUs of the type)",
	reasonAppInProgress:   "the host holds as many tasks of this app as it may (--app-max-in-progress)",
	reasonPrefsInProgress: "the host holds as many tasks as the volunteer's project preferences allow (<max_jobs>)",
	reasonTotalInProgress: "the host holds as many tasks as the project allows in all",
}

// ReasonText returns what a reason of send_shortfall_total (or a
// candidate's rejection) means, or "" for an unknown one.
func ReasonText(reason string) string { return reasonText[reason] }

// walk is one request's send decision over the cache: the host, its queue,
// and what the walk has decided so far. The live scan and the dry run
// (Explain) share it, so an explanation is the decision itself.
type walk struct {
	host       row.Host
	cat        *catalog
	ch         *choice
	q          *hostQueue
	quar       bool
	hostClass  [3]int // by homogeneous redundancy mode
	limit      int    // tasks the host may hold in all (capOf)
	limitWhy   string // the reason when it holds them
	nheld      int    // tasks it holds
	trustValid int
	// skipJob are the jobs the host holds or was just sent (and, in a dry
	// run, those already sent to its user): one instance per user.
	skipJob map[int64]bool
	// hrBound are jobs the commit found bound to another host class.
	hrBound  map[int64]bool
	rejected map[string]int // candidates turned down, by reason
	seen     int            // candidates looked at
	// held are the sticky files the host lists as present and those sent
	// to it in this reply; nil when it lists none (see diskNeed).
	held map[string]bool
	// unread are the jobs sent in this reply whose sticky inputs were not
	// read (they fitted without a credit): read, into held, only when a
	// later job needs the credit.
	unread []shmcache.Entry
	// dry runs the decision without claims or writes.
	dry bool
	// trace, if set, hears every verdict: reason "" is a send.
	trace func(slot int, e shmcache.Entry, reason string)
	// prefs are the volunteer's project preferences, pass the apps they
	// allow in this walk over the cache (see scanPasses); lim counts the
	// host's tasks against the in-progress limits (setPrefsLimits).
	prefs projectprefs.Prefs
	pass  projectprefs.Pass
	lim   *inProgress
}

// newWalk starts the decision for a host holding nheld tasks (already in q
// and skipJob).
func (s *Service) newWalk(h row.Host, cat *catalog, ch *choice, q *hostQueue, nheld int,
	skipJob map[int64]bool) *walk {
	quar := quarantined(h, s.opts.QuarantineStreak)
	return &walk{
		host: h,
		cat:  cat,
		ch:   ch,
		q:    q,
		quar: quar,
		hostClass: [...]int{hrFine: hrClass(hrFine, h.OSName, h.PVendor, h.PModel),
			hrCoarse: hrClass(hrCoarse, h.OSName, h.PVendor, h.PModel)},
		limit:      inProgressLimit(h, s.opts.MaxInProgressPerCPU, quar),
		nheld:      nheld,
		trustValid: s.opts.ARTrustValid,
		skipJob:    skipJob,
		hrBound:    map[int64]bool{},
		rejected:   map[string]int{},
	}
}

// check decides whether the cached instance e may go to the host: it
// returns the version to send it with and the host class to bind its job
// to, or why not. Of the app's versions (one per resource, fastest first)
// whose resource still needs work and that would meet the deadline, the
// one whose resource has the least of its request covered so far is the
// one, the fastest on a tie: a host asking for CPU and GPU work gets both,
// not a reply filled with the faster resource's tasks.
func (w *walk) check(e shmcache.Entry) (v version, hr int, reason string) {
	if w.hrBound[e.WorkunitID] {
		return v, 0, reasonHR
	}
	if w.skipJob[e.WorkunitID] {
		return v, 0, reasonOnePerUser
	}
	vs := w.ch.byApp[e.AppID]
	if len(vs) == 0 {
		if why := w.ch.why[e.AppID]; why != "" {
			return v, 0, why
		}
		if a, ok := w.cat.appByID[e.AppID]; ok && a.Deprecated {
			return v, 0, reasonAppDeprecated
		}
		return v, 0, reasonPlatform
	}
	app := &vs[0].app
	if e.Flags&row.SendReliableOnly != 0 && (w.quar || !reliableHost(w.host, w.trustValid, e.DelayBound)) {
		return v, 0, reasonReliableOnly
	}
	if m := app.HomogeneousRedundancy; m == hrFine || m == hrCoarse {
		hr = w.hostClass[m]
	}
	if hr != 0 && e.HRClass != 0 && int(e.HRClass) != hr {
		return v, 0, reasonHR
	}
	if why := w.q.fitsDisk(e); why != "" {
		return v, 0, why
	}
	why, best, bestFill := "", -1, 0.0
	for i := range vs {
		c := &vs[i]
		if !w.q.needs(c.rsc) {
			continue
		}
		// A plan class that says what a task uses replaces the job's
		// memory bound, as BOINC's does.
		if d := w.q.fitsMemory(cmp.Or(c.memBytes, e.RscMemoryBound)); d != "" {
			why = cmpOrStr(why, d)
			continue
		}
		if d := appAllowed(w.prefs, c.app, c.av, c.resource(), w.pass); d != "" {
			why = cmpOrStr(why, d)
			continue
		}
		if w.lim != nil {
			if d := w.lim.allow(e.AppID, c.resource()); d != "" {
				why = cmpOrStr(why, d)
				continue
			}
		}
		if !w.q.quotaLeft(c) {
			why = cmpOrStr(why, reasonDailyQuota)
			continue
		}
		if d := w.q.deadline(e, c); d != "" {
			why = cmpOrStr(why, d)
			continue
		}
		if f := w.q.fill(c.rsc); best < 0 || f < bestFill {
			best, bestFill = i, f
		}
	}
	if best >= 0 {
		return vs[best], hr, ""
	}
	return v, 0, cmpOrStr(why, reasonResource)
}

// reject records that the instance in slot i was turned down.
func (w *walk) reject(i int, e shmcache.Entry, reason string) {
	w.rejected[reason]++
	if w.trace != nil {
		w.trace(i, e, reason)
	}
}

// short returns why the walk sent fewer than asked (nsent instances), or ""
// if it sent enough. A limit that was reached wins; otherwise the walk ran
// out of candidates, and the reason most candidates were turned down for
// is the answer.
func (w *walk) short(nsent, maxPerRPC int) string {
	switch {
	case w.q.covered():
		return ""
	case nsent >= maxPerRPC:
		return reasonRPCLimit
	case w.nheld+nsent >= w.limit:
		if w.quar {
			return reasonQuarantined
		}
		return cmp.Or(w.limitWhy, reasonInProgressLimit)
	case w.seen == 0:
		return reasonNoCachedWork
	}
	best, bestN := reasonNoCachedWork, 0
	for _, r := range rejectOrder {
		if w.rejected[r] > bestN {
			best, bestN = r, w.rejected[r]
		}
	}
	return best
}
