package validator

import (
	"reflect"
	"testing"

	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

func digest(b byte) Digest { return Digest{b} }

// cands returns candidates with ids 1..len(outs) and their outputs; a zero
// byte means the output is missing.
func cands(outs ...byte) ([]store.Result, map[int64]Output) {
	var rs []store.Result
	m := map[int64]Output{}
	for i, o := range outs {
		id := int64(i + 1)
		rs = append(rs, store.Result{ID: id, ServerState: state.ServerOver, Outcome: state.OutcomeSuccess})
		if o == 0 {
			m[id] = Output{Missing: true}
		} else {
			m[id] = Output{Digest: digest(o)}
		}
	}
	return rs, m
}

const (
	valid   = state.ValidateValid
	invalid = state.ValidateInvalid
	inconc  = state.ValidateInconclusive
)

type states = map[int64]state.ValidateState

func TestQuorum(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		quorum int
		outs   []byte
		want   Verdict
	}{
		{"two agree", 2, []byte{'a', 'a'},
			Verdict{Canonical: 1, States: states{1: valid, 2: valid}}},
		{"two disagree: inconclusive, one more wanted", 2, []byte{'a', 'b'},
			Verdict{States: states{1: inconc, 2: inconc}, TargetNResults: 3}},
		{"two of three agree: the odd one is invalid", 2, []byte{'x', 'a', 'a'},
			Verdict{Canonical: 2, States: states{1: invalid, 2: valid, 3: valid}}},
		{"missing output is a validate error; the other waits", 2, []byte{0, 'a'},
			Verdict{States: states{1: invalid}, ValidateErrors: []int64{1}}},
		{"missing output beside a quorum", 2, []byte{'a', 0, 'a'},
			Verdict{Canonical: 1, States: states{1: valid, 2: invalid, 3: valid}, ValidateErrors: []int64{2}}},
		{"all missing", 2, []byte{0, 0},
			Verdict{States: states{1: invalid, 2: invalid}, ValidateErrors: []int64{1, 2}}},
		{"quorum of one: lowest id of a tie wins", 1, []byte{'b', 'a'},
			Verdict{Canonical: 1, States: states{1: valid, 2: invalid}}},
		{"largest group wins over a lower id", 2, []byte{'a', 'b', 'b', 'a', 'b'},
			Verdict{Canonical: 2, States: states{1: invalid, 2: valid, 3: valid, 4: invalid, 5: valid}}},
		{"equal groups: the one with the lowest id wins", 2, []byte{'b', 'a', 'a', 'b'},
			Verdict{Canonical: 1, States: states{1: valid, 2: invalid, 3: invalid, 4: valid}}},
		{"quorum of three not reached by two agreeing", 3, []byte{'a', 'a', 'b'},
			Verdict{States: states{1: inconc, 2: inconc, 3: inconc}, TargetNResults: 4}},
		{"quorum of three reached", 3, []byte{'a', 'a', 'b', 'a'},
			Verdict{Canonical: 1, States: states{1: valid, 2: valid, 3: invalid, 4: valid}}},
		{"nothing to judge", 2, nil, Verdict{States: states{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rs, outs := cands(tt.outs...)
			got := Quorum(store.Workunit{MinQuorum: tt.quorum}, rs, outs)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Quorum(quorum %d, outputs %q)\n got  %+v\n want %+v", tt.quorum, tt.outs, got, tt.want)
			}
		})
	}
}

func TestAgainstCanonical(t *testing.T) {
	t.Parallel()
	rs, outs := cands('a', 'b', 0)
	got := AgainstCanonical(digest('a'), rs, outs)
	want := Verdict{States: states{1: valid, 2: invalid, 3: invalid}, ValidateErrors: []int64{3}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("AgainstCanonical(a; a, b, missing)\n got  %+v\n want %+v", got, want)
	}
}

func TestCandidates(t *testing.T) {
	t.Parallel()
	wu := store.Workunit{CanonicalResultID: 1}
	rs := []store.Result{
		{ID: 1, ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ValidateState: state.ValidateValid},
		{ID: 2, ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ValidateState: state.ValidateInit},
		{ID: 3, ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ValidateState: state.ValidateInconclusive},
		{ID: 4, ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ValidateState: state.ValidateInvalid},
		{ID: 5, ServerState: state.ServerOver, Outcome: state.OutcomeClientError},
		{ID: 6, ServerState: state.ServerInProgress},
	}
	var ids []int64
	for _, r := range Candidates(wu, rs) {
		ids = append(ids, r.ID)
	}
	if !reflect.DeepEqual(ids, []int64{2, 3}) {
		t.Errorf("Candidates = %v, want [2 3]: successes awaiting a verdict, not the canonical one", ids)
	}
}

func TestCredit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ fpops, want float64 }{{0, 0}, {86400e9, 200}, {43200e9, 100}} {
		if got := Credit(tt.fpops); got != tt.want {
			t.Errorf("Credit(%g) = %g, want %g", tt.fpops, got, tt.want)
		}
	}
}
