package decide

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/taskserver/taskserver/internal/hostav"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// The fixture: job 1 (not yet due, quorum 1 of 1, replication quorum 2), its
// UNSENT instance 10, and its instance 20 IN_PROGRESS on host 5 of user 7
// since t=100. Requests come at t=500.
const (
	wuID      = 1
	unsentID  = 10
	heldID    = 20
	host      = 5
	otherHost = 6
	user      = 7
	otherUser = 8
	now       = 500
	due       = 10000 // the job's transition_time before the batch
	deadline  = 3000
)

func job(mod ...func(*row.Workunit)) row.Workunit {
	wu := row.Workunit{ID: wuID, TransitionTime: due, MinQuorum: 1, TargetNResults: 1, ReplicationQuorum: 2}
	for _, m := range mod {
		m(&wu)
	}
	return wu
}

func unsent(mod ...func(*row.Result)) row.Result {
	r := row.Result{ID: unsentID, WorkunitID: wuID, ServerState: state.ServerUnsent}
	for _, m := range mod {
		m(&r)
	}
	return r
}

func held(mod ...func(*row.Result)) row.Result {
	r := row.Result{ID: heldID, WorkunitID: wuID, ServerState: state.ServerInProgress, HostID: host, UserID: user,
		SentTime: 100}
	for _, m := range mod {
		m(&r)
	}
	return r
}

func over(o state.Outcome) func(*row.Result) {
	return func(r *row.Result) { r.ServerState, r.Outcome = state.ServerOver, o }
}

func report(o state.Outcome) Report {
	return Report{ResultID: heldID, WorkunitID: wuID, HostID: host, Outcome: o, Now: now}
}

func send() Send {
	return Send{ResultID: unsentID, WorkunitID: wuID, HostID: host, UserID: user, AppVersionID: 3, AppVersionNum: 100,
		ReportDeadline: deadline, Now: now}
}

// recorded is the write of report r of instance held() as it was read.
func recorded(r Report, mod ...func(*ReportWrite)) ReportWrite {
	if r.FromHostID == 0 {
		r.FromHostID = r.HostID
	}
	w := ReportWrite{Report: r, FromState: state.ServerInProgress, FromOutcome: state.OutcomeInit,
		ValidateState: state.ValidateInit}
	for _, m := range mod {
		m(&w)
	}
	return w
}

// triggered is the job's write after a report or an unsendable send at now.
func triggered(mod ...func(*WorkunitWrite)) []WorkunitWrite {
	w := WorkunitWrite{ID: wuID, TransitionTime: now, MinQuorum: 1, TargetNResults: 1}
	for _, m := range mod {
		m(&w)
	}
	return []WorkunitWrite{w}
}

// woken is the job's write after a send that went through.
func woken(mod ...func(*WorkunitWrite)) []WorkunitWrite {
	return triggered(append([]func(*WorkunitWrite){func(w *WorkunitWrite) { w.TransitionTime = deadline }}, mod...)...)
}

// sentAs is the instance row after send s went through.
func sentAs(s Send, r row.Result) row.Result {
	r.ServerState, r.HostID, r.UserID, r.SentTime, r.ReportDeadline = state.ServerInProgress, s.HostID, s.UserID, s.Now,
		s.ReportDeadline
	r.AppVersionID, r.AppVersionNum, r.ModTime = s.AppVersionID, s.AppVersionNum, s.Now
	return r
}

