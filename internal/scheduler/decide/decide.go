// Package decide holds the scheduler's rules for a batch of reports and
// sends: from the rows the store locked and read, Batch decides what every
// report and send amounts to and what must be written. It knows no SQL and
// reads no clock (every time is in its input), so each rule is tested on
// plain values; the store reads the rows, calls it, and writes the plan.
package decide

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/taskserver/taskserver/internal/hostav"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// ErrAlreadySentToUser means the job already has an instance that went to
// this user (on any of their hosts): BOINC never lets one volunteer return
// two instances of one job, or they could validate their own forgery.
var ErrAlreadySentToUser = errors.New("job already sent to this user")

// ErrHRMismatch means the job is already bound to another homogeneous
// redundancy class than the host's: nothing changed, and a host of its class
// may take the instance.
var ErrHRMismatch = errors.New("job bound to another host class")

// ErrCouldntSend means the instance's job cannot be sent to any host (it is
// gone, or its description is unusable): the instance is set OVER with
// outcome COULDNT_SEND and the job woken, so the transitioner deals with it.
var ErrCouldntSend = errors.New("job cannot be sent")

// ErrChanged means the instance is not, or no longer, in a state the report
// or send may change (reported by a concurrent request, timed out, taken
// from the host, sent elsewhere): nothing of that row changes.
var ErrChanged = errors.New("instance not in a state the request may change")

// TurnaroundWeight is the weight of the newest sample in host.avg_turnaround,
// an exponential average of the time from send to report.
const TurnaroundWeight = 0.3

// NextAvgTurnaround is host.avg_turnaround after a result that took sample
// seconds from send to report; a host with no average yet (0) takes the
// sample as it is.
func NextAvgTurnaround(old, sample float64) float64 {
	if old <= 0 {
		return sample
	}
	return old*(1-TurnaroundWeight) + sample*TurnaroundWeight
}

// LateOutcome reports whether an instance that is OVER with outcome o may
// still be reported by its host: it timed out, or was taken from a host that
// seemed to have detached. Its result is better late than lost.
func LateOutcome(o state.Outcome) bool {
	return o == state.OutcomeNoReply || o == state.OutcomeClientDetached
}

// Report is one instance a host reported.
type Report struct {
	ResultID   int64
	WorkunitID int64
	// HostID is the host that reported the instance, whose it becomes.
	HostID int64
	// FromHostID is the host the instance was on as read, when another
	// host of the same user reports it (a client restored from a backup
	// has a new host id); 0 means HostID.
	FromHostID int64
	// Outcome is what the host's report amounts to.
	Outcome state.Outcome
	// SuccessIfDeleted marks an Outcome of CLIENT_ERROR that is only there
	// because an output file is missing from the upload directory: if the
	// instance turns out to be OVER with its files already marked for
	// deletion, the file deleter may have removed that output, and the
	// report is recorded as the success it was.
	SuccessIfDeleted bool
	ClientState      state.ClientState
	ExitStatus       int
	CPUTime          float64
	ElapsedTime      float64
	StderrOut        string
	XMLDocOut        string
	ClaimedCredit    float64
	Now              int64
}

// ReportOutcome is what became of one Report.
type ReportOutcome struct {
	// Err is nil when the report is recorded; otherwise nothing of it is.
	Err error
	// Outcome is the outcome recorded.
	Outcome state.Outcome
	// Late is set when the instance had timed out or been marked detached.
	Late bool
	// Turnaround is the seconds from send to report, 0 when unknown.
	Turnaround float64
}

