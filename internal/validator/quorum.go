package validator

import (
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// Verdict is what the validator decides for one job.
type Verdict struct {
	// Canonical is the canonical instance found now, 0 if none.
	Canonical int64
	// States holds the new validate_state of each judged instance.
	States map[int64]state.ValidateState
	// ValidateErrors are the instances whose output could not be used
	// (missing, or rejected by the checker): outcome VALIDATE_ERROR,
	// validate_state INVALID.
	ValidateErrors []int64
	// TargetNResults is the number of instances the job now wants, 0 for
	// no change.
	TargetNResults int
}

// Candidates returns the instances of a job that await a verdict: reported
// successes whose validate_state is INIT or INCONCLUSIVE, other than the
// canonical instance, in the order given (the store lists them by id).
func Candidates(wu row.Workunit, results []row.Result) []row.Result {
	var out []row.Result
	for _, r := range results {
		if r.ID == wu.CanonicalResultID || r.ServerState != state.ServerOver || r.Outcome != state.OutcomeSuccess {
			continue
		}
		if r.ValidateState == state.ValidateInit || r.ValidateState == state.ValidateInconclusive {
			out = append(out, r)
		}
	}
	return out
}

// Quorum judges a job that has no canonical instance, as BOINC's check_set
// does but with the largest agreement winning. ids are the candidates in
// ascending order; unusable[i] says candidate i's output is missing or was
// rejected, which makes it a validate error; agree(i, j), for usable i < j,
// says whether two outputs agree (an error is returned as is: the job is
// retried later).
//
// Each usable candidate i with the candidates agreeing with it forms a
// group; the largest group (ties: the lowest i) wins if it has at least
// minQuorum members: i is canonical, the group is valid, every other usable
// candidate invalid. With no such group, minQuorum or more usable outputs
// are all inconclusive and one more instance than there are usable outputs
// is wanted; fewer wait as they are for more to arrive. Agreement need not
// be transitive (outputs within a tolerance): only the canonical output is
// sure to agree with every valid one.
func Quorum(minQuorum int, ids []int64, unusable []bool, agree func(i, j int) (bool, error)) (Verdict, error) {
	v := Verdict{States: map[int64]state.ValidateState{}}
	minQuorum = max(minQuorum, 1)
	var usable []int
	for i, id := range ids {
		if unusable[i] {
			v.ValidateErrors = append(v.ValidateErrors, id)
			v.States[id] = state.ValidateInvalid
			continue
		}
		usable = append(usable, i)
	}
	if len(usable) < minQuorum {
		return v, nil
	}
	// agrees[a][b]: usable[a] and usable[b] agree; each pair is compared
	// once, Compare being symmetric.
	agrees := make([][]bool, len(usable))
	for a := range usable {
		agrees[a] = make([]bool, len(usable))
		agrees[a][a] = true
	}
	for a := range usable {
		for b := a + 1; b < len(usable); b++ {
			ok, err := agree(usable[a], usable[b])
			if err != nil {
				return Verdict{}, err
			}
			agrees[a][b], agrees[b][a] = ok, ok
		}
	}
	best, bestSize := -1, 0
	for a := range usable {
		size := 0
		for b := range usable {
			if agrees[a][b] {
				size++
			}
		}
		if size > bestSize {
			best, bestSize = a, size
		}
	}
	if bestSize >= minQuorum {
		v.Canonical = ids[usable[best]]
		for b, i := range usable {
			if agrees[best][b] {
				v.States[ids[i]] = state.ValidateValid
			} else {
				v.States[ids[i]] = state.ValidateInvalid
			}
		}
		return v, nil
	}
	for _, i := range usable {
		v.States[ids[i]] = state.ValidateInconclusive
	}
	v.TargetNResults = len(usable) + 1
	return v, nil
}

// AgainstReference judges candidates against one reference output: the
// canonical instance's, or a known answer. ids are the candidates,
// unusable[i] marks a validate error, and matches(i) compares usable
// candidate i with the reference: valid if it matches, invalid if not.
func AgainstReference(ids []int64, unusable []bool, matches func(i int) (bool, error)) (Verdict, error) {
	v := Verdict{States: map[int64]state.ValidateState{}}
	for i, id := range ids {
		if unusable[i] {
			v.ValidateErrors = append(v.ValidateErrors, id)
			v.States[id] = state.ValidateInvalid
			continue
		}
		ok, err := matches(i)
		if err != nil {
			return Verdict{}, err
		}
		if ok {
			v.States[id] = state.ValidateValid
		} else {
			v.States[id] = state.ValidateInvalid
		}
	}
	return v, nil
}