func TestBatchReports(t *testing.T) {
	success, clientErr := report(state.OutcomeSuccess), report(state.OutcomeClientError)
	fromOther := success
	fromOther.HostID, fromOther.FromHostID = otherHost, host
	ifDeleted := clientErr
	ifDeleted.SuccessIfDeleted = true
	asSuccess := ifDeleted
	asSuccess.Outcome = state.OutcomeSuccess
	twice := []Report{success, clientErr}
	for _, tt := range []struct {
		name string
		in   Input
		want Plan
	}{
		{
			name: "on time: recorded, job triggered, turnaround folded into the host's average",
			in:   Input{Reports: []Report{success}, Workunits: []row.Workunit{job()}, Results: []row.Result{held()}},
			want: Plan{Reports: []ReportOutcome{{Outcome: state.OutcomeSuccess, Turnaround: 400}},
				ReportWrites: []ReportWrite{recorded(success)}, Workunits: triggered(),
				Hosts: map[int64]*HostDelta{host: {Samples: []float64{400}}}},
		},
		{
			name: "trigger moves transition_time even when the job is already due",
			in: Input{Reports: []Report{success}, Results: []row.Result{held()},
				Workunits: []row.Workunit{job(func(w *row.Workunit) { w.TransitionTime = 200 })}},
			want: Plan{Reports: []ReportOutcome{{Outcome: state.OutcomeSuccess, Turnaround: 400}},
				ReportWrites: []ReportWrite{recorded(success)},
				Workunits:    triggered(func(w *WorkunitWrite) { w.TransitionTime = 199 }),
				Hosts:        map[int64]*HostDelta{host: {Samples: []float64{400}}}},
		},
		{
			name: "late, timed out: recorded late",
			in: Input{Reports: []Report{success}, Workunits: []row.Workunit{job()},
				Results: []row.Result{held(over(state.OutcomeNoReply))}},
			want: Plan{Reports: []ReportOutcome{{Outcome: state.OutcomeSuccess, Late: true, Turnaround: 400}},
				ReportWrites: []ReportWrite{recorded(success, func(w *ReportWrite) {
					w.FromState, w.FromOutcome = state.ServerOver, state.OutcomeNoReply
				})},
				Workunits: triggered(), Hosts: map[int64]*HostDelta{host: {Samples: []float64{400}}}},
		},
		{
			name: "late, marked detached: recorded late",
			in: Input{Reports: []Report{clientErr}, Workunits: []row.Workunit{job()},
				Results: []row.Result{held(over(state.OutcomeClientDetached))}},
			want: Plan{Reports: []ReportOutcome{{Outcome: state.OutcomeClientError, Late: true, Turnaround: 400}},
				ReportWrites: []ReportWrite{recorded(clientErr, func(w *ReportWrite) {
					w.FromState, w.FromOutcome = state.ServerOver, state.OutcomeClientDetached
				})},
				Workunits: triggered(), Hosts: map[int64]*HostDelta{host: {Errors: 1}}},
		},
		{
			name: "already over with a result: refused, nothing written",
			in: Input{Reports: []Report{success}, Workunits: []row.Workunit{job()},
				Results: []row.Result{held(over(state.OutcomeSuccess))}},
			want: Plan{Reports: []ReportOutcome{{Err: ErrChanged}}, Hosts: map[int64]*HostDelta{}},
		},
		{
			name: "already over, couldn't send: refused",
			in: Input{Reports: []Report{success}, Workunits: []row.Workunit{job()},
				Results: []row.Result{held(over(state.OutcomeCouldntSend))}},
			want: Plan{Reports: []ReportOutcome{{Err: ErrChanged}}, Hosts: map[int64]*HostDelta{}},
		},
		{
			name: "unsent instance: refused",
			in: Input{Reports: []Report{success}, Workunits: []row.Workunit{job()},
				Results: []row.Result{held(func(r *row.Result) { r.ServerState = state.ServerUnsent })}},
			want: Plan{Reports: []ReportOutcome{{Err: ErrChanged}}, Hosts: map[int64]*HostDelta{}},
		},
		{
			name: "unknown instance: refused",
			in:   Input{Reports: []Report{success}, Workunits: []row.Workunit{job()}},
			want: Plan{Reports: []ReportOutcome{{Err: ErrChanged}}, Hosts: map[int64]*HostDelta{}},
		},
		{
			name: "another host's instance: refused",
			in: Input{Reports: []Report{success}, Workunits: []row.Workunit{job()},
				Results: []row.Result{held(func(r *row.Result) { r.HostID = otherHost })}},
			want: Plan{Reports: []ReportOutcome{{Err: ErrChanged}}, Hosts: map[int64]*HostDelta{}},
		},
		{
			name: "another host of the user, as read: recorded as the reporting host's",
			in:   Input{Reports: []Report{fromOther}, Workunits: []row.Workunit{job()}, Results: []row.Result{held()}},
			want: Plan{Reports: []ReportOutcome{{Outcome: state.OutcomeSuccess, Turnaround: 400}},
				ReportWrites: []ReportWrite{recorded(fromOther)}, Workunits: triggered(),
				Hosts: map[int64]*HostDelta{otherHost: {Samples: []float64{400}}}},
		},
		{
			name: "moved to another host since read: refused",
			in: Input{Reports: []Report{fromOther}, Workunits: []row.Workunit{job()},
				Results: []row.Result{held(func(r *row.Result) { r.HostID = 9 })}},
			want: Plan{Reports: []ReportOutcome{{Err: ErrChanged}}, Hosts: map[int64]*HostDelta{}},
		},
		{
			name: "error: counts against the host, no turnaround sample",
			in:   Input{Reports: []Report{clientErr}, Workunits: []row.Workunit{job()}, Results: []row.Result{held()}},
			want: Plan{Reports: []ReportOutcome{{Outcome: state.OutcomeClientError, Turnaround: 400}},
				ReportWrites: []ReportWrite{recorded(clientErr)}, Workunits: triggered(),
				Hosts: map[int64]*HostDelta{host: {Errors: 1}}},
		},
		{
			name: "success for a failed job: TOO_LATE",
			in: Input{Reports: []Report{success}, Results: []row.Result{held()},
				Workunits: []row.Workunit{job(func(w *row.Workunit) { w.ErrorMask = state.ErrTooManyErrorResults })}},
			want: Plan{Reports: []ReportOutcome{{Outcome: state.OutcomeSuccess, Turnaround: 400}},
				ReportWrites: []ReportWrite{recorded(success, func(w *ReportWrite) { w.ValidateState = state.ValidateTooLate })},
				Workunits:    triggered(), Hosts: map[int64]*HostDelta{host: {Samples: []float64{400}}}},
		},
		{
			name: "success for an assimilated job: TOO_LATE",
			in: Input{Reports: []Report{success}, Results: []row.Result{held()},
				Workunits: []row.Workunit{job(func(w *row.Workunit) { w.AssimilateState = state.AssimilateDone })}},
			want: Plan{Reports: []ReportOutcome{{Outcome: state.OutcomeSuccess, Turnaround: 400}},
				ReportWrites: []ReportWrite{recorded(success, func(w *ReportWrite) { w.ValidateState = state.ValidateTooLate })},
				Workunits:    triggered(), Hosts: map[int64]*HostDelta{host: {Samples: []float64{400}}}},
		},
		{
			name: "error for a failed job: not TOO_LATE",
			in: Input{Reports: []Report{clientErr}, Results: []row.Result{held()},
				Workunits: []row.Workunit{job(func(w *row.Workunit) { w.ErrorMask = state.ErrTooManyErrorResults })}},
			want: Plan{Reports: []ReportOutcome{{Outcome: state.OutcomeClientError, Turnaround: 400}},
				ReportWrites: []ReportWrite{recorded(clientErr)}, Workunits: triggered(),
				Hosts: map[int64]*HostDelta{host: {Errors: 1}}},
		},
		{
			name: "output missing, late after the files were marked for deletion: the success it was",
			in: Input{Reports: []Report{ifDeleted}, Workunits: []row.Workunit{job()},
				Results: []row.Result{held(over(state.OutcomeNoReply), func(r *row.Result) {
					r.FileDeleteState = state.FileDeleteReady
				})}},
			want: Plan{Reports: []ReportOutcome{{Outcome: state.OutcomeSuccess, Late: true, Turnaround: 400}},
				ReportWrites: []ReportWrite{recorded(asSuccess, func(w *ReportWrite) {
					w.FromState, w.FromOutcome, w.FileDeleteState = state.ServerOver, state.OutcomeNoReply, state.FileDeleteReady
				})},
				Workunits: triggered(), Hosts: map[int64]*HostDelta{host: {Samples: []float64{400}}}},
		},
		{
			name: "output missing, late, files not marked for deletion: an error",
			in: Input{Reports: []Report{ifDeleted}, Workunits: []row.Workunit{job()},
				Results: []row.Result{held(over(state.OutcomeNoReply))}},
			want: Plan{Reports: []ReportOutcome{{Outcome: state.OutcomeClientError, Late: true, Turnaround: 400}},
				ReportWrites: []ReportWrite{recorded(ifDeleted, func(w *ReportWrite) {
					w.FromState, w.FromOutcome = state.ServerOver, state.OutcomeNoReply
				})},
				Workunits: triggered(), Hosts: map[int64]*HostDelta{host: {Errors: 1}}},
		},
		{
			name: "output missing, in progress: an error",
			in:   Input{Reports: []Report{ifDeleted}, Workunits: []row.Workunit{job()}, Results: []row.Result{held()}},
			want: Plan{Reports: []ReportOutcome{{Outcome: state.OutcomeClientError, Turnaround: 400}},
				ReportWrites: []ReportWrite{recorded(ifDeleted)}, Workunits: triggered(),
				Hosts: map[int64]*HostDelta{host: {Errors: 1}}},
		},
		{
			name: "late after the file deleter ran: file_delete_state back to READY",
			in: Input{Reports: []Report{success}, Workunits: []row.Workunit{job()},
				Results: []row.Result{held(over(state.OutcomeNoReply), func(r *row.Result) {
					r.FileDeleteState = state.FileDeleteDone
				})}},
			want: Plan{Reports: []ReportOutcome{{Outcome: state.OutcomeSuccess, Late: true, Turnaround: 400}},
				ReportWrites: []ReportWrite{recorded(success, func(w *ReportWrite) {
					w.FromState, w.FromOutcome, w.FileDeleteState = state.ServerOver, state.OutcomeNoReply, state.FileDeleteReady
				})},
				Workunits: triggered(), Hosts: map[int64]*HostDelta{host: {Samples: []float64{400}}}},
		},
		{
			name: "no send time: no turnaround, the host is still written",
			in: Input{Reports: []Report{success}, Workunits: []row.Workunit{job()},
				Results: []row.Result{held(func(r *row.Result) { r.SentTime = 0 })}},
			want: Plan{Reports: []ReportOutcome{{Outcome: state.OutcomeSuccess}},
				ReportWrites: []ReportWrite{recorded(success)}, Workunits: triggered(),
				Hosts: map[int64]*HostDelta{host: {}}},
		},
		{
			name: "job gone: recorded, no job write",
			in:   Input{Reports: []Report{success}, Results: []row.Result{held()}},
			want: Plan{Reports: []ReportOutcome{{Outcome: state.OutcomeSuccess, Turnaround: 400}},
				ReportWrites: []ReportWrite{recorded(success)}, Hosts: map[int64]*HostDelta{host: {Samples: []float64{400}}}},
		},
		{
			name: "reported twice in one batch: the second finds it over",
			in:   Input{Reports: twice, Workunits: []row.Workunit{job()}, Results: []row.Result{held()}},
			want: Plan{Reports: []ReportOutcome{{Outcome: state.OutcomeSuccess, Turnaround: 400}, {Err: ErrChanged}},
				ReportWrites: []ReportWrite{recorded(success)}, Workunits: triggered(),
				Hosts: map[int64]*HostDelta{host: {Samples: []float64{400}}}},
		},
	} {
		t.Run(tt.name, func(t *testing.T) { checkPlan(t, tt.in, tt.want) })
	}
}