// Send is one unsent instance going to a host.
type Send struct {
	ResultID      int64
	WorkunitID    int64
	HostID        int64
	UserID        int64
	AppVersionID  int64
	AppVersionNum int
	// Resource is, for an anonymous-platform send (AppVersionID 0), the
	// resource the client's own build runs on (hostav.AnonCPU, ...; 0 is
	// the CPU): with the job's app it keys the host_app_version row whose
	// jobs today the send counts.
	Resource       int
	ReportDeadline int64
	Now            int64
	// FlopsEstimate is the <flops> the reply gives the client for the
	// chosen version, the speed its runtime estimate assumes; kept on the
	// instance (result.flops_estimate) to measure how estimates converge.
	FlopsEstimate float64
	// HRClass is the host's homogeneous redundancy class when the job's app
	// uses homogeneous redundancy, else 0. The job is bound to the class of
	// the first host it goes to; another class gets ErrHRMismatch.
	HRClass int
	// Replicate raises the job's min_quorum and target_nresults to its
	// replication_quorum (adaptive replication: the host is not trusted, or
	// is being spot-checked) and wakes the transitioner to add instances.
	Replicate bool
	// CheckWorkunit, if set, is given the locked job; an error means the
	// job cannot be sent at all, and the instance is set COULDNT_SEND.
	CheckWorkunit func(row.Workunit) error
}

// UserJob is a row of workunit_user: an instance of the job went to the
// user.
type UserJob struct {
	WorkunitID int64
	UserID     int64
}

// Input is a batch and the rows the store locked for it.
type Input struct {
	Reports []Report
	Sends   []Send
	// Workunits are the jobs of the reports and sends that exist.
	Workunits []row.Workunit
	// Results are the instances of the reports and sends that exist.
	Results []row.Result
	// SentTo are the workunit_user rows of the sends' jobs.
	SentTo []UserJob
}

// ReportWrite is a report to record: the instance becomes OVER with the
// report's values, if it still is as it was read.
type ReportWrite struct {
	// Report is the report, with FromHostID and Outcome as decided.
	Report
	// FromState and FromOutcome are the instance's state as read: the
	// write's condition, with FromHostID.
	FromState   state.ServerState
	FromOutcome state.Outcome
	// ValidateState is TOO_LATE for a success of a job already done.
	ValidateState state.ValidateState
	// FileDeleteState is the instance's, with DONE put back to READY: a
	// late report can come after the file deleter went over the instance's
	// files, and the output just uploaded must be deleted too.
	FileDeleteState state.FileDeleteState
}

// CouldntSend is an instance to set OVER with outcome COULDNT_SEND, if it
// is still UNSENT.
type CouldntSend struct {
	ResultID int64
	Now      int64
}

// UserJobWrite is a workunit_user row to insert.
type UserJobWrite struct {
	UserJob
	ResultID int64
}

// WorkunitWrite is a job's new scheduling columns.
type WorkunitWrite struct {
	ID             int64
	TransitionTime int64
	HRClass        int
	MinQuorum      int
	TargetNResults int
}

// HostDelta is what a batch's reports do to one host.
type HostDelta struct {
	// Errors is the CLIENT_ERROR reports: each adds one to error_streak,
	// and any zeroes consecutive_valid.
	Errors int
	// Samples are the turnarounds of successes, in order, for
	// avg_turnaround.
	Samples []float64
}

// Turnaround is the seconds from an instance's send to its report at now,
// 0 when unknown (never sent, or the clock went back).
func Turnaround(sent, now int64) float64 {
	if sent > 0 && now > sent {
		return float64(now - sent)
	}
	return 0
}

// Add counts a recorded report with outcome o that took turnaround seconds.
func (d *HostDelta) Add(o state.Outcome, turnaround float64) {
	switch {
	case o == state.OutcomeClientError:
		d.Errors++
	case o == state.OutcomeSuccess && turnaround > 0:
		d.Samples = append(d.Samples, turnaround)
	}
}

// Apply is host h as the delta leaves it, as the store writes it: the
// scheduler's later decisions in the same request (quarantine, trust) see
// the host as its reports will leave it.
func (d HostDelta) Apply(h row.Host) row.Host {
	h.ErrorStreak += d.Errors
	if d.Errors > 0 {
		h.ConsecutiveValid = 0
	}
	for _, t := range d.Samples {
		h.AvgTurnaround = NextAvgTurnaround(h.AvgTurnaround, t)
	}
	return h
}

