package e2e

import (
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/state"
)

// The error-mask explanation is the lifecycle test's own model of the
// transitioner's limits, so it is tested on its own (also in -short mode).
func TestExplainErrorMask(t *testing.T) {
	t.Parallel()
	job := func(mask state.ErrorMask) lcJob {
		return lcJob{Name: "j", ErrorMask: mask, MinQuorum: 2, Target: 2, MaxError: 2, MaxTotal: 6, MaxSuccess: 3}
	}
	over := func(o state.Outcome, v state.ValidateState, received, deadline int64) lcResult {
		return lcResult{ServerState: state.ServerOver, Outcome: o, ValidateState: v, Received: received, Deadline: deadline}
	}
	clientErr := func(at int64) lcResult { return over(state.OutcomeClientError, state.ValidateInit, at, 1000) }
	noReply := func(deadline int64) lcResult { return over(state.OutcomeNoReply, state.ValidateInit, 0, deadline) }
	success := func(at int64, v state.ValidateState) lcResult { return over(state.OutcomeSuccess, v, at, 1000) }
	didntNeed := lcResult{ServerState: state.ServerOver, Outcome: state.OutcomeDidntNeed}
	lateSuccess := func(deadline, at int64, v state.ValidateState) lcResult {
		return over(state.OutcomeSuccess, v, at, deadline)
	}
	for _, tc := range []struct {
		name    string
		wu      lcJob
		results []lcResult
		wantErr string // "" = explained
	}{
		{"three errors over a limit of two", job(state.ErrTooManyErrorResults),
			[]lcResult{clientErr(10), noReply(20), clientErr(30), didntNeed}, ""},
		{"too many errors with only two", job(state.ErrTooManyErrorResults),
			[]lcResult{clientErr(10), noReply(20), success(30, state.ValidateInit)}, "does not hold"},
		{"four successes over a limit of three", job(state.ErrTooManySuccessResult),
			[]lcResult{success(1, state.ValidateInconclusive), success(2, state.ValidateInconclusive),
				success(3, state.ValidateInconclusive), success(4, state.ValidateInit)}, ""},
		{"a late success after the failure was the error it counted as", job(state.ErrTooManyErrorResults),
			[]lcResult{clientErr(10), clientErr(20), lateSuccess(25, 40, state.ValidateTooLate)}, ""},
		{"a late success before the failure counts as a success",
			job(state.ErrTooManyErrorResults),
			[]lcResult{lateSuccess(5, 9, state.ValidateInit), clientErr(10), clientErr(20), clientErr(30)}, ""},
		{"no canonical result although the errors exceeded the limit", job(state.ErrNoCanonicalResult),
			[]lcResult{clientErr(10), clientErr(20), clientErr(30)}, "nothing was pending"},
		{"error and success limits both reached at one moment", job(state.ErrTooManyErrorResults | state.ErrTooManySuccessResult),
			[]lcResult{clientErr(10), clientErr(20), success(1, state.ValidateInconclusive), success(2, state.ValidateInconclusive),
				success(3, state.ValidateInconclusive), success(30, state.ValidateInit), clientErr(30)}, ""},
		{"the second limit reached long after the first is not set", job(state.ErrTooManyErrorResults | state.ErrTooManySuccessResult),
			[]lcResult{clientErr(10), clientErr(20), clientErr(30), success(1, state.ValidateInconclusive), success(2, state.ValidateInconclusive),
				success(3, state.ValidateInconclusive), success(90, state.ValidateInit)}, "should have failed then"},
		{"errors after the failure add no bit", job(state.ErrTooManyTotalResults),
			[]lcResult{success(1, state.ValidateInconclusive), success(2, state.ValidateInconclusive),
				success(3, state.ValidateInconclusive), clientErr(4), clientErr(5), noReply(50), noReply(60)}, ""},
		{"too many total with room for more", job(state.ErrTooManyTotalResults),
			[]lcResult{success(1, state.ValidateInconclusive), clientErr(2)}, "would not exceed"},
		{"no canonical result with instances to spare and nothing pending", job(state.ErrNoCanonicalResult),
			[]lcResult{success(1, state.ValidateInvalid), success(2, state.ValidateInvalid)}, ""},
		{"no canonical result when the total is spent", job(state.ErrNoCanonicalResult),
			[]lcResult{success(1, state.ValidateInconclusive), success(2, state.ValidateInconclusive), success(3, state.ValidateInconclusive),
				clientErr(4), clientErr(5), didntNeed}, "is spent"},
		{"no error bit", job(0), []lcResult{clientErr(1)}, "is 0"},
		{"cancelled", job(state.ErrCancelled), nil, "cancelled"},
		{"a limit bit with a total bit", job(state.ErrTooManyErrorResults | state.ErrTooManyTotalResults),
			[]lcResult{clientErr(1), clientErr(2), clientErr(3)}, "only ever set alone"},
		{"could not send", job(state.ErrCouldntSendResult),
			[]lcResult{{ServerState: state.ServerOver, Outcome: state.OutcomeCouldntSend}, clientErr(5)}, ""},
	} {
		err := explainErrorMask(tc.wu, tc.results)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: explainErrorMask = %v, want nil", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: explainErrorMask = %v, want an error containing %q", tc.name, err, tc.wantErr)
		}
	}
}