func TestBatchSends(t *testing.T) {
	s := send()
	classed := func(c int) Send { s := send(); s.HRClass = c; return s }
	replicated := s
	replicated.Replicate = true
	bad := errors.New("bad input file")
	refused := s
	refused.CheckWorkunit = func(row.Workunit) error { return bad }
	second := s
	second.ResultID = 11
	secondRow := unsent(func(r *row.Result) { r.ID = 11 })
	otherUsers := func(s Send) Send { s.ResultID, s.HostID, s.UserID = 11, otherHost, otherUser; return s }
	for _, tt := range []struct {
		name string
		in   Input
		want Plan
	}{
		{
			name: "goes through: instance in progress, user recorded, job woken by the deadline",
			in:   Input{Sends: []Send{s}, Workunits: []row.Workunit{job()}, Results: []row.Result{unsent()}},
			want: Plan{Sends: []error{nil}, SendWrites: []Send{s}, Workunits: woken(),
				UserJobs:      []UserJobWrite{{UserJob: UserJob{wuID, user}, ResultID: unsentID}},
				SentWorkunits: map[int64]row.Workunit{wuID: job(func(w *row.Workunit) { w.TransitionTime = deadline })},
				SentResults:   map[int64]row.Result{unsentID: sentAs(s, unsent())}},
		},
		{
			name: "job already due earlier than the deadline: not postponed",
			in: Input{Sends: []Send{s}, Results: []row.Result{unsent()},
				Workunits: []row.Workunit{job(func(w *row.Workunit) { w.TransitionTime = 200 })}},
			want: Plan{Sends: []error{nil}, SendWrites: []Send{s},
				UserJobs:      []UserJobWrite{{UserJob: UserJob{wuID, user}, ResultID: unsentID}},
				SentWorkunits: map[int64]row.Workunit{wuID: job(func(w *row.Workunit) { w.TransitionTime = 200 })},
				SentResults:   map[int64]row.Result{unsentID: sentAs(s, unsent())}},
		},
		{
			name: "job gone: couldn't send",
			in:   Input{Sends: []Send{s}, Results: []row.Result{unsent()}},
			want: Plan{Sends: []error{ErrCouldntSend}, CouldntSends: []CouldntSend{{unsentID, now}}},
		},
		{
			name: "job refused by its check: couldn't send, job triggered",
			in:   Input{Sends: []Send{refused}, Workunits: []row.Workunit{job()}, Results: []row.Result{unsent()}},
			want: Plan{Sends: []error{ErrCouldntSend}, CouldntSends: []CouldntSend{{unsentID, now}}, Workunits: triggered()},
		},
		{
			name: "job refused by its check, instance no longer unsent: changed, nothing written",
			in: Input{Sends: []Send{refused}, Workunits: []row.Workunit{job()},
				Results: []row.Result{unsent(over(state.OutcomeCouldntSend))}},
			want: Plan{Sends: []error{ErrChanged}},
		},
		{
			name: "instance no longer unsent: changed",
			in:   Input{Sends: []Send{s}, Workunits: []row.Workunit{job()}, Results: []row.Result{held()}},
			want: Plan{Sends: []error{ErrChanged}},
		},
		{
			name: "instance gone: changed",
			in:   Input{Sends: []Send{s}, Workunits: []row.Workunit{job()}},
			want: Plan{Sends: []error{ErrChanged}},
		},
		{
			name: "job went to the user before: refused",
			in: Input{Sends: []Send{s}, Workunits: []row.Workunit{job()}, Results: []row.Result{unsent()},
				SentTo: []UserJob{{wuID, user}}},
			want: Plan{Sends: []error{ErrAlreadySentToUser}},
		},
		{
			name: "job went to another user: goes through",
			in: Input{Sends: []Send{s}, Workunits: []row.Workunit{job()}, Results: []row.Result{unsent()},
				SentTo: []UserJob{{wuID, otherUser}}},
			want: Plan{Sends: []error{nil}, SendWrites: []Send{s}, Workunits: woken(),
				UserJobs:      []UserJobWrite{{UserJob: UserJob{wuID, user}, ResultID: unsentID}},
				SentWorkunits: map[int64]row.Workunit{wuID: job(func(w *row.Workunit) { w.TransitionTime = deadline })},
				SentResults:   map[int64]row.Result{unsentID: sentAs(s, unsent())}},
		},
		{
			name: "two instances of one job to one user in one batch: the second refused",
			in: Input{Sends: []Send{s, second}, Workunits: []row.Workunit{job()},
				Results: []row.Result{unsent(), secondRow}},
			want: Plan{Sends: []error{nil, ErrAlreadySentToUser}, SendWrites: []Send{s}, Workunits: woken(),
				UserJobs:      []UserJobWrite{{UserJob: UserJob{wuID, user}, ResultID: unsentID}},
				SentWorkunits: map[int64]row.Workunit{wuID: job(func(w *row.Workunit) { w.TransitionTime = deadline })},
				SentResults:   map[int64]row.Result{unsentID: sentAs(s, unsent())}},
		},
		{
			name: "one instance twice in one batch: the second finds it sent",
			in: Input{Sends: []Send{s, otherUsers(s)}, Workunits: []row.Workunit{job()},
				Results: []row.Result{unsent()}},
			want: Plan{Sends: []error{nil, ErrChanged}, SendWrites: []Send{s}, Workunits: woken(),
				UserJobs:      []UserJobWrite{{UserJob: UserJob{wuID, user}, ResultID: unsentID}},
				SentWorkunits: map[int64]row.Workunit{wuID: job(func(w *row.Workunit) { w.TransitionTime = deadline })},
				SentResults:   map[int64]row.Result{unsentID: sentAs(s, unsent())}},
		},
		{
			name: "host class, job not yet bound: bound to it",
			in:   Input{Sends: []Send{classed(42)}, Workunits: []row.Workunit{job()}, Results: []row.Result{unsent()}},
			want: Plan{Sends: []error{nil}, SendWrites: []Send{classed(42)},
				Workunits:     woken(func(w *WorkunitWrite) { w.HRClass = 42 }),
				UserJobs:      []UserJobWrite{{UserJob: UserJob{wuID, user}, ResultID: unsentID}},
				SentWorkunits: map[int64]row.Workunit{wuID: job(func(w *row.Workunit) { w.TransitionTime, w.HRClass = deadline, 42 })},
				SentResults:   map[int64]row.Result{unsentID: sentAs(s, unsent())}},
		},
		{
			name: "host class, job bound to it: goes through",
			in: Input{Sends: []Send{classed(42)}, Results: []row.Result{unsent()},
				Workunits: []row.Workunit{job(func(w *row.Workunit) { w.HRClass = 42 })}},
			want: Plan{Sends: []error{nil}, SendWrites: []Send{classed(42)},
				Workunits:     woken(func(w *WorkunitWrite) { w.HRClass = 42 }),
				UserJobs:      []UserJobWrite{{UserJob: UserJob{wuID, user}, ResultID: unsentID}},
				SentWorkunits: map[int64]row.Workunit{wuID: job(func(w *row.Workunit) { w.TransitionTime, w.HRClass = deadline, 42 })},
				SentResults:   map[int64]row.Result{unsentID: sentAs(s, unsent())}},
		},
		{
			name: "host class, job bound to another: mismatch, before the one-per-user rule",
			in: Input{Sends: []Send{classed(42)}, Results: []row.Result{unsent()}, SentTo: []UserJob{{wuID, user}},
				Workunits: []row.Workunit{job(func(w *row.Workunit) { w.HRClass = 41 })}},
			want: Plan{Sends: []error{ErrHRMismatch}},
		},
		{
			name: "no host class (app without homogeneous redundancy), job bound: goes through, binding kept",
			in: Input{Sends: []Send{s}, Results: []row.Result{unsent()},
				Workunits: []row.Workunit{job(func(w *row.Workunit) { w.HRClass = 41 })}},
			want: Plan{Sends: []error{nil}, SendWrites: []Send{s},
				Workunits:     woken(func(w *WorkunitWrite) { w.HRClass = 41 }),
				UserJobs:      []UserJobWrite{{UserJob: UserJob{wuID, user}, ResultID: unsentID}},
				SentWorkunits: map[int64]row.Workunit{wuID: job(func(w *row.Workunit) { w.TransitionTime, w.HRClass = deadline, 41 })},
				SentResults:   map[int64]row.Result{unsentID: sentAs(s, unsent())}},
		},
		{
			name: "host class bound earlier in the batch: another class mismatches",
			in: Input{Sends: []Send{classed(42), func() Send { s := otherUsers(classed(41)); return s }()},
				Workunits: []row.Workunit{job()}, Results: []row.Result{unsent(), secondRow}},
			want: Plan{Sends: []error{nil, ErrHRMismatch}, SendWrites: []Send{classed(42)},
				Workunits:     woken(func(w *WorkunitWrite) { w.HRClass = 42 }),
				UserJobs:      []UserJobWrite{{UserJob: UserJob{wuID, user}, ResultID: unsentID}},
				SentWorkunits: map[int64]row.Workunit{wuID: job(func(w *row.Workunit) { w.TransitionTime, w.HRClass = deadline, 42 })},
				SentResults:   map[int64]row.Result{unsentID: sentAs(s, unsent())}},
		},
		{
			name: "adaptive replication, host not trusted: quorum raised, job triggered",
			in:   Input{Sends: []Send{replicated}, Workunits: []row.Workunit{job()}, Results: []row.Result{unsent()}},
			want: Plan{Sends: []error{nil}, SendWrites: []Send{replicated},
				Workunits: triggered(func(w *WorkunitWrite) { w.MinQuorum, w.TargetNResults = 2, 2 }),
				UserJobs:  []UserJobWrite{{UserJob: UserJob{wuID, user}, ResultID: unsentID}},
				SentWorkunits: map[int64]row.Workunit{wuID: job(func(w *row.Workunit) {
					w.TransitionTime, w.MinQuorum, w.TargetNResults = now, 2, 2
				})},
				SentResults: map[int64]row.Result{unsentID: sentAs(s, unsent())}},
		},
		{
			name: "adaptive replication, job already at its replication quorum: unchanged",
			in: Input{Sends: []Send{replicated}, Results: []row.Result{unsent()},
				Workunits: []row.Workunit{job(func(w *row.Workunit) { w.MinQuorum, w.TargetNResults = 2, 3 })}},
			want: Plan{Sends: []error{nil}, SendWrites: []Send{replicated},
				Workunits: woken(func(w *WorkunitWrite) { w.MinQuorum, w.TargetNResults = 2, 3 }),
				UserJobs:  []UserJobWrite{{UserJob: UserJob{wuID, user}, ResultID: unsentID}},
				SentWorkunits: map[int64]row.Workunit{wuID: job(func(w *row.Workunit) {
					w.TransitionTime, w.MinQuorum, w.TargetNResults = deadline, 2, 3
				})},
				SentResults: map[int64]row.Result{unsentID: sentAs(s, unsent())}},
		},
		{
			name: "adaptive replication, host trusted (no replication asked): quorum kept",
			in:   Input{Sends: []Send{s}, Workunits: []row.Workunit{job()}, Results: []row.Result{unsent()}},
			want: Plan{Sends: []error{nil}, SendWrites: []Send{s}, Workunits: woken(),
				UserJobs:      []UserJobWrite{{UserJob: UserJob{wuID, user}, ResultID: unsentID}},
				SentWorkunits: map[int64]row.Workunit{wuID: job(func(w *row.Workunit) { w.TransitionTime = deadline })},
				SentResults:   map[int64]row.Result{unsentID: sentAs(s, unsent())}},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want.Hosts == nil {
				tt.want.Hosts = map[int64]*HostDelta{}
			}
			checkPlan(t, tt.in, tt.want)
		})
	}
}

