// Package transition is the job state machine of persistent redundant
// computing (seed 003, §2.1) as a pure function: given a job, all of its
// instances, the policy of its app and the time, Decide says what the
// transitioner must change. It touches no database, so every case is a
// table test.
//
// The rules, in the order Decide applies them:
//
//  1. An IN_PROGRESS instance whose report_deadline has come (deadline <=
//     now) is timed out: OVER with outcome NO_REPLY.
//  2. A held job (hold_reason set, no error bit, no canonical instance) is
//     frozen: nothing but rule 1 and rule 8 applies to it until an operator
//     requeues it (clearing the hold and raising its limits) or cancels it.
//  3. While the job has no canonical instance and is not yet handed to the
//     assimilator, it exhausts its limits when an instance could not be sent
//     (COULDNT_SEND_RESULT), when more than max_error_results instances erred
//     (TOO_MANY_ERROR_RESULTS), when more than max_success_results instances
//     succeeded (TOO_MANY_SUCCESS_RESULTS), when the instances it needs would
//     take it past max_total_results (TOO_MANY_TOTAL_RESULTS), or when
//     nothing more can happen to it: no instance pending, none to create,
//     nothing to validate (TOO_MANY_TOTAL_RESULTS if the total is spent, else
//     NO_CANONICAL_RESULT). Errors are the outcomes CLIENT_ERROR,
//     VALIDATE_ERROR, NO_REPLY and CLIENT_DETACHED.
//  4. Exhausted limits fail the job (the bits join error_mask), unless its
//     app holds failed jobs and the job has no error bit yet (a cancelled
//     job is never held): then the bits become hold_reason, hold_time is
//     now, error_mask stays as it was and the job is not handed on.
//  5. Otherwise new instances are made up to max(target_nresults,
//     min_quorum), counting unsent, in-progress and successful-not-invalid
//     ones. Instances of a job tail acceleration sped up (tail_copies > 0)
//     go only to reliable hosts (row.SendReliableOnly) and come first
//     (priority + TailPriorityBoost).
//  6. A job with a canonical instance, an error bit (CANCELLED included) or a
//     new hold needs no more instances: unsent ones become OVER/DIDNT_NEED.
//     A job with a canonical instance or an error bit goes from
//     assimilate_state INIT to READY; a held one stays INIT.
//  7. need_validate is set when, without a canonical instance and neither
//     failed nor held, at least one success awaits validation and the
//     successes awaiting validation plus the earlier inconclusive ones reach
//     min_quorum (the validator compares them together); or when, with a
//     canonical instance, a success awaits comparison with it.
//  8. Once assimilated (DONE), with every instance OVER and nothing left to
//     validate, the job's and each instance's files are marked for deletion.
//  9. The job is due again at the earliest deadline of its in-progress
//     instances, else never (state.NoTransition): whoever changes it later
//     (a report, the validator, a cancel or requeue, tail acceleration)
//     triggers it.
//
// Outcomes are counted as they stand, so a late report (an instance timed
// out as NO_REPLY that the scheduler later accepted as SUCCESS or
// CLIENT_ERROR) simply counts under its new outcome: it joins a quorum, is
// compared with the canonical instance if there is one, and is left alone
// (the scheduler marks it TOO_LATE) when the job already failed.
//
// CLIENT_DETACHED (an instance lost because its host was attached anew)
// counts exactly like NO_REPLY. BOINC's transitioner groups the two outcomes
// together (sched/transitioner.cpp, handle_wu), counting them toward the
// total but not its error count; this server has always counted NO_REPLY
// toward max_error_results (a job whose hosts never answer should fail, not
// wander until its total is spent), so CLIENT_DETACHED does too.
//
// A job held for COULDNT_SEND_RESULT is held again as soon as it is
// requeued, because the instance that could not be sent is still there:
// requeue raises limits, and no limit governs that bit.
package transition

