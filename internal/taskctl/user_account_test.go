package taskctl_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/passwd"
	"github.com/taskserver/taskserver/internal/scheduler"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// An account the operator makes has a cross-project id, as BOINC's do:
// the scheduler sends it, and the public external_cpid derives from it.
func TestUserCreateSetsCrossProjectID(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	ctx := context.Background()
	b.mustRun(t, "user", "create", "--email", "ann@example.org", "--name", "Ann")
	b.mustRun(t, "user", "create", "--email", "ben@example.org", "--name", "Ben")
	ann, err := b.st.UserGetByEmail(ctx, "ann@example.org")
	if err != nil {
		t.Fatal(err)
	}
	ben, err := b.st.UserGetByEmail(ctx, "ben@example.org")
	if err != nil {
		t.Fatal(err)
	}
	hex32 := regexp.MustCompile(`^[0-9a-f]{32}$`)
	if !hex32.MatchString(ann.CrossProjectID) || !hex32.MatchString(ben.CrossProjectID) || ann.CrossProjectID == ben.CrossProjectID ||
		ann.CrossProjectID == ann.Authenticator {
		t.Fatalf("cross_project_id %q and %q, want 32 random hex each, not the account key", ann.CrossProjectID, ben.CrossProjectID)
	}
}

// A submitter's API key is its own, printed once and stored only as its
// SHA-256; a new one revokes the old.
func TestUserAPIKey(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	ctx := context.Background()
	auth := strings.TrimSpace(b.mustRun(t, "user", "create", "--email", "sci@example.org", "--name", "Sci", "--submit-allowed"))
	key := strings.TrimSpace(b.mustRun(t, "user", "apikey", "--email", "sci@example.org"))
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(key) || key == auth {
		t.Fatalf("user apikey printed %q, want a new 64-hex key (not the account key %s)", key, auth)
	}
	var stored string
	if err := b.st.DB().GetContext(ctx, &stored, `SELECT api_key_hash FROM user WHERE email_addr = 'sci@example.org'`); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(key))
	if stored != hex.EncodeToString(sum[:]) {
		t.Fatalf("api_key_hash = %q, want the key's SHA-256", stored)
	}
	if u, err := b.st.UserGetByAPIKeyHash(ctx, stored); err != nil || u.Authenticator != auth {
		t.Fatalf("user by API key hash = %+v, %v", u, err)
	}
	again := strings.TrimSpace(b.mustRun(t, "user", "apikey", "--email", "sci@example.org"))
	if again == key {
		t.Fatal("a second user apikey printed the same key")
	}
	if _, err := b.st.UserGetByAPIKeyHash(ctx, stored); err == nil {
		t.Fatal("the old API key still works after a new one was made")
	}
	if _, _, err := b.run(t, "user", "apikey", "--email", "nobody@example.org"); err == nil {
		t.Fatal("user apikey for a missing account succeeded")
	}
}

