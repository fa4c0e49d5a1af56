package passwd

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// The password and address of samples 20 and 21 and the hash PROTOCOL.md
// §10 records the client sending for them.
const (
	samplePassword = "secret123"
	sampleEmail    = "tester@example.com"
	sampleHash     = "4f9932fb9f503d506cf3acbad04ec278"
)

func TestClientHashIsTheClients(t *testing.T) {
	t.Parallel()
	for _, email := range []string{sampleEmail, "Tester@Example.COM"} {
		if got := ClientHash(samplePassword, email); got != sampleHash {
			t.Errorf("ClientHash(%q, %q) = %s, want %s (PROTOCOL.md §10)", samplePassword, email, got, sampleHash)
		}
	}
}

func TestHashAndCheck(t *testing.T) {
	t.Parallel()
	// Tests run with the race detector, under which bcrypt is slow: all
	// but one hash here have the least cost.
	const cost = bcrypt.MinCost
	if h, err := Hash(sampleHash, DefaultCost); err != nil || strings.Contains(h, sampleHash) || !strings.HasPrefix(h, "$2a$10$") {
		t.Fatalf("Hash = %q, %v; want bcrypt of cost 10 without the md5 in it", h, err)
	}
	h, err := Hash(sampleHash, cost)
	if err != nil {
		t.Fatal(err)
	}
	// PHP writes $2y$; BOINC databases hold that form.
	php := "$2y$" + strings.TrimPrefix(h, "$2a$")
	higherCost, err := Hash(sampleHash, cost+1)
	if err != nil {
		t.Fatal(err)
	}
	wrong := ClientHash("wrong", sampleEmail)
	for _, tt := range []struct {
		name, stored, given string
		ok, rehash          bool
	}{
		{"bcrypt", h, sampleHash, true, false},
		{"bcrypt, given in capitals", h, " " + strings.ToUpper(sampleHash), true, false},
		{"bcrypt, wrong", h, wrong, false, false},
		{"PHP's bcrypt", php, sampleHash, true, false},
		{"bcrypt of a higher cost", higherCost, sampleHash, true, false},
		{"legacy md5", sampleHash, sampleHash, true, true},
		{"legacy md5 in capitals", strings.ToUpper(sampleHash), sampleHash, true, true},
		{"legacy md5, wrong", sampleHash, wrong, false, false},
		{"no password", "", "", false, false},
		{"no password, some hash", "", sampleHash, false, false},
		{"garbage stored", "secret", "secret", false, false},
	} {
		ok, rehash := Check(tt.stored, tt.given, cost)
		if ok != tt.ok || rehash != tt.rehash {
			t.Errorf("%s: Check(%q, %q) = %v, %v; want %v, %v", tt.name, tt.stored, tt.given, ok, rehash, tt.ok, tt.rehash)
		}
	}
	// An operator who raises the cost has older hashes made again.
	if ok, rehash := Check(h, sampleHash, cost+1); !ok || !rehash {
		t.Errorf("Check of a cost-%d hash at cost %d = %v, %v; want true, true", cost, cost+1, ok, rehash)
	}
	for _, c := range []int{bcrypt.MinCost - 1, bcrypt.MaxCost + 1} {
		if CheckCost(c) == nil {
			t.Errorf("CheckCost(%d) = nil, want an error", c)
		}
	}
}

// fastest returns the shortest of three runs of f: what f costs at
// least, whatever else the machine does.
func fastest(f func()) time.Duration {
	d := time.Duration(1 << 62)
	for range 3 {
		start := time.Now()
		f()
		d = min(d, time.Since(start))
	}
	return d
}

// Check costs a bcrypt comparison whatever is stored: a bcrypt hash, the
// legacy md5, or nothing (no password, no account). A check that returned
// at once for an empty or md5 row would tell by its speed which addresses
// have accounts.
func TestCheckCostsOneComparisonWhateverIsStored(t *testing.T) {
	t.Parallel()
	const cost = 6 // a few milliseconds; a skipped comparison takes well under one
	stored, err := Hash(sampleHash, cost)
	if err != nil {
		t.Fatal(err)
	}
	wrong := ClientHash("wrong", sampleEmail)
	bcryptTime := fastest(func() { Check(stored, wrong, cost) })
	for what, s := range map[string]string{"nothing": "", "the legacy md5": sampleHash} {
		// Lax: the machine is shared, and a skipped comparison is a
		// thousand times faster.
		if d := fastest(func() { Check(s, wrong, cost) }); d < bcryptTime/10 {
			t.Errorf("Check against %s took %v, a bcrypt comparison %v: want about the same", what, d, bcryptTime)
		}
	}
}
