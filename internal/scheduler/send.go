package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/hostav"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/scheduler/decide"
	"github.com/taskserver/taskserver/internal/shmcache"
	"github.com/taskserver/taskserver/internal/store"
)

// noWorkText is the message a client shows when it asked for work and got
// none, by reason.
var noWorkText = map[string]string{
	reasonNoCachedWork:     "No tasks are available at the moment",
	reasonCacheUnavailable: "No tasks are available at the moment",
	reasonAppDeprecated:    "The available tasks belong to applications this project no longer runs",
	reasonPlatform:         "No tasks are available for the applications and platforms your computer can run",
	reasonMemory:           "The available tasks need more memory than your computer has",
	reasonDisk:             "The available tasks need more free disk space than your computer has",
	reasonDeadline:         "The available tasks would not finish before their deadlines on your computer",
	reasonInProgressLimit:  "Your computer has reached this project's limit of tasks in progress",
	reasonOnePerUser:       "The available tasks have already been sent to your account",
	reasonHR:               "The available tasks are reserved for computers of another type (homogeneous redundancy)",
	reasonQuarantined:      "Your computer has returned too many errors lately: it gets one task at a time until it returns a valid result",
	reasonReliableOnly:     "The available tasks are reserved for computers that return valid results quickly",
	reasonPlanClass:        "Your computer does not meet the requirements (plan class) of the available tasks' applications",
	reasonResource:         "No tasks are available for the processors (CPU or GPU) your computer asked work for",
	reasonDailyQuota:       "Your computer has reached its daily quota of tasks for this project's applications; more will be sent tomorrow",
	reasonNotSelected:      "No tasks are available for the applications you have selected",
	reasonBeta:             "The available tasks are test (beta) tasks, and your project preferences do not accept them",
	reasonResourcePref:     "Tasks are available, but your project preferences are set not to use this processor type",
	reasonGPUInProgress:    "Your computer has reached this project's limit of GPU tasks in progress",
	reasonAppInProgress:    "Your computer has reached this project's limit of tasks in progress for the available application",
	reasonPrefsInProgress:  "Your computer has reached the limit of tasks in progress set in your project preferences",
	reasonTotalInProgress:  "Your computer has reached this project's limit of tasks in progress",
}

// rejectOrder breaks ties between reasons, most specific first.
var rejectOrder = []string{reasonMemory, reasonDisk, reasonDeadline, reasonOnePerUser, reasonHR, reasonReliableOnly,
	reasonAppInProgress, reasonGPUInProgress, reasonInProgressLimit, reasonPrefsInProgress, reasonTotalInProgress,
	reasonDailyQuota, reasonPlanClass, reasonResourcePref, reasonBeta, reasonNotSelected, reasonResource,
	reasonAppDeprecated, reasonPlatform}

// sendItem is a result going into the reply.
type sendItem struct {
	resultID int64
	v        version
	resent   bool
}

// taskFate is what becomes of a task the host holds, as its request tells.
type taskFate int

const (
	// taskKept is still on the host: it counts in the host's queue.
	taskKept taskFate = iota
	// taskReported is finished: reported in this request, whose report
	// failed if the task is still held; it will come again.
	taskReported
	// taskLost is missing from the client's complete list of its tasks and
	// still needed: it is resent.
	taskLost
	// taskDropped is lost and past its deadline (the transitioner times it
	// out) or its job no longer needs it (as BOINC, no resend).
	taskDropped
)

// completeList reports whether req lists every task its client holds: it
// lists them, and no reports were left unread past the parser's limits
// (their names are unknown, so no task can be taken for lost).
func completeList(req *protocol.SchedulerRequest) bool {
	return req.HasOtherResults && req.ReportsLeft == 0
}

// heldFate decides a task the host holds from what the request says of it:
// reported in it, listed among the client's tasks, and whether that list is
// complete (completeList).
func heldFate(hr store.HostResult, reported, listed, complete bool, now int64) taskFate {
	switch {
	case reported:
		return taskReported
	case !complete || listed:
		return taskKept
	case hr.ReportDeadline <= now || hr.JobDone:
		return taskDropped
	}
	return taskLost
}

