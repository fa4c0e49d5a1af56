package submitapi_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/submitapi"
)

// The account key (what a volunteer's client holds, and what
// lookup_account hands out for a password) does not open the submission
// API: a submitter has a key of its own.
func TestAccountKeyIsNotAnAPIKey(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.do(t, "GET", "/api/v1/batches", b.aliceAccount, nil).want(t, "account key of a submitter", http.StatusUnauthorized)
	b.do(t, "GET", "/api/v1/batches", b.alice, nil).want(t, "API key of a submitter", http.StatusOK)
}

func TestNewKey(t *testing.T) {
	t.Parallel()
	k1, h1, err := submitapi.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	k2, _, err := submitapi.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(k1))
	if len(k1) != 64 || k1 == k2 || h1 != hex.EncodeToString(sum[:]) || h1 != submitapi.KeyHash(k1) || strings.Contains(h1, k1) {
		t.Fatalf("NewKey = %q (hash %q), then %q; want 64 random hex characters and their SHA-256", k1, h1, k2)
	}
}
