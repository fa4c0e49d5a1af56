package protocol

import (
	"cmp"
	"encoding/json"
	"slices"
)

// EncodeCoprocs is the canonical text of a host's coprocessors, stored in
// host.coprocs: JSON of cs without the request's work asks, NVIDIA, AMD,
// Intel, Apple and then the other types by name. The same hardware gives
// the same text, so comparing texts tells whether the host changed; no
// coprocessor is "".
func EncodeCoprocs(cs []Coproc) string {
	if len(cs) == 0 {
		return ""
	}
	sorted := slices.Clone(cs)
	slices.SortStableFunc(sorted, func(a, b Coproc) int {
		return cmp.Or(cmp.Compare(resourceRank(a.Type), resourceRank(b.Type)), cmp.Compare(a.Type, b.Type))
	})
	b, err := json.Marshal(sorted)
	if err != nil {
		// Only NaN or infinite numbers fail, and the parser rejects those.
		return ""
	}
	return string(b)
}

// DecodeCoprocs reads EncodeCoprocs's text; "" is none.
func DecodeCoprocs(s string) ([]Coproc, error) {
	if s == "" {
		return nil, nil
	}
	var cs []Coproc
	if err := json.Unmarshal([]byte(s), &cs); err != nil {
		return nil, err
	}
	return cs, nil
}

func resourceRank(t string) int {
	switch t {
	case ResourceNVIDIA:
		return 0
	case ResourceAMD:
		return 1
	case ResourceIntel:
		return 2
	case ResourceApple:
		return 3
	}
	return 4
}
