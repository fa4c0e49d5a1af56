package e2e

import (
	"fmt"
	"sort"

	"github.com/taskserver/taskserver/internal/state"
)

// lcJob is a workunit row as the lifecycle checks read it.
type lcJob struct {
	ID                             int64
	Name                           string
	ErrorMask                      state.ErrorMask
	HoldReason                     state.ErrorMask
	AssimilateState                state.AssimilateState
	CanonicalID                    int64
	CanonicalCredit                float64
	NeedValidate                   bool
	MinQuorum, Target              int
	MaxError, MaxTotal, MaxSuccess int
	FpopsEst, FixedCredit          float64
}

// lcResult is a result row as the lifecycle checks read it.
type lcResult struct {
	ID, JobID, HostID, UserID         int64
	Name                              string
	ServerState                       state.ServerState
	Outcome                           state.Outcome
	ValidateState                     state.ValidateState
	ClientState, ExitStatus           int
	Created, Sent, Received, Deadline int64
	Granted, Claimed                  float64
}

// late reports whether the result was reported after its deadline.
func (r lcResult) late() bool { return r.Received > 0 && r.Deadline > 0 && r.Received > r.Deadline }

// maskTolerance is how far apart (seconds) two instance events may be and
// still be seen by the transitioner in one look at the job: it runs every
// few hundred milliseconds, and the times are whole seconds.
const maskTolerance = 2

// lateBlip is how long after its deadline a success must arrive for the
// instance to have counted as an error (timed out) meanwhile; a success
// reported just after the deadline usually beat the timeout.
const lateBlip = 1

// instClass is what an instance counts as in the job's limits.
type instClass int

const (
	classNone instClass = iota
	classSuccess
	classError
	classCouldntSend
)

type maskEvent struct {
	at    int64
	inst  int
	class instClass
}

// errorBits are the bits the transitioner's limits set, and the ones it
// sets when nothing else can happen to a job.
const (
	limitBits = state.ErrCouldntSendResult | state.ErrTooManyErrorResults | state.ErrTooManySuccessResult
	stuckBits = state.ErrTooManyTotalResults | state.ErrNoCanonicalResult
	knownBits = limitBits | stuckBits | state.ErrCancelled
)

// explainErrorMask says whether a failed job's error_mask is what its
// instance history calls for; nil when it is. The history is replayed in
// time order: each instance counts as an error from its deadline if it
// timed out (also when it was reported later: a late success that arrived
// after the job failed is TOO_LATE and stays an error), from its report if
// it failed, and as a success from its report. After each step the limit
// bits that hold are the mask the transitioner would set at that moment:
//   - the job fails with limit bits exactly when they first hold (within
//     maskTolerance), so its mask must be the bits of a step no later
//     than that;
//   - every bit it has must hold on the final history too;
//   - TOO_MANY_TOTAL_RESULTS and NO_CANONICAL_RESULT are set alone, when no
//     limit bit holds, and need as many instances as the rule says:
//     NO_CANONICAL_RESULT only with fewer than max_total_results and nothing
//     pending (so nothing can have changed since), TOO_MANY_TOTAL_RESULTS
//     only when the instances the job needed would exceed max_total_results.
//
// Nothing cancels jobs in the lifecycle test, so CANCELLED is never
// explained.
func explainErrorMask(j lcJob, rs []lcResult) error {
	m := j.ErrorMask
	switch {
	case m == 0:
		return fmt.Errorf("error_mask is 0")
	case m&^knownBits != 0:
		return fmt.Errorf("error_mask %d has unknown bits", m)
	case m&state.ErrCancelled != 0:
		return fmt.Errorf("error_mask %s: cancelled, but nothing cancels jobs here", m)
	}
	low, stuck := m&limitBits, m&stuckBits
	if stuck != 0 && (low != 0 || stuck == stuckBits) {
		return fmt.Errorf("error_mask %s: %s is only ever set alone", m, stuck)
	}

	var evs []maskEvent
	for i, r := range rs {
		if r.ServerState != state.ServerOver {
			continue
		}
		switch r.Outcome {
		case state.OutcomeCouldntSend:
			evs = append(evs, maskEvent{0, i, classCouldntSend})
		case state.OutcomeNoReply, state.OutcomeClientDetached:
			evs = append(evs, maskEvent{r.Deadline, i, classError})
		case state.OutcomeClientError, state.OutcomeValidateError:
			at := r.Received
			if r.late() || at == 0 {
				at = r.Deadline
			}
			evs = append(evs, maskEvent{at, i, classError})
		case state.OutcomeSuccess:
			if r.late() && r.Received > r.Deadline+lateBlip || r.ValidateState == state.ValidateTooLate {
				evs = append(evs, maskEvent{r.Deadline, i, classError})
			}
			if r.ValidateState != state.ValidateTooLate {
				evs = append(evs, maskEvent{r.Received, i, classSuccess})
			}
		}
	}
	sort.SliceStable(evs, func(a, b int) bool { return evs[a].at < evs[b].at })

	type step struct {
		at   int64
		bits state.ErrorMask
	}
	class := make([]instClass, len(rs))
	bitsNow := func() state.ErrorMask {
		var errs, succ, cs int
		for _, c := range class {
			switch c {
			case classError:
				errs++
			case classSuccess:
				succ++
			case classCouldntSend:
				cs++
			}
		}
		var b state.ErrorMask
		if cs > 0 {
			b |= state.ErrCouldntSendResult
		}
		if errs > j.MaxError {
			b |= state.ErrTooManyErrorResults
		}
		if succ > j.MaxSuccess {
			b |= state.ErrTooManySuccessResult
		}
		return b
	}
	steps := []step{{at: -1}}
	for i := 0; i < len(evs); {
		at := evs[i].at
		for ; i < len(evs) && evs[i].at == at; i++ {
			class[evs[i].inst] = evs[i].class
		}
		steps = append(steps, step{at, bitsNow()})
	}
	final := steps[len(steps)-1].bits

	if extra := low &^ final; extra != 0 {
		return fmt.Errorf("error_mask %s: %s does not hold even on the final history (%s)", m, extra, final)
	}
	first := -1
	for k, s := range steps {
		if s.bits != 0 {
			first = k
			break
		}
	}
	allowed := false
	for _, s := range steps {
		if first >= 0 && s.at > steps[first].at+maskTolerance {
			break
		}
		if s.bits == low {
			allowed = true
			break
		}
	}
	if !allowed {
		return fmt.Errorf("error_mask %s: the history first calls for %s at %d and the job should have failed then",
			m, steps[first].bits, steps[first].at)
	}
	total := len(rs)
	switch stuck {
	case state.ErrNoCanonicalResult:
		if total >= j.MaxTotal {
			return fmt.Errorf("error_mask %s with %d instances: max_total_results %d is spent, want too_many_total_results", m, total, j.MaxTotal)
		}
		if final != 0 {
			return fmt.Errorf("error_mask %s: nothing was pending then, yet the history calls for %s", m, final)
		}
	case state.ErrTooManyTotalResults:
		if need := max(j.Target, j.MinQuorum); total+need <= j.MaxTotal {
			return fmt.Errorf("error_mask %s with %d instances: %d more would not exceed max_total_results %d", m, total, need, j.MaxTotal)
		}
	}
	return nil
}
