package simclient

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	const lo, hi = time.Minute, 4 * time.Hour
	for _, tc := range []struct {
		name string
		n    int
		u    float64
		want time.Duration
	}{
		{"no failure no wait", 0, 0.5, 0},
		{"first failure is lo at the middle of the jitter", 1, 0.5, time.Minute},
		{"first failure low end of jitter", 1, 0, 30 * time.Second},
		{"first failure high end of jitter", 1, 0.75, 75 * time.Second},
		{"doubles per failure", 3, 0.5, 4 * time.Minute},
		{"capped at hi before jitter", 9, 0.5, hi},
		{"jitter above cap is capped", 9, 0.99, hi},
		{"jitter below cap stays randomized", 9, 0, 2 * time.Hour},
		{"exponent stops growing", 1000, 0.5, hi},
	} {
		if got := backoff(tc.n, lo, hi, tc.u); got != tc.want {
			t.Errorf("%s: backoff(%d, %s, %s, %g) = %s, want %s", tc.name, tc.n, lo, hi, tc.u, got, tc.want)
		}
	}
}

func TestScaled(t *testing.T) {
	t.Parallel()
	o := Options{BackoffScale: 1.0 / 600, BackoffMax: 5 * time.Second}
	if got := o.scaled(time.Minute); got != 100*time.Millisecond {
		t.Errorf("scaled(1m) with scale 1/600 = %s, want 100ms", got)
	}
	if got := o.scaled(4 * time.Hour); got != 5*time.Second {
		t.Errorf("scaled(4h) with scale 1/600 and max 5s = %s, want 5s", got)
	}
}

func TestAssignKinds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n                                 int
		fracs                             kindFracs
		wantF, wantV, wantC, wantL, wantN int
	}{
		{20, kindFracs{}, 0, 0, 0, 0, 20},
		{20, kindFracs{fail: 0.1, vanish: 0.05, cheat: 0.2}, 2, 1, 4, 0, 13},
		{20, kindFracs{fail: 0.1, late: 0.15}, 2, 0, 0, 3, 15},
		{3, kindFracs{fail: 0.5, vanish: 0.5}, 2, 1, 0, 0, 0}, // rounding up may not exceed n
		{4, kindFracs{cheat: 0.5, late: 0.75}, 0, 0, 2, 2, 0}, // later kinds get what is left
		{10, kindFracs{fail: 1}, 10, 0, 0, 0, 0},
		{10, kindFracs{late: 1}, 0, 0, 0, 10, 0},
	} {
		kinds := assignKinds(tc.n, tc.fracs, rand.New(rand.NewPCG(1, 2)))
		got := map[Kind]int{}
		for _, k := range kinds {
			got[k]++
		}
		if len(kinds) != tc.n || got[KindFailing] != tc.wantF || got[KindVanishing] != tc.wantV ||
			got[KindCheating] != tc.wantC || got[KindLate] != tc.wantL || got[KindNormal] != tc.wantN {
			t.Errorf("assignKinds(%d, %+v) = %v, want %d failing, %d vanishing, %d cheating, %d late, %d normal",
				tc.n, tc.fracs, got, tc.wantF, tc.wantV, tc.wantC, tc.wantL, tc.wantN)
		}
	}
}

func TestReadAuthenticators(t *testing.T) {
	t.Parallel()
	got, err := ReadAuthenticators(strings.NewReader("# users\nabc\n\n  def  \r\n#x\nghi"))
	if err != nil || strings.Join(got, ",") != "abc,def,ghi" {
		t.Errorf("ReadAuthenticators = %q, %v; want abc, def, ghi", got, err)
	}
}
