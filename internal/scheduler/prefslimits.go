package scheduler

import (
	"context"
	"math"

	"github.com/taskserver/taskserver/internal/projectprefs"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/scheduler/limits"
	"github.com/taskserver/taskserver/internal/store"
)

// This file holds the volunteer's project preferences and the in-progress
// limits as the walk uses them: appAllowed (preferences), inProgress
// (limits), and setPrefsLimits, which puts both into a walk. The rules
// themselves are packages projectprefs and scheduler/limits.

// Reasons of the preferences and limits (send_shortfall_total,
// no_work_total, taskctl host explain).
const (
	reasonNotSelected     = "not_selected"      // the volunteer selected other apps
	reasonBeta            = "beta"              // beta app or version, volunteer not opted in
	reasonResourcePref    = "resource_pref"     // the volunteer does not want this resource used
	reasonGPUInProgress   = "gpu_in_progress"   // --max-in-progress-per-gpu reached for the resource
	reasonAppInProgress   = "app_in_progress"   // --app-max-in-progress reached for the app
	reasonPrefsInProgress = "prefs_in_progress" // the volunteer's <max_jobs> reached
	reasonTotalInProgress = "total_in_progress" // an absolute limit on all tasks
)

// limitReason is the reason for a refusal of package limits.
func limitReason(r limits.Reason) string {
	switch r {
	case limits.None:
		return ""
	case limits.CPU:
		return reasonInProgressLimit
	case limits.GPU:
		return reasonGPUInProgress
	case limits.App:
		return reasonAppInProgress
	case limits.Volunteer:
		return reasonPrefsInProgress
	}
	return reasonTotalInProgress
}

// prefsOf reads the volunteer's project preferences; a document that does
// not parse is no preferences (BOINC's scheduler reads what it can).
func prefsOf(u row.User) projectprefs.Prefs {
	p, err := projectprefs.Parse(string(u.ProjectPrefs), "")
	if err != nil {
		return projectprefs.Prefs{}
	}
	return p
}

// versionResource is the resource a task of version v runs on.
func versionResource(v version) string { return v.resource() }

// heldResource is the resource a task the host holds runs on: that of the
// version it was sent with, as the host's choice has it (the CPU when the
// version is gone).
func heldResource(ch *choice, hr store.HostResult) string { return ch.held(hr.AppVersionID).resource() }

// appAllowed returns why the volunteer's preferences refuse a job of app
// with version av on resource in pass, or "".
func appAllowed(p projectprefs.Prefs, app row.App, av row.AppVersion, resource string, pass projectprefs.Pass) string {
	switch p.Check(app, av, resource, pass) {
	case projectprefs.NotSelected:
		return reasonNotSelected
	case projectprefs.Beta:
		return reasonBeta
	case projectprefs.ResourceOff:
		return reasonResourcePref
	}
	return ""
}

// inProgress counts a host's tasks in progress against the project's
// limits and the volunteer's, for one request: the tasks it holds, then
// each one sent.
type inProgress struct {
	c   *limits.Counter
	cat *catalog
}

// limitsConfig is the project's in-progress limits from the scheduler's
// configuration; a quarantined host may hold one task.
func limitsConfig(o Config, quarantine bool) limits.Config {
	cfg := limits.Config{Project: limits.Set{
		CPU: limits.Limit{Jobs: o.MaxInProgressPerCPU, PerInstance: true},
		GPU: limits.Limit{Jobs: o.MaxInProgressPerGPU, PerInstance: true},
	}}
	if quarantine {
		cfg.Project.Total = limits.Limit{Jobs: 1}
	}
	if len(o.AppMaxInProgress) > 0 {
		cfg.Apps = make(map[string]limits.Set, len(o.AppMaxInProgress))
		for name, n := range o.AppMaxInProgress {
			cfg.Apps[name] = limits.Set{Total: limits.Limit{Jobs: n}}
		}
	}
	return cfg
}

// instances are the host's instances of each resource: its CPUs (no more
// than the volunteer's <max_cpus>) and each coprocessor type's count.
func instances(h row.Host, req *protocol.SchedulerRequest, p projectprefs.Prefs) map[string]int {
	n := map[string]int{protocol.ResourceCPU: p.CPUs(h.PNCPUs)}
	for _, c := range req.Coprocs.Resources() {
		n[c.Type] += c.Count
	}
	return n
}

// newInProgress starts the count for host h.
func newInProgress(o Config, h row.Host, req *protocol.SchedulerRequest, p projectprefs.Prefs, cat *catalog, quarantine bool) *inProgress {
	return &inProgress{c: limits.New(limitsConfig(o, quarantine), instances(h, req, p), p.MaxJobs), cat: cat}
}

