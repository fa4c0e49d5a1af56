package scheduler

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/taskserver/taskserver/internal/passwd"
)

// A password is stored as BOINC stores it today: a bcrypt hash of the md5
// the client sends, never that md5 itself (which works as the password).
func TestStoredPasswordHashIsNotTheMD5(t *testing.T) {
	t.Parallel()
	f := setupAccounts(t, true)
	r := f.account(sampleURL(t, "21_create_account_GET.http"))
	if r.Authenticator == "" {
		t.Fatalf("create (sample 21) = %+v", r)
	}
	u, err := f.st.UserGetByEmail(f.ctx, sampleEmail)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ToLower(u.PasswdHash), sampleHash) || !strings.HasPrefix(u.PasswdHash, "$2") {
		t.Fatalf("stored passwd_hash %q, want a bcrypt hash, not the client's md5 %s", u.PasswdHash, sampleHash)
	}
	if err := bcrypt.CompareHashAndPassword([]byte(u.PasswdHash), []byte(sampleHash)); err != nil {
		t.Fatalf("stored passwd_hash is not bcrypt(md5): %v", err)
	}
	if l := f.account(sampleURL(t, "20_lookup_account_GET.http")); l.Authenticator != r.Authenticator {
		t.Fatalf("lookup (sample 20) after create = %+v, want authenticator %s", l, r.Authenticator)
	}
}

// An account whose row still holds the md5 (made before this version, or
// imported from an old BOINC database) logs in, and the row is upgraded to
// bcrypt on that login.
func TestLegacyMD5PasswordLogsInAndIsUpgraded(t *testing.T) {
	t.Parallel()
	f := setupAccounts(t, false)
	u := f.addUser(sampleEmail, sampleHash)
	wrong := "/lookup_account.php?email_addr=tester%40example.com&passwd_hash=" + passwd.ClientHash("wrong", sampleEmail)
	if r := f.account(wrong); r.ErrorNum != errBadPasswd {
		t.Fatalf("wrong password against a legacy row = %+v, want error %d", r, errBadPasswd)
	}
	if got, _ := f.st.UserGetByEmail(f.ctx, sampleEmail); got.PasswdHash != sampleHash {
		t.Fatalf("a failed login changed the legacy row to %q", got.PasswdHash)
	}
	for i := range 2 {
		if r := f.account(sampleURL(t, "20_lookup_account_GET.http")); r.Authenticator != u.Authenticator {
			t.Fatalf("login %d with a legacy md5 row = %+v, want authenticator %s", i, r, u.Authenticator)
		}
		got, err := f.st.UserGetByEmail(f.ctx, sampleEmail)
		if err != nil {
			t.Fatal(err)
		}
		if err := bcrypt.CompareHashAndPassword([]byte(got.PasswdHash), []byte(sampleHash)); err != nil {
			t.Fatalf("after login %d passwd_hash = %q, want it upgraded to bcrypt(md5): %v", i, got.PasswdHash, err)
		}
	}
	if r := f.account(wrong); r.ErrorNum != errBadPasswd {
		t.Fatalf("wrong password after the upgrade = %+v, want error %d", r, errBadPasswd)
	}
}

// lookup_account tells nobody whether an address has an account: without a
// password, with a wrong one, and for an unknown address, the answer is the
// same, byte for byte.
func TestLookupAccountRevealsNoAccount(t *testing.T) {
	t.Parallel()
	f := setupAccounts(t, false)
	f.addUser(sampleEmail, passwd.ClientHash(samplePassword, sampleEmail))
	f.addUser("nopassword@example.com", "")
	want := f.get("/lookup_account.php?email_addr=nobody%40example.com&passwd_hash=" + sampleHash)
	for _, u := range []string{
		"/lookup_account.php?email_addr=tester%40example.com",
		"/lookup_account.php?email_addr=nobody%40example.com",
		"/lookup_account.php?email_addr=tester%40example.com&passwd_hash=",
		"/lookup_account.php?email_addr=tester%40example.com&passwd_hash=" + passwd.ClientHash("wrong", sampleEmail),
		"/lookup_account.php?email_addr=nopassword%40example.com&passwd_hash=" + sampleHash,
		"/lookup_account.php",
	} {
		if got := f.get(u); got != want {
			t.Errorf("GET %s = %q; want the same answer as for an unknown address, %q", u, got, want)
		}
	}
	if !strings.Contains(want, "<error_num>-206</error_num>") {
		t.Errorf("answer %q, want ERR_BAD_PASSWD (-206), what BOINC answers a wrong password", want)
	}
}

// lookup_account takes as long for an unknown address as for a wrong
// password: one bcrypt comparison each, so its speed does not tell which
// addresses have accounts either.
func TestLookupAccountTakesAsLongWithoutAnAccount(t *testing.T) {
	t.Parallel()
	f := setupAccounts(t, false)
	// A cost at which the comparison outweighs the request around it.
	const cost = 8
	f.a.opts.PasswdCost = cost
	h, err := passwd.Hash(sampleHash, cost)
	if err != nil {
		t.Fatal(err)
	}
	f.addUser(sampleEmail, h)
	wrong := passwd.ClientHash("wrong", sampleEmail)
	fastest := func(email string) time.Duration {
		d := time.Duration(1 << 62)
		for range 3 { // fewer than lock an address out
			start := time.Now()
			f.get("/lookup_account.php?email_addr=" + url.QueryEscape(email) + "&passwd_hash=" + wrong)
			d = min(d, time.Since(start))
		}
		return d
	}
	account, none := fastest(sampleEmail), fastest("nobody@example.com")
	if none < account/4 {
		t.Errorf("lookup of an unknown address took %v, of a wrong password %v: want about the same", none, account)
	}
}