// A send refused by its job's check wraps the reason.
func TestBatchCouldntSendWrapsTheReason(t *testing.T) {
	bad := errors.New("bad input file")
	s := send()
	s.CheckWorkunit = func(wu row.Workunit) error {
		if wu.ID != wuID {
			return fmt.Errorf("checked job %d", wu.ID)
		}
		return bad
	}
	p := Batch(Input{Sends: []Send{s}, Workunits: []row.Workunit{job()}, Results: []row.Result{unsent()}})
	if !errors.Is(p.Sends[0], ErrCouldntSend) || !errors.Is(p.Sends[0], bad) {
		t.Fatalf("send = %v, want ErrCouldntSend wrapping %v", p.Sends[0], bad)
	}
}

// Reports are decided before sends, each on the rows as those before it
// left them, and every host's deltas add up.
func TestBatchHostDeltas(t *testing.T) {
	at := func(id, hostID, sent int64) row.Result {
		return row.Result{ID: id, WorkunitID: wuID, ServerState: state.ServerInProgress, HostID: hostID, SentTime: sent}
	}
	rep := func(id, hostID int64, o state.Outcome) Report {
		return Report{ResultID: id, WorkunitID: wuID, HostID: hostID, Outcome: o, Now: now}
	}
	p := Batch(Input{
		Reports: []Report{rep(1, host, state.OutcomeSuccess), rep(2, host, state.OutcomeClientError),
			rep(3, host, state.OutcomeSuccess), rep(4, otherHost, state.OutcomeClientError),
			rep(5, otherHost, state.OutcomeClientError)},
		Workunits: []row.Workunit{job()},
		Results:   []row.Result{at(1, host, 450), at(2, host, 100), at(3, host, 300), at(4, otherHost, 0), at(5, otherHost, 0)},
	})
	want := map[int64]*HostDelta{host: {Errors: 1, Samples: []float64{50, 200}}, otherHost: {Errors: 2}}
	if !reflect.DeepEqual(p.Hosts, want) {
		t.Fatalf("host deltas = %v, want %v", fmtHosts(p.Hosts), fmtHosts(want))
	}
	// Five triggers of one job: one write, the first trigger's value minus
	// one per later report.
	if want := triggered(func(w *WorkunitWrite) { w.TransitionTime = now - 4 }); !reflect.DeepEqual(p.Workunits, want) {
		t.Fatalf("job writes = %+v, want %+v", p.Workunits, want)
	}
}