func (l *inProgress) appName(appID int64) string {
	if l.cat == nil {
		return ""
	}
	return l.cat.appByID[appID].Name
}

// allow returns why the host may not be sent one more task of app appID on
// resource, or "".
func (l *inProgress) allow(appID int64, resource string) string {
	return limitReason(l.c.Allow(l.appName(appID), resource))
}

// add counts a task of app appID on resource the host holds or is sent.
func (l *inProgress) add(appID int64, resource string) { l.c.Add(l.appName(appID), resource) }

// remove takes back an add whose send did not go through.
func (l *inProgress) remove(appID int64, resource string) { l.c.Remove(l.appName(appID), resource) }

// capOf is the most tasks the host may hold in all, and the reason when it
// does: the sum of its resources' limits (unbounded when a resource it has
// is unlimited), the volunteer's <max_jobs>, one when quarantined. The walk
// stops at it without looking at more candidates.
func capOf(o Config, h row.Host, req *protocol.SchedulerRequest, p projectprefs.Prefs, quarantine bool) (int, string) {
	if quarantine {
		return 1, reasonQuarantined
	}
	total, why := 0, reasonInProgressLimit
	for r, n := range instances(h, req, p) {
		per := o.MaxInProgressPerGPU
		if r == protocol.ResourceCPU {
			per = o.MaxInProgressPerCPU
		}
		if per <= 0 {
			total = math.MaxInt32
			break
		}
		total += per * max(n, 1)
	}
	if p.MaxJobs > 0 && p.MaxJobs < total {
		total, why = p.MaxJobs, reasonPrefsInProgress
	}
	return total, why
}

// setPrefsLimits puts the volunteer's preferences p and the in-progress
// limits into w, counting the tasks the host holds (held: those it keeps
// and those resent to it).
func (s *Service) setPrefsLimits(w *walk, p projectprefs.Prefs, req *protocol.SchedulerRequest, held []store.HostResult) {
	w.prefs = p
	w.lim = newInProgress(s.opts, w.host, req, w.prefs, w.cat, w.quar)
	for _, hr := range held {
		w.lim.add(hr.AppID, heldResource(w.ch, hr))
	}
	w.limit, w.limitWhy = capOf(s.opts, w.host, req, w.prefs, w.quar)
}

// countSend counts a task of app appID sent with v against the limits
// (add), or takes it back when its send did not go through.
func (w *walk) countSend(appID int64, v version, add bool) {
	switch {
	case w.lim == nil:
	case add:
		w.lim.add(appID, versionResource(v))
	default:
		w.lim.remove(appID, versionResource(v))
	}
}

// scanPasses walks the cache for w (scan) as the volunteer's preferences
// say: the selected apps first and, when that sent nothing because the
// work was for other apps and the volunteer accepts them, again for any
// app (BOINC's "other apps if none are available"). A send from the second
// pass says so in the reply, as BOINC does.
func (s *Service) scanPasses(ctx context.Context, x *rpc, c Cache, w *walk) ([]sendItem, string, error) {
	w.pass = projectprefs.FirstPass
	sent, reason, err := s.scan(ctx, x, c, w)
	if err != nil || len(sent) > 0 || x.dbErr || !w.prefs.OtherAppsPass() || w.rejected[reasonNotSelected] == 0 {
		return sent, reason, err
	}
	// The second walk's verdicts replace the first's.
	w.pass = projectprefs.OtherApps
	w.seen = 0
	clear(w.rejected)
	sent, reason, err = s.scan(ctx, x, c, w)
	if err == nil && len(sent) > 0 && !w.dry {
		x.reply.Messages = append(x.reply.Messages,
			protocol.Message{Priority: "low", Text: "No tasks are available for the applications you have selected"},
			protocol.Message{Priority: "low", Text: "Your preferences allow tasks from applications other than those selected"},
			protocol.Message{Priority: "low", Text: "Sending tasks from other applications"})
	}
	return sent, reason, err
}

// replyPrefs is the inside of the reply's <project_preferences>: the
// volunteer's stored document, sent in every reply as BOINC does, so the
// client applies it (it stops asking for the resources the volunteer
// opted out of). An empty stored document is sent as an element with
// nothing in it, which clears what the client held; none stored sends no
// element. A document that is not well-formed XML is not sent: written
// verbatim, it would break the reply.
func replyPrefs(u row.User) string {
	if u.ProjectPrefs == "" {
		return ""
	}
	if _, err := projectprefs.Parse(string(u.ProjectPrefs), ""); err != nil {
		return ""
	}
	if in := projectprefs.Inner(string(u.ProjectPrefs)); in != "" {
		return in
	}
	return "\n"
}