// sendWork resends results the host has lost and sends new ones from the
// cache, then puts them all in the reply. The request's reports and host row
// are committed with its first sends; an error means that commit failed.
func (s *Service) sendWork(ctx context.Context, x *rpc) error {
	req := x.req
	asked := asksWork(req)
	if !asked && !req.HasOtherResults {
		return nil
	}
	if x.dbErr {
		// Reports just failed: don't add load to a database in trouble.
		if asked {
			s.m.shortfallBy[reasonDatabase].Inc()
			x.reply.Overloaded = &protocol.Empty{}
			x.reply.Messages = append(x.reply.Messages, protocol.Message{Priority: "low",
				Text: "No tasks sent: the project's database is busy; try again later"})
		}
		return nil
	}

	var cat *catalog
	var ch *choice
	prefs := prefsOf(x.user)
	cache, cacheErr := s.deps.Cache.Current()
	if cacheErr == nil {
		cat, cacheErr = s.catalog.get(cache)
	}
	rsc := ch.resources(x.host, req)
	if cacheErr != nil {
		s.log.Warn("shared-memory cache unavailable", "error", cacheErr)
	} else {
		p := choiceParams{plans: s.opts.PlanClasses, rand: s.deps.Rand, beta: prefs.AllowBeta, quota: s.opts.DailyResultQuota,
			gpuQuota: s.opts.GPUQuotaMultiplier, day: hostav.Day(x.now)}
		var err error
		if p.havs, err = s.hostAppVersions(ctx, x); err != nil {
			return err
		}
		ch = cat.choose(req, x.host, p)
		rsc = ch.rsc
		x.reply.NoRscApps = ch.noRscApps()
	}

	x.rsc = rsc
	var quota []int
	if ch != nil {
		quota = ch.quota
	}
	queue := newHostQueue(x.now, x.host, req, rsc, s.opts.MaxResultsPerRPC, quota)
	listed := map[string]bool{}
	for _, o := range req.OtherResults {
		listed[o.Name] = true
	}
	complete := completeList(req)
	held := make([]store.HostResult, 0, len(x.held))
	for _, hr := range x.held {
		held = append(held, hr)
	}
	slices.SortFunc(held, func(a, b store.HostResult) int { return cmp.Compare(a.ID, b.ID) })
	var items []sendItem
	nheld := 0
	var kept []store.HostResult // held and resent: counted against the limits
	hostJobs := map[int64]bool{}
	for _, hr := range held {
		hostJobs[hr.WorkunitID] = true
		switch heldFate(hr, x.reported[hr.Name], listed[hr.Name], complete, x.now) {
		case taskReported, taskDropped:
			continue
		case taskLost:
			if ch == nil {
				continue
			}
			v, ok := ch.forResend(hr.AppID, hr.AppVersionID, hr.AppVersionNum)
			if !ok {
				continue
			}
			items = append(items, sendItem{resultID: hr.ID, v: v, resent: true})
		}
		nheld++
		kept = append(kept, hr)
		queue.add(hr.RscFpopsEst, 0, ch.held(hr.AppVersionID))
	}

	if asked {
		var sent []sendItem
		reason := reasonCacheUnavailable
		if cacheErr == nil {
			var err error
			w := s.newWalk(x.host, cat, ch, queue, nheld, hostJobs)
			w.held = heldSticky(x.req)
			s.setPrefsLimits(w, prefs, req, kept)
			sent, reason, err = s.scanPasses(ctx, x, cache, w)
			if err != nil {
				return err
			}
		}
		items = append(items, sent...)
		if reason != "" {
			s.m.shortfallBy[reason].Inc()
		}
		if text, ok := noWorkText[reason]; ok && len(items) == 0 {
			s.m.noWork.WithLabelValues(reason).Inc()
			x.reply.Messages = append(x.reply.Messages, protocol.Message{Priority: "low", Text: text})
		}
	}
	if !x.committed {
		// The reports and the host row are written before the reply
		// promises anything.
		if _, err := s.commitRound(ctx, x, nil); err != nil {
			return err
		}
	}
	if len(items) > 0 {
		s.addResults(ctx, x, items)
	}
	return nil
}