func TestNextAvgTurnaround(t *testing.T) {
	for _, tt := range []struct {
		old, sample, want float64
	}{
		{0, 500, 500},        // no average yet: the sample
		{-1, 500, 500},       // nonsense treated as none
		{1000, 1000, 1000},   // steady
		{1000, 0, 700},       // 0.7 × old
		{100, 1100, 400},     // 0.7 × 100 + 0.3 × 1100
		{86400, 3600, 61560}, // a slow host speeding up
	} {
		t.Run(fmt.Sprint(tt.old, "_", tt.sample), func(t *testing.T) {
			if got := NextAvgTurnaround(tt.old, tt.sample); math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("NextAvgTurnaround(%v, %v) = %v, want %v", tt.old, tt.sample, got, tt.want)
			}
		})
	}
}

func TestTurnaroundFoldMatchesStepByStep(t *testing.T) {
	for _, samples := range [][]float64{nil, {50}, {50, 200, 7}} {
		a, b, c := HostDelta{Samples: samples}.TurnaroundFold()
		for _, old := range []float64{0, 100} {
			want := old
			for _, s := range samples {
				want = NextAvgTurnaround(want, s)
			}
			got := c
			switch {
			case len(samples) == 0:
				got = old // the statement leaves the average alone
			case old > 0:
				got = old*a + b
			}
			if math.Abs(got-want) > 1e-9 {
				t.Errorf("fold of %v from %v = %v, step by step %v", samples, old, got, want)
			}
		}
	}
}