// TurnaroundFold is avg_turnaround after the delta's samples, as a*old + b
// for a host with an average, and c for one without (the first sample
// starts it): NextAvgTurnaround applied once per sample, in a form one
// statement can apply to a value it has not read.
func (d HostDelta) TurnaroundFold() (a, b, c float64) {
	a = 1
	for _, t := range d.Samples {
		a *= 1 - TurnaroundWeight
		b = b*(1-TurnaroundWeight) + t*TurnaroundWeight
	}
	if len(d.Samples) > 0 {
		c = d.Samples[0]
		for _, t := range d.Samples[1:] {
			c = NextAvgTurnaround(c, t)
		}
	}
	return a, b, c
}

// HostAppVersionDelta is what a batch does to one host_app_version row:
// jobs of the version sent to the host (counted on Day: sends of an
// earlier day in the same batch, at midnight, are dropped as a new day's
// count would drop them), and CLIENT_ERROR reports (each shrinks the daily
// quota, hostav.AddError).
type HostAppVersionDelta struct {
	HostID       int64
	AppVersionID int64
	Sent         int
	Day          int64
	Errors       int
}

// havDeltas collects HostAppVersionDeltas by key.
type havDeltas map[[2]int64]*HostAppVersionDelta

func (m havDeltas) at(hostID, avID int64) *HostAppVersionDelta {
	k := [2]int64{hostID, avID}
	d := m[k]
	if d == nil {
		d = &HostAppVersionDelta{HostID: hostID, AppVersionID: avID}
		m[k] = d
	}
	return d
}

func (m havDeltas) sorted() []HostAppVersionDelta {
	if len(m) == 0 {
		return nil
	}
	out := make([]HostAppVersionDelta, 0, len(m))
	for _, d := range m {
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b HostAppVersionDelta) int {
		if c := cmp.Compare(a.HostID, b.HostID); c != 0 {
			return c
		}
		return cmp.Compare(a.AppVersionID, b.AppVersionID)
	})
	return out
}

// Plan is what a batch does: the outcome of each report and send, index for
// index, and the writes.
type Plan struct {
	Reports []ReportOutcome
	// Sends are nil for a send that goes through, else ErrChanged,
	// ErrAlreadySentToUser, ErrHRMismatch, or one wrapping ErrCouldntSend.
	Sends []error

	// Workunits are the jobs whose scheduling columns change, in order of
	// first mention in the batch.
	Workunits    []WorkunitWrite
	UserJobs     []UserJobWrite
	ReportWrites []ReportWrite
	// SendWrites are the sends that go through, in batch order.
	SendWrites   []Send
	CouldntSends []CouldntSend
	// Hosts are the reporting hosts' deltas, by host id.
	Hosts map[int64]*HostDelta
	// HostAppVersions are the batch's CLIENT_ERROR reports counted against
	// host_app_version rows, by host and then version id (the order the
	// store locks them in); Sent is 0.
	HostAppVersions []HostAppVersionDelta
	// JobsToday are the sends that go through counted per host and
	// version (Errors is 0), in the same order: the caller adds them to
	// its count of jobs sent today (the scheduler writes them later, many
	// requests' at once).
	JobsToday []HostAppVersionDelta

	// SentWorkunits and SentResults are the jobs and instances of the sends
	// that go through, by id, as the batch leaves them.
	SentWorkunits map[int64]row.Workunit
	SentResults   map[int64]row.Result
}