// candidate is a claimed cache slot waiting for its send to be committed.
type candidate struct {
	slot      int
	cl        shmcache.Claim
	e         shmcache.Entry
	v         version
	replicate bool
	p         store.SchedSend
	// sticky are the job's sticky inputs, when the disk check credits
	// them (see diskNeed); stickyRead says they were read.
	sticky     []jobxml.InputFile
	stickyRead bool
}

// scan walks the cache from a random slot (so concurrent requests spread
// over it) and claims what fits the host, until the request is covered or a
// limit is reached. Claims are committed in rounds through the group
// committer (the first round with the request's reports and host row); a
// send refused in a round (the job already went to this user, another host
// class took it) lets the walk go on. It returns what it sent and, if that
// is less than asked, why (a reason of send_shortfall_total); a failure of
// the first round is the error, a later one is logged and stops the walk
// (reason database).
//
// In a dry run (w.dry) the walk starts at slot 0, claims nothing, commits
// nothing and takes every send as done: the same decision, with no effect.
func (s *Service) scan(ctx context.Context, x *rpc, c Cache, w *walk) ([]sendItem, string, error) {
	if len(w.ch.byApp) == 0 {
		return nil, w.ch.noVersion(), nil
	}
	n := c.NSlots()
	if n <= 0 {
		return nil, reasonNoCachedWork, nil
	}
	q := w.q
	var sent []sendItem
	start := 0
	if !w.dry {
		start = rand.IntN(n)
	}
	k := 0
	// deferred are the slots a round passed over because another instance
	// of their job was claimed in it: what becomes of that send decides
	// their fate, so the next round looks at them first. Ending the round
	// at such a slot instead cost a transaction per job sent, as the
	// feeder caches a job's instances side by side.
	var deferred []int
	for {
		// One round: claim what would cover the request if every send
		// went through.
		var round []candidate
		inRound := map[int64]bool{} // jobs claimed in this round
		// Sticky inputs of the jobs claimed in this round: there if their
		// sends go through (the sends that do are then counted again).
		roundHeld := map[string]bool{}
		q.save()
		revisit := deferred
		deferred = nil
		for len(revisit) > 0 || k < n {
			m := len(sent) + len(round)
			if (m > 0 && q.covered()) || m >= s.opts.MaxResultsPerRPC || w.nheld+m >= w.limit {
				deferred = append(deferred, revisit...)
				break
			}
			var i int
			if len(revisit) > 0 {
				i, revisit = revisit[0], revisit[1:]
			} else {
				i = (start + k) % n
				k++
			}
			e, ok := c.Peek(i)
			if !ok {
				continue
			}
			if inRound[e.WorkunitID] {
				deferred = append(deferred, i)
				continue
			}
			w.seen++
			// The job's whole disk bound first: only a job that does not fit
			// that way has its document read, to credit the sticky inputs the
			// host holds (most requests fit and cost no read).
			var sticky []jobxml.InputFile
			stickyRead := false
			v, hr, why := w.check(e)
			if why == reasonDisk && w.held != nil {
				s.readSentSticky(ctx, w, round, roundHeld)
				sticky, stickyRead = s.stickyInputs(ctx, w, e), true
				if len(sticky) > 0 {
					de := e
					de.RscDiskBound = diskNeed(e.RscDiskBound, sticky, w.held, roundHeld)
					v, hr, why = w.check(de)
				}
			}
			if why != "" {
				w.reject(i, e, why)
				continue
			}
			cl := shmcache.Claim{Entry: e}
			replicate := false
			if !w.dry {
				cl, ok = c.Claim(i, s.deps.ClaimerPID, x.now)
				if !ok {
					s.m.claims.WithLabelValues(claimConflict).Inc()
					continue
				}
				if cl.Entry != e {
					// Refilled between the look and the claim: leave it for others.
					c.Unclaim(cl)
					s.m.claims.WithLabelValues(claimConflict).Inc()
					continue
				}
				replicate = replicates(v.app, x.host, s.opts.ARTrustValid, s.opts.ARSpotCheck, w.quar, s.deps.Rand)
			}
			round = append(round, candidate{slot: i, cl: cl, e: e, v: v, replicate: replicate, sticky: sticky, stickyRead: stickyRead, p: store.SchedSend{
				ResultID:       e.ResultID,
				WorkunitID:     e.WorkunitID,
				HostID:         x.host.ID,
				UserID:         x.user.ID,
				AppVersionID:   v.sendID(w.ch),
				AppVersionNum:  v.versionNum,
				FlopsEstimate:  finite(v.flops),
				Resource:       v.anonResource(w.ch),
				ReportDeadline: x.now + e.DelayBound,
				Now:            x.now,
				HRClass:        hr,
				Replicate:      replicate,
				CheckWorkunit:  s.sendable,
			}})
			// Counted as sent until the commit says otherwise.
			w.countSend(e.AppID, v, true)
			q.send(e.RscFpopsEst, diskNeed(e.RscDiskBound, sticky, w.held, roundHeld), &v)
			hold(roundHeld, sticky)
			inRound[e.WorkunitID] = true
		}
		if len(round) == 0 {
			break
		}
		q.restore()
		var errs []error
		if !w.dry {
			sends := make([]store.SchedSend, len(round))
			for j, cd := range round {
				sends[j] = cd.p
			}
			first := !x.committed
			var err error
			errs, err = s.commitRound(ctx, x, sends)
			if err != nil {
				for _, cd := range round {
					c.Unclaim(cd.cl)
					w.countSend(cd.e.AppID, cd.v, false)
				}
				if first {
					return nil, "", err
				}
				s.log.Error("send results", "host_id", x.host.ID, "error", err)
				x.dbErr = true
				if len(sent) == 0 {
					x.reply.Overloaded = &protocol.Empty{}
					x.reply.Messages = append(x.reply.Messages, protocol.Message{Priority: "low",
						Text: "No tasks sent: the project's database is busy; try again later"})
				}
				return sent, reasonDatabase, nil
			}
		}
		for j, cd := range round {
			var err error
			if errs != nil {
				err = errs[j]
			}
			switch {
			case err == nil:
				if !w.dry {
					c.Release(cd.cl)
					s.m.claims.WithLabelValues(claimOK).Inc()
					s.m.resultsSent.Inc()
					s.m.countSent(&cd.v)
					if cd.v.app.AdaptiveReplication {
						s.m.arSends.WithLabelValues(strconv.FormatBool(cd.replicate)).Inc()
					}
				}
				if w.trace != nil {
					w.trace(cd.slot, cd.e, "")
				}
				sent = append(sent, sendItem{resultID: cd.e.ResultID, v: cd.v})
				q.send(cd.e.RscFpopsEst, diskNeed(cd.e.RscDiskBound, cd.sticky, w.held), &cd.v)
				if len(cd.sticky) > 0 {
					hold(w.held, cd.sticky)
				}
				if !cd.stickyRead && w.held != nil {
					w.unread = append(w.unread, cd.e)
				}
				w.skipJob[cd.e.WorkunitID] = true
			default:
				w.countSend(cd.e.AppID, cd.v, false)
				r := refusalOf(err)
				if r.keep {
					c.Unclaim(cd.cl)
				} else {
					c.Release(cd.cl)
				}
				s.m.claims.WithLabelValues(r.claim).Inc()
				if r.reason != "" {
					w.reject(cd.slot, cd.e, r.reason)
				}
				if r.skipJob {
					w.skipJob[cd.e.WorkunitID] = true
				}
				if r.hrBound {
					w.hrBound[cd.e.WorkunitID] = true
				}
				if r.claim == claimCouldntSend {
					s.log.Warn("job cannot be sent: instance set COULDNT_SEND", "result_id", cd.e.ResultID,
						"workunit_id", cd.e.WorkunitID, "error", err)
				}
			}
		}
	}
	return sent, w.short(len(sent), s.opts.MaxResultsPerRPC), nil
}