func TestLateOutcome(t *testing.T) {
	for o := state.Outcome(0); o <= state.OutcomeClientDetached+1; o++ {
		want := o == state.OutcomeNoReply || o == state.OutcomeClientDetached
		if got := LateOutcome(o); got != want {
			t.Errorf("LateOutcome(%s) = %v, want %v", o, got, want)
		}
	}
}

// Batch leaves its input as it was: the store may retry a batch.
func TestBatchDoesNotChangeItsInput(t *testing.T) {
	in := Input{Reports: []Report{report(state.OutcomeSuccess)}, Sends: []Send{send()},
		Workunits: []row.Workunit{job()}, Results: []row.Result{unsent(), held()}}
	before := Input{Reports: append([]Report{}, in.Reports...), Sends: append([]Send{}, in.Sends...),
		Workunits: append([]row.Workunit{}, in.Workunits...), Results: append([]row.Result{}, in.Results...)}
	Batch(in)
	if !reflect.DeepEqual(in, before) {
		t.Fatalf("input changed: %+v, was %+v", in, before)
	}
}

// checkPlan compares Batch(in) with want: errors by errors.Is, the rest as
// values.
func checkPlan(t *testing.T, in Input, want Plan) {
	t.Helper()
	got := Batch(in)
	if len(got.Reports) != len(want.Reports) || len(got.Sends) != len(want.Sends) {
		t.Fatalf("%d report and %d send outcomes, want %d and %d", len(got.Reports), len(got.Sends), len(want.Reports),
			len(want.Sends))
	}
	for i := range got.Reports {
		g, w := got.Reports[i], want.Reports[i]
		if !errors.Is(g.Err, w.Err) || (w.Err == nil) != (g.Err == nil) {
			t.Errorf("report %d: error %v, want %v", i, g.Err, w.Err)
		}
		g.Err, w.Err = nil, nil
		if g != w {
			t.Errorf("report %d: %+v, want %+v", i, g, w)
		}
	}
	for i := range got.Sends {
		if g, w := got.Sends[i], want.Sends[i]; !errors.Is(g, w) || (w == nil) != (g == nil) {
			t.Errorf("send %d: %v, want %v", i, g, w)
		}
	}
	got.Reports, got.Sends, want.Reports, want.Sends = nil, nil, nil, nil
	// The host_app_version deltas have their own test
	// (TestBatchHostAppVersions); want.HostAppVersions and JobsToday nil
	// skip them.
	if want.HostAppVersions == nil {
		got.HostAppVersions = nil
	}
	if want.JobsToday == nil {
		got.JobsToday = nil
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("plan\n%+v\nwant\n%+v\nhosts %v, want %v", got, want, fmtHosts(got.Hosts), fmtHosts(want.Hosts))
	}
}