// Batch decides every report, then every send, of a batch in batch order,
// each on the rows as the rows before it left them:
//   - a report is recorded when the instance is on FromHostID and
//     IN_PROGRESS, or OVER with an outcome LateOutcome accepts (late); it
//     moves the instance to the reporting host and triggers its job; a
//     success for a job already done (failed, or assimilated) is TOO_LATE;
//     a CLIENT_ERROR counts against the host and against its
//     host_app_version row for the instance's version (the daily quota), a
//     success's turnaround is folded into its average;
//   - a send whose job is gone or refused by CheckWorkunit sets its
//     instance COULDNT_SEND and triggers the job; otherwise it is refused
//     when the job is bound to another host class, went to the user already
//     (even earlier in this batch), or the instance is no longer UNSENT; a
//     send that goes through binds the job to the host's class, raises its
//     quorum when it replicates, records the user, wakes the job no later
//     than the deadline, and counts a job of the version sent to the host
//     today (JobsToday).
//
// A refused row changes nothing and never stops the others.
func Batch(in Input) Plan {
	p := Plan{Reports: make([]ReportOutcome, len(in.Reports)), Sends: make([]error, len(in.Sends)),
		Hosts: map[int64]*HostDelta{}}
	// The rows as the batch leaves them: copies, so that a retried batch
	// decides on the rows as read.
	wuRows, resRows := slices.Clone(in.Workunits), slices.Clone(in.Results)
	wus := make(map[int64]*row.Workunit, len(wuRows))
	for i := range wuRows {
		wus[wuRows[i].ID] = &wuRows[i]
	}
	res := make(map[int64]*row.Result, len(resRows))
	for i := range resRows {
		res[resRows[i].ID] = &resRows[i]
	}
	sentTo := make(map[UserJob]bool, len(in.SentTo))
	for _, uj := range in.SentTo {
		sentTo[uj] = true
	}

	havs, today := havDeltas{}, havDeltas{}
	for i, r := range in.Reports {
		p.Reports[i] = p.report(r, wus, res, havs)
	}
	var sent []Send
	for i, s := range in.Sends {
		p.Sends[i] = p.send(s, wus, res, sentTo)
		if p.Sends[i] == nil {
			sent = append(sent, s)
			av := s.AppVersionID
			if av <= 0 {
				resource := s.Resource
				if resource == 0 {
					resource = hostav.AnonCPU
				}
				av = hostav.GeneralizedID(wus[s.WorkunitID].AppID, resource)
			}
			d := today.at(s.HostID, av)
			switch day := hostav.Day(s.Now); {
			case day > d.Day:
				d.Sent, d.Day = 1, day
			case day == d.Day:
				d.Sent++
			}
		}
	}
	p.HostAppVersions, p.JobsToday = havs.sorted(), today.sorted()

	seen := map[int64]bool{}
	for _, wu := range in.Workunits {
		if seen[wu.ID] {
			continue
		}
		seen[wu.ID] = true
		n := wus[wu.ID]
		if n.TransitionTime != wu.TransitionTime || n.HRClass != wu.HRClass || n.MinQuorum != wu.MinQuorum ||
			n.TargetNResults != wu.TargetNResults {
			p.Workunits = append(p.Workunits, WorkunitWrite{ID: wu.ID, TransitionTime: n.TransitionTime,
				HRClass: n.HRClass, MinQuorum: n.MinQuorum, TargetNResults: n.TargetNResults})
		}
	}
	if len(sent) > 0 {
		p.SentWorkunits = make(map[int64]row.Workunit, len(sent))
		p.SentResults = make(map[int64]row.Result, len(sent))
		for _, s := range sent {
			p.SentWorkunits[s.WorkunitID] = *wus[s.WorkunitID]
			p.SentResults[s.ResultID] = *res[s.ResultID]
		}
	}
	return p
}

// report decides one report on the rows as the batch left them so far, and
// updates them.
func (p *Plan) report(r Report, wus map[int64]*row.Workunit, res map[int64]*row.Result, havs havDeltas) ReportOutcome {
	if r.FromHostID == 0 {
		r.FromHostID = r.HostID
	}
	inst, ok := res[r.ResultID]
	if !ok || inst.HostID != r.FromHostID ||
		!(inst.ServerState == state.ServerInProgress || (inst.ServerState == state.ServerOver && LateOutcome(inst.Outcome))) {
		return ReportOutcome{Err: ErrChanged}
	}
	if r.SuccessIfDeleted && inst.ServerState == state.ServerOver && inst.FileDeleteState != state.FileDeleteInit {
		r.Outcome = state.OutcomeSuccess
	}
	vs := state.ValidateInit
	if wu, ok := wus[inst.WorkunitID]; ok {
		if r.Outcome == state.OutcomeSuccess && (wu.ErrorMask != 0 || wu.AssimilateState == state.AssimilateDone) {
			vs = state.ValidateTooLate
		}
		wu.TransitionTime = trigger(wu.TransitionTime, r.Now)
	}
	fds := inst.FileDeleteState
	if fds == state.FileDeleteDone {
		fds = state.FileDeleteReady
	}
	turnaround := Turnaround(inst.SentTime, r.Now)
	p.ReportWrites = append(p.ReportWrites, ReportWrite{Report: r, FromState: inst.ServerState, FromOutcome: inst.Outcome,
		ValidateState: vs, FileDeleteState: fds})
	d := p.Hosts[r.HostID]
	if d == nil {
		d = &HostDelta{}
		p.Hosts[r.HostID] = d
	}
	d.Add(r.Outcome, turnaround)
	if r.Outcome == state.OutcomeClientError {
		// The version that failed is the one the instance was sent with.
		havs.at(r.HostID, hostav.Key(inst.AppVersionID, inst.AppID)).Errors++
	}
	late := inst.ServerState == state.ServerOver
	// A second report of the instance in this batch finds it over.
	inst.ServerState, inst.Outcome, inst.HostID = state.ServerOver, r.Outcome, r.HostID
	return ReportOutcome{Outcome: r.Outcome, Late: late, Turnaround: turnaround}
}

