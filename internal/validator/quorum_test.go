package validator

import (
	"errors"
	"reflect"
	"testing"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

const (
	valid   = state.ValidateValid
	invalid = state.ValidateInvalid
	inconc  = state.ValidateInconclusive
	tooLate = state.ValidateTooLate
)

type states = map[int64]state.ValidateState

// equal is agreement as bitwise equality of one-letter outputs.
func equal(a, b byte) bool { return a == b }

// near is a tolerance that is not transitive: letters one apart agree.
func near(a, b byte) bool { return a-b == 1 || b-a == 1 || a == b }

func TestQuorum(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		quorum int
		// outs are the candidates' outputs, ids 1, 2, ...; '-' is an
		// unusable output (missing or rejected).
		outs  string
		agree func(a, b byte) bool
		want  Verdict
	}{
		{"agreeing pair", 2, "aa", equal,
			Verdict{Canonical: 1, States: states{1: valid, 2: valid}}},
		{"pair disagrees: inconclusive, one more wanted", 2, "ab", equal,
			Verdict{States: states{1: inconc, 2: inconc}, TargetNResults: 3}},
		{"cheater in a quorum of 3 with min_quorum 2 is outvoted", 2, "xaa", equal,
			Verdict{Canonical: 2, States: states{1: invalid, 2: valid, 3: valid}}},
		{"cheater in a quorum of 3 with min_quorum 3: inconclusive", 3, "aax", equal,
			Verdict{States: states{1: inconc, 2: inconc, 3: inconc}, TargetNResults: 4}},
		{"two cheaters disagreeing: inconclusive", 2, "axy", equal,
			Verdict{States: states{1: inconc, 2: inconc, 3: inconc}, TargetNResults: 4}},
		{"two cheaters disagreeing, then a second honest result", 2, "axya", equal,
			Verdict{Canonical: 1, States: states{1: valid, 2: invalid, 3: invalid, 4: valid}}},
		{"all disagree: inconclusive", 3, "abcd", equal,
			Verdict{States: states{1: inconc, 2: inconc, 3: inconc, 4: inconc}, TargetNResults: 5}},
		{"missing output is a validate error; the other waits", 2, "-a", equal,
			Verdict{States: states{1: invalid}, ValidateErrors: []int64{1}}},
		{"missing output beside a quorum", 2, "a-a", equal,
			Verdict{Canonical: 1, States: states{1: valid, 2: invalid, 3: valid}, ValidateErrors: []int64{2}}},
		{"all missing", 2, "--", equal,
			Verdict{States: states{1: invalid, 2: invalid}, ValidateErrors: []int64{1, 2}}},
		{"min_quorum 1: the first output is canonical", 1, "a", equal,
			Verdict{Canonical: 1, States: states{1: valid}}},
		{"min_quorum 1: lowest id of a tie wins, the other is invalid", 1, "ba", equal,
			Verdict{Canonical: 1, States: states{1: valid, 2: invalid}}},
		{"min_quorum 0 counts as 1", 0, "a", equal,
			Verdict{Canonical: 1, States: states{1: valid}}},
		{"largest group wins over a lower id", 2, "abbab", equal,
			Verdict{Canonical: 2, States: states{1: invalid, 2: valid, 3: valid, 4: invalid, 5: valid}}},
		{"equal groups: the one with the lowest id wins", 2, "baab", equal,
			Verdict{Canonical: 1, States: states{1: valid, 2: invalid, 3: invalid, 4: valid}}},
		{"quorum of three reached", 3, "aaba", equal,
			Verdict{Canonical: 1, States: states{1: valid, 2: valid, 3: invalid, 4: valid}}},
		{"tolerance chain: the middle output agrees with both ends and is canonical", 3, "abc", near,
			Verdict{Canonical: 2, States: states{1: valid, 2: valid, 3: valid}}},
		{"tolerance: the output agreeing with most is canonical, not the lowest id", 2, "bcd", near,
			Verdict{Canonical: 2, States: states{1: valid, 2: valid, 3: valid}}},
		{"tolerance: outputs out of reach of the canonical one are invalid", 2, "abd", near,
			Verdict{Canonical: 1, States: states{1: valid, 2: valid, 3: invalid}}},
		{"nothing to judge", 2, "", equal, Verdict{States: states{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ids := make([]int64, len(tt.outs))
			unusable := make([]bool, len(tt.outs))
			for i := range tt.outs {
				ids[i] = int64(i + 1)
				unusable[i] = tt.outs[i] == '-'
			}
			got, err := Quorum(tt.quorum, ids, unusable, func(i, j int) (bool, error) {
				if unusable[i] || unusable[j] || i >= j {
					t.Errorf("agree(%d, %d) called: want usable i < j", i, j)
				}
				return tt.agree(tt.outs[i], tt.outs[j]), nil
			})
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Quorum(min_quorum %d, outputs %q)\n got  %+v, %v\n want %+v, nil", tt.quorum, tt.outs, got, err, tt.want)
			}
		})
	}
}

func TestQuorumCompareErrorIsReturned(t *testing.T) {
	t.Parallel()
	boom := errors.New("checker program failed")
	_, err := Quorum(2, []int64{1, 2}, []bool{false, false}, func(int, int) (bool, error) { return false, boom })
	if !errors.Is(err, boom) {
		t.Errorf("Quorum with a failing comparison = %v, want %v", err, boom)
	}
}

func TestAgainstReference(t *testing.T) {
	t.Parallel()
	outs := "ab-"
	got, err := AgainstReference([]int64{1, 2, 3}, []bool{false, false, true}, func(i int) (bool, error) {
		return outs[i] == 'a', nil
	})
	want := Verdict{States: states{1: valid, 2: invalid, 3: invalid}, ValidateErrors: []int64{3}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("AgainstReference(a; a, b, missing)\n got  %+v, %v\n want %+v, nil", got, err, want)
	}
}

func TestCandidates(t *testing.T) {
	t.Parallel()
	wu := row.Workunit{CanonicalResultID: 1}
	rs := []row.Result{
		{ID: 1, ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ValidateState: state.ValidateValid},
		{ID: 2, ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ValidateState: state.ValidateInit},
		{ID: 3, ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ValidateState: state.ValidateInconclusive},
		{ID: 4, ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ValidateState: state.ValidateInvalid},
		{ID: 5, ServerState: state.ServerOver, Outcome: state.OutcomeClientError},
		{ID: 6, ServerState: state.ServerInProgress},
		{ID: 7, ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ValidateState: state.ValidateTooLate},
	}
	var ids []int64
	for _, r := range Candidates(wu, rs) {
		ids = append(ids, r.ID)
	}
	if !reflect.DeepEqual(ids, []int64{2, 3}) {
		t.Errorf("Candidates = %v, want [2 3]: successes awaiting a verdict, not the canonical one", ids)
	}
}
