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

// Hashes as BOINC's PHP leaves them check: password_hash's "$2y$" bcrypt of
// the client's md5 (made with crypt(3)'s bcrypt, the code PHP bundles, at
// PHP's cost 10, so it is kept at that cost and upgraded above it).
func TestCheckPHPBcrypt(t *testing.T) {
	t.Parallel()
	const (
		clientHash = "7c9ead3d5bceaf8d25a03811f160ba74" // md5("hunter2imported@example.org")
		phpHash    = "$2y$10$abcdefghijklmnopqrstuufnFzCh7dv6DQaTKdljuYmFwlDGNaeNS"
	)
	if got := ClientHash("hunter2", "Imported@Example.org"); got != clientHash {
		t.Fatalf("ClientHash = %s, want %s", got, clientHash)
	}
	for _, tt := range []struct {
		given      string
		cost       int
		ok, rehash bool
	}{
		{clientHash, 10, true, false},
		{strings.ToUpper(clientHash), 10, true, false},
		{clientHash, 12, true, true}, // PHP 8.4's default cost is 12
		{ClientHash("hunter3", "imported@example.org"), 10, false, false},
	} {
		if ok, rehash := Check(phpHash, tt.given, tt.cost); ok != tt.ok || rehash != tt.rehash {
			t.Errorf("Check(PHP's $2y$10$, %s, cost %d) = %t, %t; want %t, %t", tt.given, tt.cost, ok, rehash, tt.ok, tt.rehash)
		}
	}
}

// The account key typed as the password matches, hashed as the client
// hashes any password; nothing else does.
func TestCheckAccountKey(t *testing.T) {
	t.Parallel()
	const auth = "0123456789abcdef0123456789abcdef"
	for _, tt := range []struct {
		name, auth, email, given string
		want                     bool
	}{
		// md5(auth + "imported@example.org")
		{"the key", auth, "imported@example.org", "972b1a8fb484562e90fd72d49afb8e68", true},
		{"address stored in capitals", auth, "Imported@Example.org", "972b1a8fb484562e90fd72d49afb8e68", true},
		{"hash in capitals", auth, "imported@example.org", "972B1A8FB484562E90FD72D49AFB8E68", true},
		{"another address", auth, "other@example.org", "972b1a8fb484562e90fd72d49afb8e68", false},
		{"the key itself", auth, "imported@example.org", auth, false},
		{"no key", "", "imported@example.org", ClientHash("", "imported@example.org"), false},
	} {
		if got := CheckAccountKey(tt.auth, tt.email, tt.given); got != tt.want {
			t.Errorf("%s: CheckAccountKey = %t, want %t", tt.name, got, tt.want)
		}
	}
}
