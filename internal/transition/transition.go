// Package transition is the job state machine of persistent redundant
// computing (seed 003, §2.1) as a pure function: given a job, all of its
// instances and the time, Decide says what the transitioner must change. It
// touches no database, so every case is a table test.
//
// The rules, in the order Decide applies them:
//
//  1. An IN_PROGRESS instance whose report_deadline has come (deadline <=
//     now) is timed out: OVER with outcome NO_REPLY.
//  2. While the job has no canonical instance and is not yet handed to the
//     assimilator, it fails for good (an error_mask bit) when an instance
//     could not be sent (COULDNT_SEND_RESULT), when more than
//     max_error_results instances erred (CLIENT_ERROR, VALIDATE_ERROR and
//     NO_REPLY count; TOO_MANY_ERROR_RESULTS), when more than
//     max_success_results instances succeeded (TOO_MANY_SUCCESS_RESULTS), when
//     the instances it needs would take it past max_total_results
//     (TOO_MANY_TOTAL_RESULTS), or when nothing more can happen to it: no
//     instance pending, none to create, nothing to validate (TOO_MANY_TOTAL_
//     RESULTS if the total is spent, else NO_CANONICAL_RESULT).
//  3. Otherwise new instances are made up to max(target_nresults,
//     min_quorum), counting unsent, in-progress and successful-not-invalid
//     ones.
//  4. A job with a canonical instance or an error bit needs no more work:
//     unsent instances become OVER/DIDNT_NEED, and assimilate_state goes from
//     INIT to READY.
//  5. need_validate is set when, without a canonical instance, at least one
//     success awaits validation and the successes awaiting validation plus
//     the earlier inconclusive ones reach min_quorum (the validator compares
//     them together); or when, with a canonical instance, a success awaits
//     comparison with it.
//  6. Once assimilated (DONE), with every instance OVER and nothing left to
//     validate, the job's and each instance's files are marked for deletion.
//  7. The job is due again at the earliest deadline of its in-progress
//     instances, else never (state.NoTransition): whoever changes it later
//     triggers it.
package transition

import (
	"fmt"

	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

// Decision is what one transition changes in a job and its instances. The
// job fields are the job's new values; they only ever move forward
// (ErrorMask gains bits, AssimilateState and FileDeleteState only grow), so
// the store can write them as ORs and maxima.
type Decision struct {
	// NeedValidate is the job's new need_validate.
	NeedValidate bool
	// ErrorMask is the job's new error_mask: the old bits plus any added.
	ErrorMask state.ErrorMask
	// AssimilateState is the job's new assimilate_state.
	AssimilateState state.AssimilateState
	// FileDeleteState is the job's new file_delete_state.
	FileDeleteState state.FileDeleteState
	// TransitionTime is when the job is due again (Unix seconds), or
	// state.NoTransition.
	TransitionTime int64
	// NewResults are the names of the instances to create, in order.
	NewResults []string
	// Changes are the instances whose state changes.
	Changes []ResultChange
	// TimedOut counts the instances this decision times out.
	TimedOut int
}

// AddedErrors returns the error bits this decision sets that the job did not
// have before.
func (d Decision) AddedErrors(old state.ErrorMask) state.ErrorMask { return d.ErrorMask &^ old }

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
	errors         int // CLIENT_ERROR, VALIDATE_ERROR, NO_REPLY
	couldntSend    int
	earliestExpiry int64
}

// Decide applies the state machine to job wu with all of its instances
// (results, any order) at time now (Unix seconds).
func Decide(wu store.Workunit, results []store.Result, now int64) Decision {
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
			case state.OutcomeClientError, state.OutcomeValidateError, state.OutcomeNoReply:
				c.errors++
			case state.OutcomeCouldntSend:
				c.couldntSend++
			}
		}
	}

	hasCanonical := wu.CanonicalResultID != 0
	quorumWaiting := c.awaiting > 0 && c.awaiting+c.inconclusive >= wu.MinQuorum
	newResults := 0
	if !hasCanonical && wu.AssimilateState == state.AssimilateInit {
		if c.couldntSend > 0 {
			d.ErrorMask |= state.ErrCouldntSendResult
		}
		if c.errors > wu.MaxErrorResults {
			d.ErrorMask |= state.ErrTooManyErrorResults
		}
		if c.success > wu.MaxSuccessResults {
			d.ErrorMask |= state.ErrTooManySuccessResult
		}
		if d.ErrorMask == 0 {
			need := max(wu.TargetNResults, wu.MinQuorum) - (c.unsent + c.inProgress + c.activeSuccess)
			switch {
			case need > 0 && c.total+need > wu.MaxTotalResults:
				d.ErrorMask |= state.ErrTooManyTotalResults
			case need > 0:
				newResults = need
			case c.unsent == 0 && c.inProgress == 0 && !quorumWaiting:
				// Nothing is out, nothing is to be made and nothing can be
				// validated: the job would wait forever. With our validator this
				// happens when inconclusive results have used up the total.
				if c.total >= wu.MaxTotalResults {
					d.ErrorMask |= state.ErrTooManyTotalResults
				} else {
					d.ErrorMask |= state.ErrNoCanonicalResult
				}
			}
		}
	}

	done := hasCanonical || d.ErrorMask != 0
	if done {
		for i := range results {
			if server[i] == state.ServerInactive || server[i] == state.ServerUnsent {
				server[i], outcome[i] = state.ServerOver, state.OutcomeDidntNeed
				changed[i] = true
			}
		}
		if d.AssimilateState == state.AssimilateInit {
			d.AssimilateState = state.AssimilateReady
		}
	} else {
		for i := range newResults {
			d.NewResults = append(d.NewResults, ResultName(wu.Name, len(results)+i))
		}
	}

	switch {
	case hasCanonical:
		d.NeedValidate = c.awaiting > 0
	case d.ErrorMask == 0:
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