import (
	"fmt"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// TailPriorityBoost is added to the priority of the instances of a job that
// tail acceleration sped up, so the feeder offers them before other work.
const TailPriorityBoost = 1000

// Policy is what Decide needs to know about the job's app.
type Policy struct {
	// HoldFailedJobs puts a job that exhausts its limits on hold instead of
	// failing it (app.hold_failed_jobs).
	HoldFailedJobs bool
}

// Decision is what one transition changes in a job and its instances. The
// job fields are the job's new values; ErrorMask, AssimilateState and
// FileDeleteState only ever move forward (ErrorMask gains bits, the states
// only grow), so the store can write them as ORs and maxima.
type Decision struct {
	// NeedValidate is the job's new need_validate.
	NeedValidate bool
	// ErrorMask is the job's new error_mask: the old bits plus any added.
	ErrorMask state.ErrorMask
	// HoldReason and HoldTime are the job's new hold: the error bits the job
	// would have failed with and when it was held; both 0 when not held.
	HoldReason state.ErrorMask
	HoldTime   int64
	// AssimilateState is the job's new assimilate_state.
	AssimilateState state.AssimilateState
	// FileDeleteState is the job's new file_delete_state.
	FileDeleteState state.FileDeleteState
	// TransitionTime is when the job is due again (Unix seconds), or
	// state.NoTransition.
	TransitionTime int64
	// NewResults are the instances to create, in order.
	NewResults []NewResult
	// Changes are the instances whose state changes.
	Changes []ResultChange
	// TimedOut counts the instances this decision times out.
	TimedOut int
}

// AddedErrors returns the error bits this decision sets that the job did not
// have before.
func (d Decision) AddedErrors(old state.ErrorMask) state.ErrorMask { return d.ErrorMask &^ old }

// NewHold returns the hold reason when this decision puts a job that was not
// held (old hold_reason) on hold, else 0.
func (d Decision) NewHold(old state.ErrorMask) state.ErrorMask {
	if old != 0 {
		return 0
	}
	return d.HoldReason
}

// NewResult is an instance to create.
type NewResult struct {
	// Name is ResultName(job, n).
	Name string
	// Priority is result.priority: the job's, raised for a tail copy.
	Priority int
	// SendFlags is result.send_flags (row.SendReliableOnly or 0).
	SendFlags int
}

// ResultChange is the new state of one instance, applied only if the
// instance is still in the server state it was read in.
type ResultChange struct {
	ID int64
	// From is the server_state the instance was read in.
	From            state.ServerState
	ServerState     state.ServerState
	Outcome         state.Outcome
	FileDeleteState state.FileDeleteState
}

// ResultName is the name of instance n of the job called job. Numbering
// from the count of existing instances makes a rerun after a lost commit,
// or a second transitioner that should not be there, collide on the unique
// result name instead of creating a duplicate.
func ResultName(job string, n int) string { return fmt.Sprintf("%s_%d", job, n) }

// counts is the tally of a job's instances after timeouts.
type counts struct {
	total          int
	unsent         int
	inProgress     int
	success        int // outcome SUCCESS, whatever the validator said
	activeSuccess  int // SUCCESS and not INVALID: still counts towards the target
	awaiting       int // SUCCESS with validate_state INIT
	inconclusive   int // SUCCESS with validate_state INCONCLUSIVE
	errors         int // CLIENT_ERROR, VALIDATE_ERROR, NO_REPLY, CLIENT_DETACHED
	couldntSend    int
	earliestExpiry int64
}

// Decide applies the state machine to job wu with all of its instances
// (results, any order) under its app's policy at time now (Unix seconds).
func Decide(wu row.Workunit, results []row.Result, now int64, pol Policy) Decision {
	d := Decision{
		ErrorMask:       wu.ErrorMask,
		AssimilateState: wu.AssimilateState,
		FileDeleteState: wu.FileDeleteState,
		TransitionTime:  state.NoTransition,
	}
	// The state of each instance after this decision, by index.
	server := make([]state.ServerState, len(results))
	outcome := make([]state.Outcome, len(results))
	changed := make([]bool, len(results))

	c := counts{total: len(results), earliestExpiry: state.NoTransition}
	for i, r := range results {
		server[i], outcome[i] = r.ServerState, r.Outcome
		if r.ServerState == state.ServerInProgress && r.ReportDeadline <= now {
			server[i], outcome[i] = state.ServerOver, state.OutcomeNoReply
			changed[i] = true
			d.TimedOut++
		}
		switch server[i] {
		case state.ServerInactive, state.ServerUnsent:
			c.unsent++
		case state.ServerInProgress:
			c.inProgress++
			c.earliestExpiry = min(c.earliestExpiry, r.ReportDeadline)
		case state.ServerOver:
			switch outcome[i] {
			case state.OutcomeSuccess:
				c.success++
				if r.ValidateState != state.ValidateInvalid {
					c.activeSuccess++
				}
				switch r.ValidateState {
				case state.ValidateInit:
					c.awaiting++
				case state.ValidateInconclusive:
					c.inconclusive++
				}
			case state.OutcomeClientError, state.OutcomeValidateError, state.OutcomeNoReply,
				state.OutcomeClientDetached:
				c.errors++
			case state.OutcomeCouldntSend:
				c.couldntSend++
			}
		}
	}

	hasCanonical := wu.CanonicalResultID != 0
	// A job with an error bit or a canonical instance is past holding: a
	// cancel clears the hold as it sets its bit, and this keeps a job that
	// somehow has both from being frozen for ever.
	frozen := wu.HoldReason != 0 && wu.ErrorMask == 0 && !hasCanonical
	quorumWaiting := c.awaiting > 0 && c.awaiting+c.inconclusive >= wu.MinQuorum
	newResults := 0
	var exhausted state.ErrorMask
	if frozen {
		d.HoldReason, d.HoldTime = wu.HoldReason, wu.HoldTime
	} else if !hasCanonical && wu.ErrorMask == 0 && wu.AssimilateState == state.AssimilateInit {
		// A job that already failed (a cancel, say) keeps the reason it
		// failed for: its limits no longer matter.
		exhausted, newResults = checkLimits(wu, c, quorumWaiting)
	}
	held := frozen
	switch {
	case exhausted == 0:
	case pol.HoldFailedJobs && wu.ErrorMask == 0:
		d.HoldReason, d.HoldTime = exhausted, now
		held = true
	default:
		d.ErrorMask |= exhausted
	}

	failed := d.ErrorMask != 0
	switch {
	case hasCanonical || failed || (held && !frozen):
		for i := range results {
			if server[i] == state.ServerInactive || server[i] == state.ServerUnsent {
				server[i], outcome[i] = state.ServerOver, state.OutcomeDidntNeed
				changed[i] = true
			}
		}
		if !held && d.AssimilateState == state.AssimilateInit {
			d.AssimilateState = state.AssimilateReady
		}
	case !held:
		priority, flags := wu.Priority, 0
		if wu.TailCopies > 0 {
			priority, flags = wu.Priority+TailPriorityBoost, row.SendReliableOnly
		}
		for i := range newResults {
			d.NewResults = append(d.NewResults, NewResult{Name: ResultName(wu.Name, len(results)+i),
				Priority: priority, SendFlags: flags})
		}
	}

	switch {
	case hasCanonical:
		d.NeedValidate = c.awaiting > 0
	case !failed && !held:
		d.NeedValidate = quorumWaiting
	}

	allOver := true
	for i := range results {
		if server[i] != state.ServerOver {
			allOver = false
		}
	}
	fileDelete := d.AssimilateState == state.AssimilateDone && allOver && !d.NeedValidate && len(d.NewResults) == 0
	if fileDelete && d.FileDeleteState == state.FileDeleteInit {
		d.FileDeleteState = state.FileDeleteReady
	}

	for i, r := range results {
		fds := r.FileDeleteState
		if fileDelete && fds == state.FileDeleteInit {
			fds = state.FileDeleteReady
			changed[i] = true
		}
		if changed[i] {
			d.Changes = append(d.Changes, ResultChange{ID: r.ID, From: r.ServerState,
				ServerState: server[i], Outcome: outcome[i], FileDeleteState: fds})
		}
	}

	if c.inProgress > 0 {
		d.TransitionTime = c.earliestExpiry
	}
	return d
}

// checkLimits checks a job that has no canonical instance and is not handed on
// against its limits (rule 3): it returns the error bits of the limits the
// job exhausted, or else how many instances to make.
func checkLimits(wu row.Workunit, c counts, quorumWaiting bool) (state.ErrorMask, int) {
	var bits state.ErrorMask
	if c.couldntSend > 0 {
		bits |= state.ErrCouldntSendResult
	}
	if c.errors > wu.MaxErrorResults {
		bits |= state.ErrTooManyErrorResults
	}
	if c.success > wu.MaxSuccessResults {
		bits |= state.ErrTooManySuccessResult
	}
	// A job that failed before (a cancelled one still being decided) makes
	// no more instances either.
	if bits != 0 || wu.ErrorMask != 0 {
		return bits, 0
	}
	need := max(wu.TargetNResults, wu.MinQuorum) - (c.unsent + c.inProgress + c.activeSuccess)
	switch {
	case need > 0 && c.total+need > wu.MaxTotalResults:
		return state.ErrTooManyTotalResults, 0
	case need > 0:
		return 0, need
	case c.unsent == 0 && c.inProgress == 0 && !quorumWaiting:
		// Nothing is out, nothing is to be made and nothing can be
		// validated: the job would wait forever. With our validator this
		// happens when inconclusive results have used up the total.
		if c.total >= wu.MaxTotalResults {
			return state.ErrTooManyTotalResults, 0
		}
		return state.ErrNoCanonicalResult, 0
	}
	return 0, 0
}