// refusal is what a send the commit refused means for its cache slot and
// the rest of the walk.
type refusal struct {
	claim string // label of claims_total
	// keep puts the instance back in the cache for other hosts (Unclaim);
	// otherwise its slot is emptied (Release).
	keep bool
	// reason is the candidate's rejection, "" for none.
	reason string
	// skipJob turns down the job's other instances for this host, hrBound
	// marks the job bound to another host class.
	skipJob, hrBound bool
}

// refusalOf decides a send the commit refused with err:
//   - the job went to this user already: another user may take the
//     instance, this host no instance of the job;
//   - the job was bound to another host class since the feeder cached it:
//     hosts of that class may take it;
//   - the job cannot be sent to any host: the transitioner now deals with
//     it; its other cached instances meet the same fate when tried, which
//     clears them from the cache;
//   - otherwise the instance is no longer unsent (timed out, cancelled,
//     sent by a scheduler on another host): the entry is stale.
func refusalOf(err error) refusal {
	switch {
	case errors.Is(err, decide.ErrAlreadySentToUser):
		return refusal{claim: claimOnePerUser, keep: true, reason: reasonOnePerUser, skipJob: true}
	case errors.Is(err, decide.ErrHRMismatch):
		return refusal{claim: claimHRMismatch, keep: true, reason: reasonHR, hrBound: true}
	case errors.Is(err, decide.ErrCouldntSend):
		return refusal{claim: claimCouldntSend}
	}
	return refusal{claim: claimConflict}
}

