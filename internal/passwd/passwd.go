// Package passwd stores and checks account passwords the way BOINC's web
// code does today. The client never sends a password, only ClientHash (the
// md5 of the password and the lowercased e-mail address), and that md5 is
// as good as the password: a database holding it hands every account to
// whoever reads it. So the user table's passwd_hash holds a slow hash
// (bcrypt, what PHP's password_hash makes) of the client's md5. Rows from
// before, which hold the md5 itself, still check and are upgraded on the
// next successful login, as BOINC's check_passwd_hash does.
package passwd

import (
	"crypto/md5"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/crypto/bcrypt"
)

// DefaultCost is bcrypt's work factor for new hashes unless the operator
// sets another: PHP's PASSWORD_DEFAULT, so a hash costs what it costs in a
// BOINC project. Hashes of any cost check.
const DefaultCost = bcrypt.DefaultCost

// CheckCost returns an error unless cost is a bcrypt work factor.
func CheckCost(cost int) error {
	if cost < bcrypt.MinCost || cost > bcrypt.MaxCost {
		return fmt.Errorf("bcrypt cost %d: want %d to %d", cost, bcrypt.MinCost, bcrypt.MaxCost)
	}
	return nil
}

// ClientHash is what the client sends for a password (PROTOCOL.md §10):
// the md5 hex of the password followed by the lowercased e-mail address.
// Changing an account's address therefore changes its password hash.
func ClientHash(password, email string) string {
	sum := md5.Sum([]byte(password + strings.ToLower(email)))
	return hex.EncodeToString(sum[:])
}

// normalize is the client hash as it is hashed and compared: clients send
// lowercase hex, but case and spaces carry no meaning.
func normalize(clientHash string) string { return strings.ToLower(strings.TrimSpace(clientHash)) }

// IsClientHash tells whether s has the form of a client hash (32 hex).
func IsClientHash(s string) bool {
	s = normalize(s)
	if len(s) != md5.Size*2 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// Hash returns what passwd_hash stores for a client hash: its bcrypt hash
// of work factor cost.
func Hash(clientHash string, cost int) (string, error) {
	h, err := bcrypt.GenerateFromPassword([]byte(normalize(clientHash)), cost)
	if err != nil {
		return "", fmt.Errorf("hash password: %w", err)
	}
	return string(h), nil
}

// Check tells whether clientHash is the password of the stored hash, and
// whether the stored hash should be replaced by Hash(clientHash, cost): it
// is the legacy md5 form, or bcrypt of a lower cost. Every call costs one
// bcrypt comparison, whatever stored is (empty for an account without a
// password, or for none at all), so the time taken does not tell a wrong
// password from a missing account; the legacy comparison is in constant
// time.
func Check(stored, clientHash string, cost int) (ok, rehash bool) {
	given := []byte(normalize(clientHash))
	if c, err := bcrypt.Cost([]byte(stored)); err == nil {
		if bcrypt.CompareHashAndPassword([]byte(stored), given) != nil {
			return false, false
		}
		return true, c < cost
	}
	// Not bcrypt: spend what a bcrypt comparison costs, then compare the
	// legacy md5 (an empty stored hash matches nothing).
	_ = bcrypt.CompareHashAndPassword(dummy(cost), given)
	legacy := normalize(stored)
	if !IsClientHash(legacy) {
		return false, false
	}
	ok = subtle.ConstantTimeCompare([]byte(legacy), given) == 1
	return ok, ok
}

// CheckAccountKey tells whether clientHash is what the client sends for
// the account key typed as the password: BOINC's lookup_account accepts
// the md5 of the account key and the e-mail address besides the password,
// so a volunteer who never set one, or forgot it, can attach by e-mail
// address with the key the project's web site shows. An account without a
// key matches nothing. The comparison is in constant time.
func CheckAccountKey(authenticator, email, clientHash string) bool {
	if authenticator == "" {
		return false
	}
	want := ClientHash(authenticator, strings.TrimSpace(email))
	return subtle.ConstantTimeCompare([]byte(want), []byte(normalize(clientHash))) == 1
}

// dummies holds, per cost, a bcrypt hash of a random secret nobody knows.
var dummies sync.Map // int -> []byte

// dummy returns the dummy hash of a cost, made on first use. An invalid
// cost gets the default's.
func dummy(cost int) []byte {
	if CheckCost(cost) != nil {
		cost = DefaultCost
	}
	if h, ok := dummies.Load(cost); ok {
		return h.([]byte)
	}
	h, err := bcrypt.GenerateFromPassword([]byte(rand.Text()), cost)
	if err != nil {
		panic(fmt.Sprintf("passwd: make the dummy hash: %v", err))
	}
	got, _ := dummies.LoadOrStore(cost, h)
	return got.([]byte)
}
