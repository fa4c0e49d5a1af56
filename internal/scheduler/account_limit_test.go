package scheduler

import (
	"context"
	"encoding/xml"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/crypto/bcrypt"

	"github.com/taskserver/taskserver/internal/passwd"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// lookupCounter counts the account lookups that reach the database.
type lookupCounter struct {
	AccountStore
	n atomic.Int64
}

func (c *lookupCounter) UserGetByEmail(ctx context.Context, email string) (row.User, error) {
	c.n.Add(1)
	return c.AccountStore.UserGetByEmail(ctx, email)
}

type limitFixture struct {
	t   *testing.T
	st  *store.Store
	db  *lookupCounter
	a   *Accounts
	reg *prometheus.Registry
	mu  sync.Mutex
	now time.Time
}

func setupLimit(t *testing.T, lim AccountLimit) *limitFixture {
	t.Helper()
	f := &limitFixture{t: t, st: storetest.New(t), reg: prometheus.NewRegistry(), now: time.Unix(t0, 0)}
	f.db = &lookupCounter{AccountStore: f.st}
	var err error
	f.a, err = NewAccounts(AccountOptions{Store: f.db, URLBase: "http://127.0.0.1:8080", AccountCreation: true,
		PasswdCost: bcrypt.MinCost, Limit: lim, Registerer: f.reg,
		Now: func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *limitFixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// lookup asks lookup_account from addr and returns the error number (0:
// logged in) and the account key.
func (f *limitFixture) lookup(addr, email, hash string) (int, string) {
	f.t.Helper()
	return f.call(addr, "/lookup_account.php?email_addr="+url.QueryEscape(email)+"&passwd_hash="+hash)
}

func (f *limitFixture) call(addr, pathQuery string) (int, string) {
	f.t.Helper()
	req := httptest.NewRequest(http.MethodGet, pathQuery, nil)
	req.RemoteAddr = net.JoinHostPort(addr, "40000")
	w := httptest.NewRecorder()
	f.a.ServeHTTP(w, req)
	var r accountReply
	if w.Code != http.StatusOK || xml.Unmarshal(w.Body.Bytes(), &r) != nil {
		f.t.Fatalf("GET %s = %d %q", pathQuery, w.Code, w.Body)
	}
	if r.ErrorNum == errProjectDown && r.ErrorMsg == "" {
		f.t.Fatalf("refusal %q without a message the Manager can show", w.Body)
	}
	return r.ErrorNum, r.Authenticator
}

func (f *limitFixture) addUser(email, password string) row.User {
	f.t.Helper()
	h, err := passwd.Hash(passwd.ClientHash(password, email), bcrypt.MinCost)
	if err != nil {
		f.t.Fatal(err)
	}
	return storetest.User(f.t, f.st, storetest.UserOptions{CreateTime: 1, EmailAddr: email, Name: "u",
		Authenticator: fmt.Sprintf("%032x", len(email)), PasswdHash: h})
}

// Password guessing against one account is limited whoever guesses: after
// five failures the account is locked out for a minute, then two, four...
// up to an hour, and while it is locked even the right password is refused
// without a database read.
func TestPasswordGuessingIsLimitedPerEmail(t *testing.T) {
	t.Parallel()
	f := setupLimit(t, DefaultAccountLimit)
	u := f.addUser(sampleEmail, samplePassword)
	right := passwd.ClientHash(samplePassword, sampleEmail)
	answered, refused := 0, 0
	for i := range 3000 {
		// Every guess from another address: only the e-mail scope holds.
		addr := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String()
		switch num, _ := f.lookup(addr, sampleEmail, passwd.ClientHash(fmt.Sprint("guess", i), sampleEmail)); num {
		case errBadPasswd:
			answered++
		case errProjectDown:
			refused++
		default:
			t.Fatalf("guess %d answered %d", i, num)
		}
	}
	if answered != 5 || refused != 2995 {
		t.Fatalf("3,000 guesses at once: %d answered, %d refused; want 5 and 2,995", answered, refused)
	}
	if n := f.db.n.Load(); n != 5 {
		t.Errorf("database lookups = %d, want 5 (a refusal reads nothing)", n)
	}
	if num, auth := f.lookup("192.0.2.1", sampleEmail, right); num != errProjectDown || auth != "" {
		t.Fatalf("right password while locked out = %d %q, want refused (%d)", num, auth, errProjectDown)
	}
	// The lockout doubles with each failure after it ends.
	for _, lock := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute} {
		f.advance(lock - time.Second)
		if num, _ := f.lookup("192.0.2.2", sampleEmail, right); num != errProjectDown {
			t.Fatalf("1s before a %v lockout ends: %d, want refused", lock, num)
		}
		f.advance(time.Second)
		if num, _ := f.lookup("192.0.2.3", sampleEmail, passwd.ClientHash("again", sampleEmail)); num != errBadPasswd {
			t.Fatalf("guess after a %v lockout = %d, want answered", lock, num)
		}
	}
	f.advance(8 * time.Minute)
	if num, auth := f.lookup("192.0.2.4", sampleEmail, right); num != 0 || auth != u.Authenticator {
		t.Fatalf("right password after the lockout = %d %q, want the account key", num, auth)
	}
	if got := testutil.ToFloat64(f.a.limit.limited.WithLabelValues(limitScopeEmail)); got != 2999 {
		t.Errorf("account_rpc_limited_total{scope=email} = %v, want 2999", got)
	}
}

// One address guessing many accounts' passwords (or probing addresses) is
// limited too, and so is one address's rate of account RPCs.
func TestPasswordGuessingIsLimitedPerAddress(t *testing.T) {
	t.Parallel()
	f := setupLimit(t, DefaultAccountLimit)
	f.addUser(sampleEmail, samplePassword)
	answered := 0
	for i := range 3000 {
		email := fmt.Sprintf("user%d@example.com", i)
		if num, _ := f.lookup("198.51.100.7", email, passwd.ClientHash("guess", email)); num == errBadPasswd {
			answered++
		}
	}
	if answered != DefaultAccountLimit.AddrFailures {
		t.Fatalf("3,000 guesses from one address: %d answered, want %d", answered, DefaultAccountLimit.AddrFailures)
	}
	if num, _ := f.lookup("198.51.100.7", sampleEmail, passwd.ClientHash(samplePassword, sampleEmail)); num != errProjectDown {
		t.Fatalf("right password from a locked-out address = %d, want refused", num)
	}
	// The same /64 of IPv6 is one address.
	for i := range DefaultAccountLimit.AddrFailures {
		f.lookup(fmt.Sprintf("2001:db8::%x", i+1), fmt.Sprintf("v6user%d@example.com", i), sampleHash)
	}
	if num, _ := f.lookup("2001:db8::ffff", sampleEmail, passwd.ClientHash(samplePassword, sampleEmail)); num != errProjectDown {
		t.Fatalf("right password from a locked-out /64 = %d, want refused", num)
	}
	// Another address is not affected.
	if num, _ := f.lookup("198.51.100.8", sampleEmail, passwd.ClientHash(samplePassword, sampleEmail)); num != 0 {
		t.Fatalf("right password from another address = %d, want logged in", num)
	}
	if got := testutil.ToFloat64(f.a.limit.limited.WithLabelValues(limitScopeAddress)); got < 2980 {
		t.Errorf("account_rpc_limited_total{scope=address} = %v, want at least 2,980", got)
	}

	// Successful RPCs (account creation) are limited by rate.
	created := 0
	for i := range 100 {
		q := fmt.Sprintf("/create_account.php?email_addr=new%d%%40example.com&user_name=n&passwd_hash=%s", i, sampleHash)
		if num, _ := f.call("203.0.113.9", q); num == 0 {
			created++
		}
	}
	if created != DefaultAccountLimit.AddrBurst {
		t.Fatalf("100 creations from one address: %d made, want the burst of %d", created, DefaultAccountLimit.AddrBurst)
	}
}

// The tracked addresses and e-mail addresses are bounded; past the bound a
// new key is refused rather than let through untracked, so a flood of
// distinct keys cannot buy unlimited guesses.
func TestAccountLimitMemoryIsBounded(t *testing.T) {
	t.Parallel()
	lim := DefaultAccountLimit
	lim.MaxKeys = 8
	f := setupLimit(t, lim)
	for i := range 100 {
		f.lookup(fmt.Sprintf("10.0.%d.1", i), fmt.Sprintf("u%d@example.com", i), sampleHash)
	}
	if n, m := f.a.limit.email.size(), f.a.limit.addr.size(); n > 8 || m > 8 {
		t.Fatalf("tracked e-mails %d, addresses %d; want at most 8 each", n, m)
	}
	if n := f.db.n.Load(); n != 8 {
		t.Fatalf("database lookups = %d, want 8 (keys past the bound refused)", n)
	}
	// Failures are forgotten once they are older than the longest lockout.
	f.advance(lim.MaxLockout + time.Second)
	if num, _ := f.lookup("10.1.0.1", "late@example.com", sampleHash); num != errBadPasswd {
		t.Fatalf("lookup after the old failures expired = %d, want answered", num)
	}
}

// Guesses sent all at once are counted before any is answered, so
// concurrency buys no extra guesses.
func TestConcurrentGuessesAreLimited(t *testing.T) {
	t.Parallel()
	f := setupLimit(t, DefaultAccountLimit)
	f.addUser(sampleEmail, samplePassword)
	var answered atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			addr := netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)}).String()
			if num, _ := f.lookup(addr, sampleEmail, passwd.ClientHash(fmt.Sprint("guess", i), sampleEmail)); num == errBadPasswd {
				answered.Add(1)
			}
		})
	}
	wg.Wait()
	if n := answered.Load(); n != int64(DefaultAccountLimit.EmailFailures) {
		t.Fatalf("200 concurrent guesses: %d answered, want %d", n, DefaultAccountLimit.EmailFailures)
	}
	if got := testutil.ToFloat64(f.a.rpcs.WithLabelValues(rpcLookupAccount, outcomeLimited)); got != 195 {
		t.Errorf("account_rpcs_total{lookup_account,limited} = %v, want 195", got)
	}
}

func TestAccountLimitOptions(t *testing.T) {
	t.Parallel()
	for _, lim := range []AccountLimit{{EmailFailures: -1}, {EmailFailures: 5}, {AddrFailures: 5, Lockout: time.Hour, MaxLockout: time.Minute},
		{AddrBurst: 3}, {MaxKeys: -1}} {
		if _, err := newAccountLimiter(lim, prometheus.NewRegistry()); err == nil {
			t.Errorf("newAccountLimiter(%+v) = nil error, want one", lim)
		}
	}
}