// sendable returns why a job cannot be sent to any host, or nil: its
// description must parse and name only valid input files, or a client could
// never run it.
func (s *Service) sendable(wu row.Workunit) error {
	in, err := jobxml.ParseWorkunit(wu.XMLDoc)
	if err != nil {
		return err
	}
	for _, f := range in.Inputs {
		if _, err := fanout.Rel(f.Name, s.opts.Fanout); err != nil {
			return fmt.Errorf("input file %q: %w", f.Name, err)
		}
	}
	return nil
}

// replyRows returns the instances ids and their jobs for the reply: those
// sent in this request as the commit left them, the others (resends) read.
func (s *Service) replyRows(ctx context.Context, x *rpc, ids []int64) (map[int64]row.Result, map[int64]row.Workunit, error) {
	results := make(map[int64]row.Result, len(ids))
	jobs := make(map[int64]row.Workunit, len(ids))
	var readIDs []int64
	for _, id := range ids {
		r, ok := x.sentRows[id]
		if !ok {
			readIDs = append(readIDs, id)
			continue
		}
		results[id] = r
		jobs[r.WorkunitID] = x.sentJobs[r.WorkunitID]
	}
	if len(readIDs) == 0 {
		return results, jobs, nil
	}
	rs, err := s.st.ResultListByIDs(ctx, readIDs)
	if err != nil {
		return nil, nil, err
	}
	var wuIDs []int64
	for _, r := range rs {
		results[r.ID] = r
		if _, ok := jobs[r.WorkunitID]; !ok {
			wuIDs = append(wuIDs, r.WorkunitID)
		}
	}
	wus, err := s.st.WorkunitListByIDs(ctx, wuIDs)
	if err != nil {
		return nil, nil, err
	}
	for _, wu := range wus {
		jobs[wu.ID] = wu
	}
	return results, jobs, nil
}