func fmtHosts(h map[int64]*HostDelta) string {
	s := "{"
	for id, d := range h {
		s += fmt.Sprintf(" %d:%+v", id, *d)
	}
	return s + " }"
}

// TestBatchHostAppVersions: a send that goes through counts a job today for
// its host and version (an anonymous-platform one under its generalized id,
// by resource), a refused one does not; sends of a later day start the
// count again; a recorded CLIENT_ERROR counts against the instance's
// version; a success or a refused report counts nothing.
func TestBatchHostAppVersions(t *testing.T) {
	t.Parallel()
	day := hostav.Day(now)
	withApp := func(r *row.Result) { r.AppID, r.AppVersionID = 2, 3 }
	jobApp := func(wu *row.Workunit) { wu.AppID = 2 }
	second := func(mod ...func(*Send)) Send {
		s := send()
		s.ResultID, s.WorkunitID = 11, 2
		for _, m := range mod {
			m(&s)
		}
		return s
	}
	job2 := job(func(wu *row.Workunit) { wu.ID, wu.AppID = 2, 2 })
	unsent2 := unsent(func(r *row.Result) { r.ID, r.WorkunitID = 11, 2 })
	for _, tc := range []struct {
		name string
		in   Input
		want []HostAppVersionDelta
	}{
		{"error: counted against the instance's version",
			Input{Reports: []Report{report(state.OutcomeClientError)}, Workunits: []row.Workunit{job(jobApp)},
				Results: []row.Result{held(withApp)}},
			[]HostAppVersionDelta{{HostID: host, AppVersionID: 3, Errors: 1}}},
		{"error of an anonymous-platform instance: its app's CPU build",
			Input{Reports: []Report{report(state.OutcomeClientError)}, Workunits: []row.Workunit{job(jobApp)},
				Results: []row.Result{held(func(r *row.Result) { r.AppID = 2 })}},
			[]HostAppVersionDelta{{HostID: host, AppVersionID: hostav.GeneralizedID(2, hostav.AnonCPU), Errors: 1}}},
		{"success: nothing",
			Input{Reports: []Report{report(state.OutcomeSuccess)}, Workunits: []row.Workunit{job(jobApp)},
				Results: []row.Result{held(withApp)}},
			[]HostAppVersionDelta{}},
		{"refused report: nothing",
			Input{Reports: []Report{report(state.OutcomeClientError)}, Workunits: []row.Workunit{job(jobApp)},
				Results: []row.Result{held(withApp, func(r *row.Result) { r.HostID = otherHost })}},
			[]HostAppVersionDelta{}},
		{"two sends of one version: two jobs today",
			Input{Sends: []Send{send(), second()}, Workunits: []row.Workunit{job(jobApp), job2},
				Results: []row.Result{unsent(), unsent2}},
			[]HostAppVersionDelta{{HostID: host, AppVersionID: 3, Sent: 2, Day: day}}},
		{"a send after midnight starts the count again",
			Input{Sends: []Send{send(), second(func(s *Send) { s.Now += 86400 })},
				Workunits: []row.Workunit{job(jobApp), job2}, Results: []row.Result{unsent(), unsent2}},
			[]HostAppVersionDelta{{HostID: host, AppVersionID: 3, Sent: 1, Day: day + 1}}},
		{"anonymous-platform GPU send: its generalized id, with the error sorted first",
			Input{Reports: []Report{report(state.OutcomeClientError)},
				Sends:     []Send{second(func(s *Send) { s.AppVersionID, s.Resource = 0, hostav.AnonNVIDIA })},
				Workunits: []row.Workunit{job(jobApp), job2}, Results: []row.Result{held(withApp), unsent2}},
			[]HostAppVersionDelta{{HostID: host, AppVersionID: hostav.GeneralizedID(2, hostav.AnonNVIDIA), Sent: 1, Day: day},
				{HostID: host, AppVersionID: 3, Errors: 1}}},
		{"refused send: nothing",
			Input{Sends: []Send{send()}, Workunits: []row.Workunit{job(jobApp)},
				Results: []row.Result{unsent(over(state.OutcomeCouldntSend))}},
			[]HostAppVersionDelta{}},
	} {
		p := Batch(tc.in)
		for _, d := range p.HostAppVersions {
			if d.Sent != 0 {
				t.Errorf("%s: error delta %+v counts sends", tc.name, d)
			}
		}
		for _, d := range p.JobsToday {
			if d.Errors != 0 {
				t.Errorf("%s: jobs-today delta %+v counts errors", tc.name, d)
			}
		}
		// One list in the store's lock order, as the two are written.
		got := append(slices.Clone(p.HostAppVersions), p.JobsToday...)
		slices.SortFunc(got, func(a, b HostAppVersionDelta) int {
			return cmp.Or(cmp.Compare(a.HostID, b.HostID), cmp.Compare(a.AppVersionID, b.AppVersionID))
		})
		if len(got) == 0 && len(tc.want) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: HostAppVersions %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
