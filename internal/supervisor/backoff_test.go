package supervisor

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	const s = time.Second
	for _, tc := range []struct {
		name    string
		uptimes []time.Duration
		want    []time.Duration
	}{
		{"quick failures double up to the cap", []time.Duration{0, 0, 0, 0, 0, 0, 0, 0}, []time.Duration{1 * s, 2 * s, 4 * s, 8 * s, 16 * s, 32 * s, 60 * s, 60 * s}},
		{"a stable run resets the pause", []time.Duration{0, 0, 0, 5 * time.Minute, 0}, []time.Duration{1 * s, 2 * s, 4 * s, 1 * s, 2 * s}},
		{"just short of stable does not reset", []time.Duration{0, 0, time.Minute - 1}, []time.Duration{1 * s, 2 * s, 4 * s}},
		{"exactly stable resets", []time.Duration{0, 0, time.Minute}, []time.Duration{1 * s, 2 * s, 1 * s}},
	} {
		b := newBackoff(time.Second, time.Minute, time.Minute)
		for i, up := range tc.uptimes {
			if got := b.next(up); got != tc.want[i] {
				t.Errorf("%s: restart %d after uptime %s: next = %s, want %s", tc.name, i+1, up, got, tc.want[i])
			}
		}
	}
}
