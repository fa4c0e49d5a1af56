package transition

import (
	"reflect"
	"testing"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

const now = 1_000_000

// job returns a fresh job with BOINC's default limits, quorum 2, target 2.
func job(mod ...func(*row.Workunit)) row.Workunit {
	wu := row.Workunit{ID: 7, Name: "wu", MinQuorum: 2, TargetNResults: 2,
		MaxErrorResults: 3, MaxTotalResults: 6, MaxSuccessResults: 3, TransitionTime: now}
	for _, m := range mod {
		m(&wu)
	}
	return wu
}

// hold is the policy of an app that holds failed jobs.
var hold = Policy{HoldFailedJobs: true}

// heldFor puts the job on hold for reason since now-500.
func heldFor(reason state.ErrorMask) func(*row.Workunit) {
	return func(wu *row.Workunit) { wu.HoldReason, wu.HoldTime = reason, now-500 }
}

func canonical(id int64) func(*row.Workunit) {
	return func(wu *row.Workunit) { wu.CanonicalResultID = id; wu.AssimilateState = state.AssimilateReady }
}

func assim(a state.AssimilateState) func(*row.Workunit) {
	return func(wu *row.Workunit) { wu.AssimilateState = a }
}

func limits(target, quorum, maxErr, maxTotal, maxSuccess int) func(*row.Workunit) {
	return func(wu *row.Workunit) {
		wu.TargetNResults, wu.MinQuorum = target, quorum
		wu.MaxErrorResults, wu.MaxTotalResults, wu.MaxSuccessResults = maxErr, maxTotal, maxSuccess
	}
}

// Instance builders; ids are given by position (id = 100 + index) in rs.
func unsent() row.Result   { return row.Result{ServerState: state.ServerUnsent} }
func inactive() row.Result { return row.Result{ServerState: state.ServerInactive} }
func sent(deadline int64) row.Result {
	return row.Result{ServerState: state.ServerInProgress, ReportDeadline: deadline}
}
func over(o state.Outcome, v state.ValidateState) row.Result {
	return row.Result{ServerState: state.ServerOver, Outcome: o, ValidateState: v}
}
func success(v state.ValidateState) row.Result { return over(state.OutcomeSuccess, v) }
func failed(o state.Outcome) row.Result        { return over(o, state.ValidateInit) }
func deleted(r row.Result) row.Result {
	r.FileDeleteState = state.FileDeleteDone
	return r
}

func rs(list ...row.Result) []row.Result {
	for i := range list {
		list[i].ID = int64(100 + i)
	}
	return list
}

// news are new instances with the job's priority (0) and no send flags.
func news(names ...string) []NewResult {
	out := make([]NewResult, len(names))
	for i, n := range names {
		out[i] = NewResult{Name: n}
	}
	return out
}

func ch(id int64, from, to state.ServerState, o state.Outcome, f state.FileDeleteState) ResultChange {
	return ResultChange{ID: id, From: from, ServerState: to, Outcome: o, FileDeleteState: f}
}

const (
	unsentS = state.ServerUnsent
	inProg  = state.ServerInProgress
	overS   = state.ServerOver
	fdInit  = state.FileDeleteInit
	fdReady = state.FileDeleteReady
	fdDone  = state.FileDeleteDone
	noT     = state.NoTransition
)

func TestDecide(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		wu      row.Workunit
		results []row.Result
		pol     Policy
		want    Decision
	}{
		{
			name: "new job gets target instances",
			wu:   job(),
			want: Decision{NewResults: news("wu_0", "wu_1"), TransitionTime: noT},
		},
		{
			name:    "unsent instance counts towards target",
			wu:      job(),
			results: rs(unsent()),
			want:    Decision{NewResults: news("wu_1"), TransitionTime: noT},
		},
		{
			name:    "inactive instance counts as unsent",
			wu:      job(),
			results: rs(inactive(), unsent()),
			want:    Decision{TransitionTime: noT},
		},
		{
			name: "target below quorum is raised to quorum",
			wu:   job(limits(1, 3, 3, 6, 3)),
			want: Decision{NewResults: news("wu_0", "wu_1", "wu_2"), TransitionTime: noT},
		},
		{
			name:    "in-progress instances: due again at the earliest deadline",
			wu:      job(),
			results: rs(sent(now+500), sent(now+100)),
			want:    Decision{TransitionTime: now + 100},
		},
		{
			name:    "instance at its deadline times out and is replaced",
			wu:      job(),
			results: rs(sent(now), sent(now+100)),
			want: Decision{NewResults: news("wu_2"), TransitionTime: now + 100, TimedOut: 1,
				Changes: []ResultChange{ch(100, inProg, overS, state.OutcomeNoReply, fdInit)}},
		},
		{
			name:    "two overdue instances are both replaced",
			wu:      job(),
			results: rs(sent(now-10), sent(now-1)),
			want: Decision{NewResults: news("wu_2", "wu_3"), TransitionTime: noT, TimedOut: 2,
				Changes: []ResultChange{
					ch(100, inProg, overS, state.OutcomeNoReply, fdInit),
					ch(101, inProg, overS, state.OutcomeNoReply, fdInit)}},
		},
		{
			name:    "one success waiting for its partner: no validation yet",
			wu:      job(),
			results: rs(success(state.ValidateInit), sent(now+50)),
			want:    Decision{TransitionTime: now + 50},
		},
		{
			name:    "quorum of successes awaiting validation",
			wu:      job(),
			results: rs(success(state.ValidateInit), success(state.ValidateInit)),
			want:    Decision{NeedValidate: true, TransitionTime: noT},
		},
		{
			name:    "new success with an earlier inconclusive one reaches quorum",
			wu:      job(func(wu *row.Workunit) { wu.TargetNResults = 3 }),
			results: rs(success(state.ValidateInconclusive), success(state.ValidateInconclusive), success(state.ValidateInit)),
			want:    Decision{NeedValidate: true, TransitionTime: noT},
		},
		{
			name:    "inconclusive pair with target bumped gets one more instance",
			wu:      job(func(wu *row.Workunit) { wu.TargetNResults = 3 }),
			results: rs(success(state.ValidateInconclusive), success(state.ValidateInconclusive)),
			want:    Decision{NewResults: news("wu_2"), TransitionTime: noT},
		},
		{
			name:    "quorum of one validates a single success",
			wu:      job(limits(1, 1, 3, 6, 3)),
			results: rs(success(state.ValidateInit)),
			want:    Decision{NeedValidate: true, TransitionTime: noT},
		},
		{
			name:    "invalid success is replaced",
			wu:      job(),
			results: rs(success(state.ValidateInvalid), success(state.ValidateInit)),
			want:    Decision{NewResults: news("wu_2"), TransitionTime: noT},
		},
		{
			name:    "validate error is replaced",
			wu:      job(),
			results: rs(over(state.OutcomeValidateError, state.ValidateInvalid), success(state.ValidateInit)),
			want:    Decision{NewResults: news("wu_2"), TransitionTime: noT},
		},
		{
			name:    "client error is replaced",
			wu:      job(),
			results: rs(failed(state.OutcomeClientError), sent(now+9)),
			want:    Decision{NewResults: news("wu_2"), TransitionTime: now + 9},
		},
		{
			name:    "detached instance is replaced",
			wu:      job(limits(2, 2, 1, 6, 3)),
			results: rs(failed(state.OutcomeClientDetached), sent(now+9)),
			want:    Decision{NewResults: news("wu_2"), TransitionTime: now + 9},
		},
		{
			name:    "detached instance counts as an error, like no reply",
			wu:      job(limits(2, 2, 0, 6, 3)),
			results: rs(failed(state.OutcomeClientDetached), sent(now+9)),
			want: Decision{ErrorMask: state.ErrTooManyErrorResults, AssimilateState: state.AssimilateReady,
				TransitionTime: now + 9},
		},
		{
			name:    "no-reply instance counts as an error",
			wu:      job(limits(2, 2, 0, 6, 3)),
			results: rs(failed(state.OutcomeNoReply), sent(now+9)),
			want: Decision{ErrorMask: state.ErrTooManyErrorResults, AssimilateState: state.AssimilateReady,
				TransitionTime: now + 9},
		},
		{
			name:    "no-reply instance is replaced",
			wu:      job(),
			results: rs(failed(state.OutcomeNoReply), sent(now+9)),
			want:    Decision{NewResults: news("wu_2"), TransitionTime: now + 9},
		},
		{
			name:    "didnt-need instances count towards the total and names continue",
			wu:      job(),
			results: rs(failed(state.OutcomeDidntNeed), failed(state.OutcomeDidntNeed), failed(state.OutcomeDidntNeed)),
			want:    Decision{NewResults: news("wu_3", "wu_4"), TransitionTime: noT},
		},
		{
			name: "errors at the limit are tolerated",
			wu:   job(limits(2, 2, 3, 10, 3)),
			results: rs(failed(state.OutcomeClientError), failed(state.OutcomeNoReply),
				failed(state.OutcomeValidateError)),
			want: Decision{NewResults: news("wu_3", "wu_4"), TransitionTime: noT},
		},
		{
			name: "errors over the limit fail the job and cancel unsent instances",
			wu:   job(limits(2, 2, 3, 10, 3)),
			results: rs(failed(state.OutcomeClientError), failed(state.OutcomeNoReply),
				failed(state.OutcomeValidateError), failed(state.OutcomeClientError), unsent()),
			want: Decision{ErrorMask: state.ErrTooManyErrorResults, AssimilateState: state.AssimilateReady,
				TransitionTime: noT,
				Changes:        []ResultChange{ch(104, unsentS, overS, state.OutcomeDidntNeed, fdInit)}},
		},
		{
			name:    "a timeout that tips errors over the limit fails the job",
			wu:      job(limits(2, 2, 1, 10, 3)),
			results: rs(failed(state.OutcomeClientError), sent(now-1), sent(now+30)),
			want: Decision{ErrorMask: state.ErrTooManyErrorResults, AssimilateState: state.AssimilateReady,
				TransitionTime: now + 30, TimedOut: 1,
				Changes: []ResultChange{ch(101, inProg, overS, state.OutcomeNoReply, fdInit)}},
		},
		{
			name: "error fails the job even with a quorum awaiting validation",
			wu:   job(limits(2, 2, 0, 10, 3)),
			results: rs(success(state.ValidateInit), success(state.ValidateInit),
				failed(state.OutcomeClientError)),
			want: Decision{ErrorMask: state.ErrTooManyErrorResults, AssimilateState: state.AssimilateReady,
				TransitionTime: noT},
		},
		{
			name: "total spent: the needed instance cannot be made",
			wu:   job(limits(2, 2, 10, 6, 3)),
			results: rs(failed(state.OutcomeClientError), failed(state.OutcomeClientError),
				failed(state.OutcomeClientError), failed(state.OutcomeClientError),
				failed(state.OutcomeClientError), success(state.ValidateInit)),
			want: Decision{ErrorMask: state.ErrTooManyTotalResults, AssimilateState: state.AssimilateReady,
				TransitionTime: noT},
		},
		{
			name: "needing more instances than the total allows fails, making none",
			wu:   job(limits(2, 2, 10, 6, 3)),
			results: rs(failed(state.OutcomeClientError), failed(state.OutcomeClientError),
				failed(state.OutcomeClientError), failed(state.OutcomeNoReply), failed(state.OutcomeNoReply)),
			want: Decision{ErrorMask: state.ErrTooManyTotalResults, AssimilateState: state.AssimilateReady,
				TransitionTime: noT},
		},
		{
			name: "instances up to exactly the total are made",
			wu:   job(limits(2, 2, 10, 6, 3)),
			results: rs(failed(state.OutcomeClientError), failed(state.OutcomeClientError),
				failed(state.OutcomeClientError), failed(state.OutcomeNoReply)),
			want: Decision{NewResults: news("wu_4", "wu_5"), TransitionTime: noT},
		},
		{
			name: "too many successes without a canonical result",
			wu:   job(limits(5, 2, 3, 10, 3)),
			results: rs(success(state.ValidateInconclusive), success(state.ValidateInconclusive),
				success(state.ValidateInconclusive), success(state.ValidateInit)),
			want: Decision{ErrorMask: state.ErrTooManySuccessResult, AssimilateState: state.AssimilateReady,
				TransitionTime: noT},
		},
		{
			name: "inconclusive results that used up the total fail the job",
			wu:   job(limits(3, 2, 3, 3, 3)),
			results: rs(success(state.ValidateInconclusive), success(state.ValidateInconclusive),
				success(state.ValidateInconclusive)),
			want: Decision{ErrorMask: state.ErrTooManyTotalResults, AssimilateState: state.AssimilateReady,
				TransitionTime: noT},
		},
		{
			name:    "a job that can make no progress at all fails with no canonical result",
			wu:      job(),
			results: rs(success(state.ValidateNoCheck), success(state.ValidateNoCheck)),
			want: Decision{ErrorMask: state.ErrNoCanonicalResult, AssimilateState: state.AssimilateReady,
				TransitionTime: noT},
		},
		{
			name:    "quorum waiting with the total spent is not stuck",
			wu:      job(limits(2, 2, 3, 2, 3)),
			results: rs(success(state.ValidateInit), success(state.ValidateInit)),
			want:    Decision{NeedValidate: true, TransitionTime: noT},
		},
		{
			name:    "instance that could not be sent fails the job",
			wu:      job(),
			results: rs(failed(state.OutcomeCouldntSend), unsent()),
			want: Decision{ErrorMask: state.ErrCouldntSendResult, AssimilateState: state.AssimilateReady,
				TransitionTime: noT,
				Changes:        []ResultChange{ch(101, unsentS, overS, state.OutcomeDidntNeed, fdInit)}},
		},
		{
			name:    "cancelled job: unsent cancelled, in-progress left to finish",
			wu:      job(func(wu *row.Workunit) { wu.ErrorMask = state.ErrCancelled }),
			results: rs(unsent(), inactive(), sent(now+70)),
			want: Decision{ErrorMask: state.ErrCancelled, AssimilateState: state.AssimilateReady,
				TransitionTime: now + 70,
				Changes: []ResultChange{
					ch(100, unsentS, overS, state.OutcomeDidntNeed, fdInit),
					ch(101, state.ServerInactive, overS, state.OutcomeDidntNeed, fdInit)}},
		},
		{
			name: "failed job already handed on gains no more error bits",
			wu: job(func(wu *row.Workunit) {
				wu.ErrorMask = state.ErrCancelled
				wu.AssimilateState = state.AssimilateReady
			}),
			results: rs(failed(state.OutcomeClientError), failed(state.OutcomeClientError),
				failed(state.OutcomeClientError), failed(state.OutcomeClientError), sent(now-5)),
			want: Decision{ErrorMask: state.ErrCancelled, AssimilateState: state.AssimilateReady,
				TransitionTime: noT, TimedOut: 1,
				Changes: []ResultChange{ch(104, inProg, overS, state.OutcomeNoReply, fdInit)}},
		},
		{
			name:    "canonical result: unsent instances cancelled, none made",
			wu:      job(canonical(100)),
			results: rs(success(state.ValidateValid), failed(state.OutcomeClientError), unsent()),
			want: Decision{AssimilateState: state.AssimilateReady, TransitionTime: noT,
				Changes: []ResultChange{ch(102, unsentS, overS, state.OutcomeDidntNeed, fdInit)}},
		},
		{
			name:    "canonical result with assimilation not yet asked for",
			wu:      job(canonical(100), assim(state.AssimilateInit)),
			results: rs(success(state.ValidateValid), success(state.ValidateValid)),
			want:    Decision{AssimilateState: state.AssimilateReady, TransitionTime: noT},
		},
		{
			name:    "late success is compared with the canonical result",
			wu:      job(canonical(100), assim(state.AssimilateDone)),
			results: rs(success(state.ValidateValid), success(state.ValidateValid), success(state.ValidateInit)),
			want:    Decision{NeedValidate: true, AssimilateState: state.AssimilateDone, TransitionTime: noT},
		},
		{
			name:    "canonical result with an instance still out waits for it",
			wu:      job(canonical(100), assim(state.AssimilateDone)),
			results: rs(success(state.ValidateValid), success(state.ValidateValid), sent(now+40)),
			want:    Decision{AssimilateState: state.AssimilateDone, TransitionTime: now + 40},
		},
		{
			name: "assimilated and all over: files of job and instances deleted",
			wu:   job(canonical(100), assim(state.AssimilateDone)),
			results: rs(success(state.ValidateValid), success(state.ValidateValid),
				deleted(failed(state.OutcomeClientError))),
			want: Decision{AssimilateState: state.AssimilateDone, FileDeleteState: fdReady, TransitionTime: noT,
				Changes: []ResultChange{
					ch(100, overS, overS, state.OutcomeSuccess, fdReady),
					ch(101, overS, overS, state.OutcomeSuccess, fdReady)}},
		},
		{
			name:    "last instance timing out lets files be deleted at once",
			wu:      job(canonical(100), assim(state.AssimilateDone)),
			results: rs(success(state.ValidateValid), sent(now-1)),
			want: Decision{AssimilateState: state.AssimilateDone, FileDeleteState: fdReady, TransitionTime: noT,
				TimedOut: 1,
				Changes: []ResultChange{
					ch(100, overS, overS, state.OutcomeSuccess, fdReady),
					ch(101, inProg, overS, state.OutcomeNoReply, fdReady)}},
		},
		{
			name: "failed job assimilated: files deleted",
			wu: job(func(wu *row.Workunit) {
				wu.ErrorMask = state.ErrTooManyErrorResults
				wu.AssimilateState = state.AssimilateDone
			}),
			results: rs(failed(state.OutcomeClientError), failed(state.OutcomeDidntNeed)),
			want: Decision{ErrorMask: state.ErrTooManyErrorResults, AssimilateState: state.AssimilateDone,
				FileDeleteState: fdReady, TransitionTime: noT,
				Changes: []ResultChange{
					ch(100, overS, overS, state.OutcomeClientError, fdReady),
					ch(101, overS, overS, state.OutcomeDidntNeed, fdReady)}},
		},
		{
			name:    "assimilation asked for but not done: files kept",
			wu:      job(canonical(100)),
			results: rs(success(state.ValidateValid), success(state.ValidateValid)),
			want:    Decision{AssimilateState: state.AssimilateReady, TransitionTime: noT},
		},
		{
			name: "files already marked: nothing changes again",
			wu: job(canonical(100), assim(state.AssimilateDone), func(wu *row.Workunit) {
				wu.FileDeleteState = fdDone
			}),
			results: rs(deleted(success(state.ValidateValid)), deleted(success(state.ValidateValid))),
			want: Decision{AssimilateState: state.AssimilateDone, FileDeleteState: fdDone,
				TransitionTime: noT},
		},

		// Late results: a timed-out instance the scheduler accepted later.
		{
			name:    "late success joins the quorum beside its replacement",
			wu:      job(),
			results: rs(success(state.ValidateInit), success(state.ValidateInit), sent(now+60)),
			want:    Decision{NeedValidate: true, TransitionTime: now + 60},
		},
		{
			name:    "too-late success after timeout is compared with the canonical result",
			wu:      job(canonical(100), assim(state.AssimilateDone)),
			results: rs(success(state.ValidateValid), success(state.ValidateValid), success(state.ValidateInit)),
			want:    Decision{NeedValidate: true, AssimilateState: state.AssimilateDone, TransitionTime: noT},
		},
		{
			name: "late success of a failed job is left alone",
			wu: job(func(wu *row.Workunit) {
				wu.ErrorMask = state.ErrTooManyErrorResults
				wu.AssimilateState = state.AssimilateReady
			}),
			results: rs(failed(state.OutcomeClientError), failed(state.OutcomeClientError),
				failed(state.OutcomeClientError), failed(state.OutcomeClientError), success(state.ValidateTooLate)),
			want: Decision{ErrorMask: state.ErrTooManyErrorResults, AssimilateState: state.AssimilateReady,
				TransitionTime: noT},
		},
		{
			name: "late success of a failed job is not validated even if not yet marked too late",
			wu: job(func(wu *row.Workunit) {
				wu.ErrorMask = state.ErrTooManyErrorResults
				wu.AssimilateState = state.AssimilateDone
			}),
			results: rs(deleted(failed(state.OutcomeClientError)), success(state.ValidateInit)),
			want: Decision{ErrorMask: state.ErrTooManyErrorResults, AssimilateState: state.AssimilateDone,
				FileDeleteState: fdReady, TransitionTime: noT,
				Changes: []ResultChange{ch(101, overS, overS, state.OutcomeSuccess, fdReady)}},
		},
		{
			name:    "late client error after timeout still counts once",
			wu:      job(limits(2, 2, 1, 6, 3)),
			results: rs(failed(state.OutcomeClientError), success(state.ValidateInit), sent(now+5)),
			want:    Decision{TransitionTime: now + 5},
		},

		// Jobs that fail: every error bit, every limit.
		{
			name: "every instance erring fails the job",
			wu:   job(),
			results: rs(failed(state.OutcomeClientError), failed(state.OutcomeClientError),
				failed(state.OutcomeClientError), failed(state.OutcomeClientError)),
			want: Decision{ErrorMask: state.ErrTooManyErrorResults, AssimilateState: state.AssimilateReady,
				TransitionTime: noT},
		},
		{
			name: "a job that never reaches quorum fails when its successes run out",
			wu:   job(limits(4, 2, 3, 10, 3)),
			results: rs(success(state.ValidateInconclusive), success(state.ValidateInconclusive),
				success(state.ValidateInconclusive), success(state.ValidateInconclusive)),
			want: Decision{ErrorMask: state.ErrTooManySuccessResult, AssimilateState: state.AssimilateReady,
				TransitionTime: noT},
		},
		{
			name: "several limits at once set several bits",
			wu:   job(limits(2, 2, 1, 10, 1)),
			results: rs(failed(state.OutcomeClientError), failed(state.OutcomeNoReply),
				success(state.ValidateInconclusive), success(state.ValidateInconclusive), failed(state.OutcomeCouldntSend)),
			want: Decision{ErrorMask: state.ErrCouldntSendResult | state.ErrTooManyErrorResults | state.ErrTooManySuccessResult,
				AssimilateState: state.AssimilateReady, TransitionTime: noT},
		},
		{
			name:    "cancelled job with nothing out is handed on at once",
			wu:      job(func(wu *row.Workunit) { wu.ErrorMask = state.ErrCancelled }),
			results: rs(unsent(), unsent()),
			want: Decision{ErrorMask: state.ErrCancelled, AssimilateState: state.AssimilateReady, TransitionTime: noT,
				Changes: []ResultChange{
					ch(100, unsentS, overS, state.OutcomeDidntNeed, fdInit),
					ch(101, unsentS, overS, state.OutcomeDidntNeed, fdInit)}},
		},
		{
			name: "cancelled job over its limits, of an app that holds failed jobs: cancelled only, not held",
			wu:   job(func(wu *row.Workunit) { wu.ErrorMask = state.ErrCancelled }),
			results: rs(unsent(), failed(state.OutcomeClientError), failed(state.OutcomeClientError),
				failed(state.OutcomeClientError), failed(state.OutcomeClientError)),
			pol: hold,
			want: Decision{ErrorMask: state.ErrCancelled,
				AssimilateState: state.AssimilateReady, TransitionTime: noT,
				Changes: []ResultChange{ch(100, unsentS, overS, state.OutcomeDidntNeed, fdInit)}},
		},
		{
			name: "cancelled held job: the cancel wins, the stale hold is cleared",
			wu: job(func(wu *row.Workunit) {
				wu.ErrorMask = state.ErrCancelled
				wu.HoldReason, wu.HoldTime = state.ErrTooManyErrorResults, now-100
			}),
			results: rs(sent(now + 10)),
			pol:     hold,
			want: Decision{ErrorMask: state.ErrCancelled, AssimilateState: state.AssimilateReady,
				TransitionTime: now + 10},
		},

		// Holds: the app holds failed jobs instead of failing them.
		{
			name: "too many errors: held instead of failed, unsent cancelled, in-progress left",
			wu:   job(limits(2, 2, 1, 10, 3)),
			results: rs(failed(state.OutcomeClientError), failed(state.OutcomeClientError),
				unsent(), sent(now+80)),
			pol: hold,
			want: Decision{HoldReason: state.ErrTooManyErrorResults, HoldTime: now, TransitionTime: now + 80,
				Changes: []ResultChange{ch(102, unsentS, overS, state.OutcomeDidntNeed, fdInit)}},
		},
		{
			name:    "too many total: held",
			wu:      job(limits(2, 2, 10, 2, 3)),
			results: rs(failed(state.OutcomeClientError), failed(state.OutcomeNoReply)),
			pol:     hold,
			want:    Decision{HoldReason: state.ErrTooManyTotalResults, HoldTime: now, TransitionTime: noT},
		},
		{
			name: "too many successes: held with a quorum awaiting, which is not validated",
			wu:   job(limits(5, 2, 3, 10, 1)),
			results: rs(success(state.ValidateInconclusive), success(state.ValidateInit),
				success(state.ValidateInit)),
			pol:  hold,
			want: Decision{HoldReason: state.ErrTooManySuccessResult, HoldTime: now, TransitionTime: noT},
		},
		{
			name:    "could not send: held",
			wu:      job(),
			results: rs(failed(state.OutcomeCouldntSend), inactive()),
			pol:     hold,
			want: Decision{HoldReason: state.ErrCouldntSendResult, HoldTime: now, TransitionTime: noT,
				Changes: []ResultChange{ch(101, state.ServerInactive, overS, state.OutcomeDidntNeed, fdInit)}},
		},
		{
			name:    "no canonical result possible: held",
			wu:      job(),
			results: rs(success(state.ValidateNoCheck), success(state.ValidateNoCheck)),
			pol:     hold,
			want:    Decision{HoldReason: state.ErrNoCanonicalResult, HoldTime: now, TransitionTime: noT},
		},
		{
			name:    "a timeout that exhausts the errors holds the job",
			wu:      job(limits(2, 2, 0, 10, 3)),
			results: rs(sent(now-1), sent(now+30)),
			pol:     hold,
			want: Decision{HoldReason: state.ErrTooManyErrorResults, HoldTime: now, TransitionTime: now + 30,
				TimedOut: 1, Changes: []ResultChange{ch(100, inProg, overS, state.OutcomeNoReply, fdInit)}},
		},
		{
			name:    "job within its limits is not held",
			wu:      job(),
			results: rs(failed(state.OutcomeClientError), sent(now+30)),
			pol:     hold,
			want:    Decision{NewResults: news("wu_2"), TransitionTime: now + 30},
		},
		{
			name: "held job is frozen: below target, nothing made",
			wu:   job(heldFor(state.ErrTooManyErrorResults)),
			results: rs(failed(state.OutcomeClientError), failed(state.OutcomeClientError),
				failed(state.OutcomeClientError), failed(state.OutcomeClientError)),
			pol:  hold,
			want: Decision{HoldReason: state.ErrTooManyErrorResults, HoldTime: now - 500, TransitionTime: noT},
		},
		{
			name: "held job is frozen: only its overdue instance times out",
			wu:   job(heldFor(state.ErrTooManyErrorResults)),
			results: rs(failed(state.OutcomeClientError), failed(state.OutcomeClientError),
				failed(state.OutcomeClientError), failed(state.OutcomeClientError), sent(now-1), sent(now+90)),
			pol: hold,
			want: Decision{HoldReason: state.ErrTooManyErrorResults, HoldTime: now - 500, TransitionTime: now + 90,
				TimedOut: 1, Changes: []ResultChange{ch(104, inProg, overS, state.OutcomeNoReply, fdInit)}},
		},
		{
			name: "held job is frozen: a late quorum is not validated",
			wu:   job(heldFor(state.ErrTooManyTotalResults), limits(2, 2, 10, 4, 3)),
			results: rs(failed(state.OutcomeNoReply), failed(state.OutcomeNoReply),
				success(state.ValidateInit), success(state.ValidateInit)),
			pol:  hold,
			want: Decision{HoldReason: state.ErrTooManyTotalResults, HoldTime: now - 500, TransitionTime: noT},
		},
		{
			name: "held job is frozen even after the app stopped holding",
			wu:   job(heldFor(state.ErrTooManyErrorResults)),
			results: rs(failed(state.OutcomeClientError), failed(state.OutcomeClientError),
				failed(state.OutcomeClientError), failed(state.OutcomeClientError)),
			want: Decision{HoldReason: state.ErrTooManyErrorResults, HoldTime: now - 500, TransitionTime: noT},
		},
		{
			name: "requeued job (hold cleared, limits raised) continues",
			wu:   job(limits(2, 2, 6, 12, 6)),
			results: rs(failed(state.OutcomeClientError), failed(state.OutcomeClientError),
				failed(state.OutcomeClientError), failed(state.OutcomeClientError), failed(state.OutcomeDidntNeed)),
			pol:  hold,
			want: Decision{NewResults: news("wu_5", "wu_6"), TransitionTime: noT},
		},
		{
			name: "requeued job with a late quorum is validated",
			wu:   job(limits(2, 2, 10, 8, 3)),
			results: rs(failed(state.OutcomeNoReply), failed(state.OutcomeNoReply),
				success(state.ValidateInit), success(state.ValidateInit)),
			pol:  hold,
			want: Decision{NeedValidate: true, TransitionTime: noT},
		},
		{
			name: "requeued job that exhausts its raised limits is held again",
			wu:   job(limits(2, 2, 2, 12, 6)),
			results: rs(failed(state.OutcomeClientError), failed(state.OutcomeClientError),
				failed(state.OutcomeClientError)),
			pol:  hold,
			want: Decision{HoldReason: state.ErrTooManyErrorResults, HoldTime: now, TransitionTime: noT},
		},

		// Tail acceleration and adaptive replication.
		{
			name: "tail copy: the extra instance goes to reliable hosts first",
			wu: job(func(wu *row.Workunit) {
				wu.TargetNResults, wu.TailCopies, wu.Priority = 3, 1, 5
			}),
			results: rs(sent(now+100), sent(now+200)),
			want: Decision{TransitionTime: now + 100,
				NewResults: []NewResult{{Name: "wu_2", Priority: 1005, SendFlags: row.SendReliableOnly}}},
		},
		{
			name: "tail-accelerated job's replacement is reliable-only too",
			wu: job(func(wu *row.Workunit) {
				wu.TargetNResults, wu.TailCopies = 3, 1
			}),
			results: rs(sent(now+100), sent(now+200), failed(state.OutcomeClientError)),
			want: Decision{TransitionTime: now + 100,
				NewResults: []NewResult{{Name: "wu_3", Priority: TailPriorityBoost, SendFlags: row.SendReliableOnly}}},
		},
		{
			name:    "job never tail-accelerated: ordinary instances with its priority",
			wu:      job(func(wu *row.Workunit) { wu.Priority = 5 }),
			results: rs(sent(now + 100)),
			want:    Decision{TransitionTime: now + 100, NewResults: []NewResult{{Name: "wu_1", Priority: 5}}},
		},
		{
			name:    "adaptive replication: a job sent to one trusted host needs nothing more",
			wu:      job(limits(1, 1, 3, 6, 3), func(wu *row.Workunit) { wu.ReplicationQuorum = 2 }),
			results: rs(sent(now + 100)),
			want:    Decision{TransitionTime: now + 100},
		},
		{
			name:    "adaptive replication: quorum raised to 2 by the scheduler creates the second instance",
			wu:      job(limits(2, 2, 3, 6, 3), func(wu *row.Workunit) { wu.ReplicationQuorum = 2 }),
			results: rs(sent(now + 100)),
			want:    Decision{TransitionTime: now + 100, NewResults: news("wu_1")},
		},
		{
			name:    "adaptive replication: a lone trusted success is validated with quorum 1",
			wu:      job(limits(1, 1, 3, 6, 3), func(wu *row.Workunit) { wu.ReplicationQuorum = 2 }),
			results: rs(success(state.ValidateInit)),
			want:    Decision{NeedValidate: true, TransitionTime: noT},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Decide(tt.wu, tt.results, now, tt.pol)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Decide(%+v, %d results, %+v)\n got  %+v\n want %+v", tt.wu, len(tt.results), tt.pol, got, tt.want)
			}
		})
	}
}

func TestDecideNeverExceedsMaxTotal(t *testing.T) {
	t.Parallel()
	// Whatever mix of errors a job has, what exists plus what is made never
	// passes max_total_results.
	for nerr := 0; nerr <= 8; nerr++ {
		for target := 1; target <= 5; target++ {
			wu := job(limits(target, 1, 100, 6, 100))
			var list []row.Result
			for range nerr {
				list = append(list, failed(state.OutcomeClientError))
			}
			d := Decide(wu, rs(list...), now, Policy{})
			if total := nerr + len(d.NewResults); len(d.NewResults) > 0 && total > wu.MaxTotalResults {
				t.Errorf("Decide(target %d, %d errors) makes %d instances: total %d > max %d",
					target, nerr, len(d.NewResults), total, wu.MaxTotalResults)
			}
		}
	}
}

func TestAddedErrors(t *testing.T) {
	t.Parallel()
	d := Decision{ErrorMask: state.ErrCancelled | state.ErrTooManyTotalResults}
	if got := d.AddedErrors(state.ErrCancelled); got != state.ErrTooManyTotalResults {
		t.Errorf("AddedErrors(cancelled) = %v, want too_many_total_results", got)
	}
}