// send decides one send on the rows as the batch left them so far, and
// updates them.
func (p *Plan) send(s Send, wus map[int64]*row.Workunit, res map[int64]*row.Result, sentTo map[UserJob]bool) error {
	wu, ok := wus[s.WorkunitID]
	var unsendable error
	switch {
	case !ok:
		unsendable = fmt.Errorf("workunit %d not found", s.WorkunitID)
	case s.CheckWorkunit != nil:
		unsendable = s.CheckWorkunit(*wu)
	}
	inst, instOK := res[s.ResultID]
	if unsendable != nil {
		if !instOK || inst.ServerState != state.ServerUnsent {
			return ErrChanged
		}
		if ok {
			wu.TransitionTime = trigger(wu.TransitionTime, s.Now)
		}
		p.CouldntSends = append(p.CouldntSends, CouldntSend{ResultID: inst.ID, Now: s.Now})
		inst.ServerState, inst.Outcome = state.ServerOver, state.OutcomeCouldntSend
		return fmt.Errorf("result %d: %w: %w", s.ResultID, ErrCouldntSend, unsendable)
	}
	uj := UserJob{WorkunitID: s.WorkunitID, UserID: s.UserID}
	switch {
	case s.HRClass != 0 && wu.HRClass != s.HRClass && wu.HRClass != 0:
		return ErrHRMismatch
	case sentTo[uj]:
		return ErrAlreadySentToUser
	case !instOK || inst.ServerState != state.ServerUnsent:
		return ErrChanged
	}
	if s.HRClass != 0 {
		wu.HRClass = s.HRClass
	}
	if s.Replicate && wu.ReplicationQuorum > wu.MinQuorum {
		wu.MinQuorum = max(wu.MinQuorum, wu.ReplicationQuorum)
		wu.TargetNResults = max(wu.TargetNResults, wu.ReplicationQuorum)
		wu.TransitionTime = trigger(wu.TransitionTime, s.Now)
	}
	sentTo[uj] = true
	p.UserJobs = append(p.UserJobs, UserJobWrite{UserJob: uj, ResultID: s.ResultID})
	// The transitioner wakes by the deadline to time the instance out.
	wu.TransitionTime = min(wu.TransitionTime, s.ReportDeadline)
	p.SendWrites = append(p.SendWrites, s)
	inst.ServerState, inst.HostID, inst.UserID, inst.SentTime, inst.ReportDeadline = state.ServerInProgress, s.HostID,
		s.UserID, s.Now, s.ReportDeadline
	inst.AppVersionID, inst.AppVersionNum, inst.ModTime = s.AppVersionID, s.AppVersionNum, s.Now
	return nil
}

// trigger is a job's transition_time once something happened to it at now:
// the "- 1" makes the value change even when it already is at most now, as
// the transitioner clears transition_time with an update conditional on the
// value it read, so a trigger that left the value alone could be lost.
func trigger(tt, now int64) int64 {
	return min(tt-1, now)
}
