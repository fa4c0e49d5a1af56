package validator

import (
	"slices"

	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

// CobblestonesPerFpop is BOINC's credit scale: 200 credits (cobblestones)
// for a day of a 1 GFLOPS computer, i.e. 86400e9 floating-point operations.
const CobblestonesPerFpop = 200 / 86400e9

// Credit is the credit granted for a valid instance of a job estimated at
// fpopsEst floating-point operations.
func Credit(fpopsEst float64) float64 { return fpopsEst * CobblestonesPerFpop }

// Digest identifies an instance's output: equal digests mean bitwise equal
// output files.
type Digest [32]byte

// Output is what reading one instance's output files gave.
type Output struct {
	Digest Digest
	// Missing is set when the output could not be read: the file is absent,
	// its name is unusable, or the instance's file list does not parse.
	Missing bool
}

// Verdict is what the validator decides for one job.
type Verdict struct {
	// Canonical is the canonical instance found now, 0 if none.
	Canonical int64
	// States holds the new validate_state of each judged instance.
	States map[int64]state.ValidateState
	// ValidateErrors are the instances whose output could not be read:
	// outcome VALIDATE_ERROR, validate_state INVALID.
	ValidateErrors []int64
	// TargetNResults is the number of instances the job now wants, 0 for
	// no change.
	TargetNResults int
}

// Candidates returns the instances of a job that await a verdict: reported
// successes whose validate_state is INIT or INCONCLUSIVE, other than the
// canonical instance.
func Candidates(wu store.Workunit, results []store.Result) []store.Result {
	var out []store.Result
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

// Quorum judges a job without a canonical instance. candidates are the
// instances awaiting a verdict and outputs their read outputs. Instances
// whose output is missing are validate errors. The rest are grouped by
// output; the largest group of at least min_quorum (ties: the one holding
// the lowest id) is valid and its lowest id is canonical, the others are
// invalid. With no such group, min_quorum or more readable outputs that
// disagree are all inconclusive and one more instance is wanted; fewer wait
// as they are for more to arrive.
func Quorum(wu store.Workunit, candidates []store.Result, outputs map[int64]Output) Verdict {
	v := Verdict{States: map[int64]state.ValidateState{}}
	groups := map[Digest][]int64{}
	var order []Digest
	var readable []int64
	for _, r := range candidates {
		out := outputs[r.ID]
		if out.Missing {
			v.ValidateErrors = append(v.ValidateErrors, r.ID)
			v.States[r.ID] = state.ValidateInvalid
			continue
		}
		if _, ok := groups[out.Digest]; !ok {
			order = append(order, out.Digest)
		}
		groups[out.Digest] = append(groups[out.Digest], r.ID)
		readable = append(readable, r.ID)
	}
	var best []int64
	for _, d := range order {
		g := groups[d]
		if len(g) < wu.MinQuorum {
			continue
		}
		if best == nil || len(g) > len(best) || (len(g) == len(best) && slices.Min(g) < slices.Min(best)) {
			best = g
		}
	}
	switch {
	case best != nil:
		v.Canonical = slices.Min(best)
		for _, id := range readable {
			v.States[id] = state.ValidateInvalid
		}
		for _, id := range best {
			v.States[id] = state.ValidateValid
		}
	case len(readable) >= wu.MinQuorum:
		for _, id := range readable {
			v.States[id] = state.ValidateInconclusive
		}
		v.TargetNResults = len(readable) + 1
	}
	return v
}

// AgainstCanonical judges instances reported after the canonical one:
// valid if their output equals it, invalid if not, a validate error if it
// cannot be read.
func AgainstCanonical(canonical Digest, candidates []store.Result, outputs map[int64]Output) Verdict {
	v := Verdict{States: map[int64]state.ValidateState{}}
	for _, r := range candidates {
		out := outputs[r.ID]
		switch {
		case out.Missing:
			v.ValidateErrors = append(v.ValidateErrors, r.ID)
			v.States[r.ID] = state.ValidateInvalid
		case out.Digest == canonical:
			v.States[r.ID] = state.ValidateValid
		default:
			v.States[r.ID] = state.ValidateInvalid
		}
	}
	return v
}