// lookupAccount asks lookup_account.php of a scheduler's account RPCs on
// the test's database, as BOINC Manager does to attach with an e-mail
// address and a password.
func lookupAccount(t *testing.T, b *bundle, email, password string) (int, string) {
	t.Helper()
	a, err := scheduler.NewAccounts(scheduler.AccountOptions{Store: b.st, URLBase: "http://127.0.0.1:8080"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/lookup_account.php?email_addr=" + url.QueryEscape(email) +
		"&passwd_hash=" + passwd.ClientHash(password, email))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r struct {
		Authenticator string `xml:"authenticator"`
		ErrorNum      int    `xml:"error_num"`
	}
	if err := xml.Unmarshal(body, &r); err != nil {
		t.Fatalf("lookup reply %q: %v", body, err)
	}
	return r.ErrorNum, r.Authenticator
}

// The operator can give an account a password, with which the volunteer
// attaches by e-mail address and password (BOINC Manager's wizard).
func TestUserSetPasswordLetsLookupAccountSucceed(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	ctx := context.Background()
	auth := strings.TrimSpace(b.mustRun(t, "user", "create", "--email", "Vol@Example.org", "--name", "Vol"))
	b.mustRun(t, "user", "set", "--email", "Vol@Example.org", "--password", "correct horse")
	u, err := b.st.UserGetByEmail(ctx, "vol@example.org")
	if err != nil || u.Authenticator != auth {
		t.Fatalf("user vol@example.org = %+v, %v; want the account created", u, err)
	}
	if md5 := passwd.ClientHash("correct horse", "vol@example.org"); !strings.HasPrefix(u.PasswdHash, "$2") || strings.Contains(u.PasswdHash, md5) {
		t.Fatalf("stored passwd_hash %q, want bcrypt of the client's md5, not the md5", u.PasswdHash)
	}
	if num, got := lookupAccount(t, b, "vol@example.org", "correct horse"); num != 0 || got != auth {
		t.Fatalf("lookup_account with the password the operator set = error %d, key %q; want the account key", num, got)
	}
	if num, _ := lookupAccount(t, b, "vol@example.org", "wrong"); num == 0 {
		t.Fatal("lookup_account with a wrong password succeeded")
	}
	if _, _, err := b.run(t, "user", "set", "--email", "Vol@Example.org", "--password", "12345"); err == nil {
		t.Fatal("user set --password with a 5-character password succeeded, want the client's minimum of 6")
	}
}

// user create --password sets the password; a new one may come on standard
// input, out of sight of other local users, and with a new address it is
// hashed for the new one.
func TestUserSetPasswordFromStdin(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	auth := strings.TrimSpace(b.mustRun(t, "user", "create", "--email", "old@example.org", "--name", "Vol", "--password", "first one"))
	if num, got := lookupAccount(t, b, "old@example.org", "first one"); num != 0 || got != auth {
		t.Fatalf("lookup_account with the password user create set = error %d, key %q; want the account key", num, got)
	}
	b.stdin = "second one\n"
	b.mustRun(t, "user", "set", "--email", "old@example.org", "--new-email", "new@example.org", "--password-stdin")
	if num, got := lookupAccount(t, b, "new@example.org", "second one"); num != 0 || got != auth {
		t.Fatalf("lookup_account with the password read from stdin = error %d, key %q; want the account key", num, got)
	}
	b.stdin = ""
	if _, _, err := b.run(t, "user", "set", "--email", "new@example.org", "--password-stdin"); err == nil {
		t.Fatal("user set --password-stdin with nothing on stdin succeeded")
	}
	if _, _, err := b.run(t, "user", "set", "--email", "new@example.org", "--password", "abcdefg", "--password-stdin"); err == nil {
		t.Fatal("user set with --password and --password-stdin succeeded")
	}
}

// Rows that still hold the client's md5 (an imported BOINC database, or
// accounts made before version 3) can be upgraded all at once: bcrypt of
// the stored md5 is what a login would store, so no password is needed.
func TestUserRehashPasswords(t *testing.T) {
	b := setup(t, storetest.NewDatabase(t))
	ctx := context.Background()
	b.mustRun(t, "user", "create", "--email", "old@example.org", "--name", "Old")
	b.mustRun(t, "user", "create", "--email", "new@example.org", "--name", "New", "--password", "already bcrypt")
	b.mustRun(t, "user", "create", "--email", "none@example.org", "--name", "None")
	legacy := passwd.ClientHash("legacy pw", "old@example.org")
	if _, err := b.st.DB().ExecContext(ctx, `UPDATE user SET passwd_hash = ? WHERE email_addr = 'old@example.org'`, legacy); err != nil {
		t.Fatal(err)
	}
	before, _ := b.st.UserGetByEmail(ctx, "new@example.org")
	out := b.mustRun(t, "user", "rehash-passwords")
	if !strings.Contains(out, "1 ") {
		t.Errorf("user rehash-passwords printed %q, want the count of rows upgraded (1)", out)
	}
	old, _ := b.st.UserGetByEmail(ctx, "old@example.org")
	if ok, _ := passwd.Check(old.PasswdHash, legacy, passwd.DefaultCost); !ok || strings.Contains(old.PasswdHash, legacy) {
		t.Fatalf("legacy row after rehash-passwords = %q, want bcrypt of its md5", old.PasswdHash)
	}
	if after, _ := b.st.UserGetByEmail(ctx, "new@example.org"); after.PasswdHash != before.PasswdHash {
		t.Error("rehash-passwords changed a bcrypt row")
	}
	if none, _ := b.st.UserGetByEmail(ctx, "none@example.org"); none.PasswdHash != "" {
		t.Error("rehash-passwords gave a password to an account without one")
	}
	if num, _ := lookupAccount(t, b, "old@example.org", "legacy pw"); num != 0 {
		t.Fatalf("lookup_account after rehash-passwords = error %d, want logged in", num)
	}
}
