package scheduler

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

// rowSnapshot is what a hostile request must leave as it was: the result, its
// job, and the credit of the user and hosts involved.
type rowSnapshot struct {
	result row.Result
	wu     row.Workunit
	users  []row.User
	hosts  []row.Host
}

func (f *fixture) rows(resultID int64, userIDs, hostIDs []int64) rowSnapshot {
	f.t.Helper()
	r := f.result(resultID)
	s := rowSnapshot{result: r, wu: f.workunit(r.WorkunitID)}
	for _, id := range userIDs {
		u, err := f.st.UserGet(f.ctx, id)
		if err != nil {
			f.t.Fatal(err)
		}
		s.users = append(s.users, u)
	}
	for _, id := range hostIDs {
		h, err := f.st.HostGet(f.ctx, id)
		if err != nil {
			f.t.Fatal(err)
		}
		s.hosts = append(s.hosts, h)
	}
	return s
}

func (f *fixture) unchanged(what string, before rowSnapshot, resultID int64, userIDs, hostIDs []int64) {
	f.t.Helper()
	after := f.rows(resultID, userIDs, hostIDs)
	if after.result != before.result {
		f.t.Errorf("%s changed the result:\n got %+v\nwant %+v", what, after.result, before.result)
	}
	if after.wu != before.wu {
		f.t.Errorf("%s changed the job:\n got %+v\nwant %+v", what, after.wu, before.wu)
	}
	for i := range before.users {
		if a, b := after.users[i], before.users[i]; a.TotalCredit != b.TotalCredit || a.ExpavgCredit != b.ExpavgCredit {
			f.t.Errorf("%s changed user %d's credit: %v/%v, was %v/%v", what, b.ID, a.TotalCredit, a.ExpavgCredit, b.TotalCredit, b.ExpavgCredit)
		}
	}
	for i := range before.hosts {
		if a, b := after.hosts[i], before.hosts[i]; a.TotalCredit != b.TotalCredit || a.ExpavgCredit != b.ExpavgCredit {
			f.t.Errorf("%s changed host %d's credit: %v/%v, was %v/%v", what, b.ID, a.TotalCredit, a.ExpavgCredit, b.TotalCredit, b.ExpavgCredit)
		}
	}
	if after.result.GrantedCredit != 0 {
		f.t.Errorf("%s: result granted %v credit, want none before validation", what, after.result.GrantedCredit)
	}
}

// TestHostileReports runs, through the HTTP handler against MariaDB, every
// way a host may report a result it should not: without or with a wrong
// account key, from another user's host, from another host of the same
// user, and the same result twice. Each is answered (acked where the
// client must stop reporting it) and leaves the rows and credit as they
// were.
func TestHostileReports(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, ids := f.addJob("wuh", job{})
	hostA := f.sendTo(1)
	id := ids[0]
	bob := f.newUser("bob")
	hostB := f.rpc(request{auth: bob.Authenticator}).HostID
	users, hosts := []int64{f.user.ID, bob.ID}, []int64{hostA, hostB}
	f.now.Add(60)

	before := f.rows(id, users, hosts)
	for _, tc := range []struct {
		what string
		req  request
		ack  bool
	}{
		{"missing account key", request{auth: " ", hostID: hostA}, false},
		{"wrong account key", request{auth: wrongKey(bob.Authenticator), hostID: hostA}, false},
		{"another user's key with the host's id", request{auth: bob.Authenticator, hostID: hostA}, true},
		{"another user's host", request{auth: bob.Authenticator, hostID: hostB}, true},
	} {
		tc.req.results = []string{successReport("wuh_0")}
		if tc.req.auth == "" {
			tc.req.auth = f.user.Authenticator
		}
		rep := f.rpc(tc.req)
		if acked(rep, "wuh_0") != tc.ack {
			t.Errorf("%s: acked %v, want %v", tc.what, acked(rep, "wuh_0"), tc.ack)
		}
		if !tc.ack && !strings.Contains(messages(rep), "Invalid or missing account key") {
			t.Errorf("%s: messages %q, want the invalid-key notice", tc.what, messages(rep))
		}
		f.unchanged(tc.what, before, id, users, hosts)
	}

	// The host it was sent to reports it: recorded, no credit yet (the
	// validator grants it).
	rep := f.rpc(request{hostID: hostA, results: []string{successReport("wuh_0")}})
	if r := f.result(id); !acked(rep, "wuh_0") || r.ServerState != state.ServerOver || r.Outcome != state.OutcomeSuccess {
		t.Fatalf("report by the right host: acked %v, result %+v", acked(rep, "wuh_0"), r)
	}
	before = f.rows(id, users, hosts)
	// Twice more, the second time claiming an error: acked, nothing changes.
	f.now.Add(60)
	for _, report := range []string{successReport("wuh_0"), errorReport("wuh_0")} {
		rep = f.rpc(request{hostID: hostA, results: []string{report}})
		if !acked(rep, "wuh_0") {
			t.Fatal("repeated report not acked: the client would report it forever")
		}
		f.unchanged("repeated report", before, id, users, hosts)
	}
}

// countingStore counts the account lookups every handled request starts
// with: a request turned away by a rate limit must make none.
type countingStore struct {
	*store.Store
	lookups atomic.Int64
}

func (s *countingStore) UserHostGet(ctx context.Context, auth string, hostID int64) (store.UserHostHeld, error) {
	s.lookups.Add(1)
	return s.Store.UserHostGet(ctx, auth, hostID)
}

func (s *countingStore) UserHostHeldGet(ctx context.Context, auth string, hostID int64, limit int) (store.UserHostHeld, error) {
	s.lookups.Add(1)
	return s.Store.UserHostHeldGet(ctx, auth, hostID, limit)
}

func withCounting(cs *countingStore) func(*Options) {
	return func(o *Options) {
		cs.Store = o.Store.(*store.Store)
		o.Store = cs
	}
}

// TestRateLimitPerHost: past its burst a host gets only a request_delay,
// its reports are not acked (it reports them again) and the database is
// not read; other hosts, and requests that only claim its id, are not
// held back; after the delay it is served again.
func TestRateLimitPerHost(t *testing.T) {
	t.Parallel()
	cs := &countingStore{}
	f := setup(t, withCounting(cs), func(o *Options) {
		o.RateLimit = RateLimit{HostBurst: 3, HostEvery: time.Minute}
	})
	_, ids := f.addJob("wur", job{})
	host := f.sendTo(1) // the new-host request is limited as host 0 of the account
	for i := range 3 {
		if rep := f.rpc(request{hostID: host}); rep.RequestDelay != 7 {
			t.Fatalf("request %d within the burst: request_delay %v, want the usual 7", i+1, rep.RequestDelay)
		}
	}
	rowBefore, hostBefore := f.result(ids[0]), f.hostRow(host)
	lookups := cs.lookups.Load()
	rep := f.rpc(request{hostID: host, seqno: 99, results: []string{successReport("wur_0")}})
	if rep.RequestDelay != 60 || len(rep.ResultAcks) != 0 || len(rep.Results) != 0 || rep.HostID != 0 ||
		!strings.Contains(messages(rep), "Too many scheduler requests") {
		t.Fatalf("request over the host's limit: %+v (%q), want only request_delay 60 and a message", rep, messages(rep))
	}
	if rep.Overloaded == nil {
		t.Errorf("request over the host's limit: no <overloaded/>, so a client cannot tell it from no work")
	}
	if n := cs.lookups.Load() - lookups; n != 0 {
		t.Errorf("rate-limited request made %d database lookups, want 0", n)
	}
	if r, h := f.result(ids[0]), f.hostRow(host); r != rowBefore || h != hostBefore {
		t.Errorf("rate-limited request changed rows:\n result %+v\n was    %+v\n host %+v\n was  %+v", r, rowBefore, h, hostBefore)
	}
	// Someone else claiming the host's id is not limited as that host, and
	// cannot use up its allowance.
	if rep := f.rpc(request{auth: "not-the-key", hostID: host}); !strings.Contains(messages(rep), "Invalid or missing account key") {
		t.Errorf("request with the host's id and a wrong key: %q, want the invalid-key notice", messages(rep))
	}
	bob := f.newUser("bob")
	if rep := f.rpc(request{auth: bob.Authenticator}); rep.HostID == 0 {
		t.Errorf("another account's host was held back: %+v", rep)
	}
	f.now.Add(60)
	rep = f.rpc(request{hostID: host, results: []string{successReport("wur_0")}})
	if !acked(rep, "wur_0") || f.result(ids[0]).ServerState != state.ServerOver {
		t.Fatalf("after the delay: acks %+v, result %+v; want the report recorded", rep.ResultAcks, f.result(ids[0]))
	}
	if got := testutil.ToFloat64(f.svc.limit.limited.WithLabelValues(scopeHost)); got != 1 {
		t.Errorf("rate_limited_total{scope=host} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(f.svc.m.requests.WithLabelValues(outcomeRateLimited)); got != 1 {
		t.Errorf("requests_total{outcome=rate_limited} = %v, want 1", got)
	}
}

func (f *fixture) hostRow(id int64) row.Host {
	f.t.Helper()
	h, err := f.st.HostGet(f.ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return h
}

// TestRateLimitPerAddress: a flood from one address is answered with a
// request_delay before its body is even parsed; exempt addresses are not
// limited.
func TestRateLimitPerAddress(t *testing.T) {
	t.Parallel()
	cs := &countingStore{}
	f := setup(t, withCounting(cs), func(o *Options) {
		o.RateLimit = RateLimit{AddrBurst: 2, AddrEvery: 10 * time.Minute}
	})
	for i := range 2 {
		if rep := f.rpc(request{}); rep.HostID == 0 {
			t.Fatalf("request %d within the burst: %+v", i+1, rep)
		}
	}
	lookups := cs.lookups.Load()
	for _, body := range []string{request{auth: f.user.Authenticator}.body(), "not even XML"} {
		code, out := f.post(body)
		rep, err := protocol.ParseSchedulerReply(strings.NewReader(out))
		if code != http.StatusOK || err != nil || rep.RequestDelay != 600 || rep.HostID != 0 {
			t.Fatalf("request over the address limit = %d %q (%v), want 200 with request_delay 600", code, out, err)
		}
	}
	if n := cs.lookups.Load() - lookups; n != 0 {
		t.Errorf("rate-limited requests made %d database lookups, want 0", n)
	}
	if got := testutil.ToFloat64(f.svc.limit.limited.WithLabelValues(scopeAddress)); got != 2 {
		t.Errorf("rate_limited_total{scope=address} = %v, want 2", got)
	}

	exempt := setup(t, func(o *Options) {
		o.RateLimit = RateLimit{HostBurst: 1, HostEvery: time.Hour, AddrBurst: 1, AddrEvery: time.Hour,
			Exempt: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
	})
	host := exempt.rpc(request{}).HostID
	for range 5 {
		if rep := exempt.rpc(request{hostID: host}); rep.RequestDelay != 7 {
			t.Fatalf("request from an exempt address: request_delay %v, want the usual 7", rep.RequestDelay)
		}
	}
}

func TestRateLimitOptions(t *testing.T) {
	t.Parallel()
	for _, rl := range []RateLimit{{HostBurst: -1}, {HostBurst: 1}, {AddrBurst: 2, AddrEvery: -time.Second}, {MaxKeys: -1}} {
		if _, err := newRateLimiter(rl, nil); err == nil {
			t.Errorf("newRateLimiter(%+v) = nil error, want one", rl)
		}
	}
	if l, err := newRateLimiter(RateLimit{}, nil); l != nil || err != nil {
		t.Errorf("newRateLimiter(zero) = %v, %v; want nil, nil (no limits)", l, err)
	}
}

// TestGCRAForgetsAndFailsOpen: keys whose allowance is whole again are
// dropped, so memory follows the recent request rate; once MaxKeys keys are
// live, new keys pass rather than being refused.
func TestGCRAForgetsAndFailsOpen(t *testing.T) {
	t.Parallel()
	g := newGCRA[int](2, time.Second, 1500)
	now := time.Unix(1000, 0)
	for k := range 1200 {
		if w := g.allow(k, now); w != 0 {
			t.Fatalf("first request of key %d refused (%v)", k, w)
		}
	}
	if g.allow(0, now) != 0 || g.allow(0, now) != time.Second {
		t.Fatal("key 0: want a second request allowed (burst 2) and a third told to wait 1s")
	}
	later := now.Add(10 * time.Second)
	for k := range 900 { // the map doubles: expired keys go
		g.allow(5000+k, later)
	}
	if n := g.size(); n > 900 {
		t.Fatalf("after the first keys' allowances refilled: %d keys tracked, want at most the 900 new ones", n)
	}
	for k := range 3000 {
		if w := g.allow(10000+k, later); w != 0 {
			t.Fatalf("new key %d refused at the key limit (%v), want it let through", k, w)
		}
	}
	if n := g.size(); n > 1500 {
		t.Fatalf("%d keys tracked, limit 1500", n)
	}
	// Once the tracked keys expire, a full map is swept and new keys are
	// limited again.
	muchLater := later.Add(time.Minute)
	if g.allow(-1, muchLater) != 0 || g.allow(-1, muchLater) != 0 || g.allow(-1, muchLater) == 0 {
		t.Fatal("after the full map expired: want a new key tracked and limited after its burst")
	}
	if n := g.size(); n > 1500 {
		t.Fatalf("%d keys tracked, limit 1500", n)
	}
}

// syncBuffer is a log destination safe for concurrent handlers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAuthenticatorNeverLogged runs requests with a valid, a wrong and a
// rate-limited account key, and one whose lookup fails, with the logger at
// debug level, and checks that no key appears in what was logged.
func TestAuthenticatorNeverLogged(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	fs := &failingStore{}
	f := setup(t, func(o *Options) {
		fs.Store = o.Store.(*store.Store)
		o.Store = fs
		o.Log = log
		o.RateLimit = RateLimit{HostBurst: 2, HostEvery: time.Hour}
	})
	f.addJob("wul", job{})
	host := f.sendTo(1)
	wrong := "deadbeefcafef00d" + f.user.Authenticator[16:]
	f.rpc(request{hostID: host, results: []string{successReport("wul_0")}})
	f.rpc(request{auth: wrong, hostID: host})
	f.rpc(request{hostID: host}) // over the host's burst
	fs.failAuth = true
	if code, _ := f.post(request{auth: f.user.Authenticator, hostID: host + 1}.body()); code != http.StatusServiceUnavailable {
		t.Fatalf("request with the database failing = %d, want 503", code)
	}
	out := logs.String()
	if !strings.Contains(out, "scheduler request") || !strings.Contains(out, "scheduler request failed") {
		t.Fatalf("logs lack the debug and error lines this test relies on:\n%s", out)
	}
	for _, key := range []string{f.user.Authenticator, wrong} {
		if strings.Contains(out, key) {
			t.Errorf("account key %q appears in the logs:\n%s", key, out)
		}
	}
}

// TestAuthenticatorComparedInConstantTime scans the Go sources for an
// account key compared with == or != (or bytes.Equal, strings.EqualFold),
// which leaks through timing how much of a guess is right. The database
// lookup by key is an indexed equality the server cannot make constant
// time; what decides access is the comparison in Go after the fetch,
// which uses crypto/subtle.
func TestAuthenticatorComparedInConstantTime(t *testing.T) {
	t.Parallel()
	bad := regexp.MustCompile(`(?i)(auth\w*\s*[!=]=|[!=]=\s*[\w.]*auth\w*\b|bytes\.Equal\([^)]*auth|strings\.EqualFold\([^)]*auth)`)
	allowed := regexp.MustCompile(`(?i)(auth\w*\s*[!=]=\s*("|nil\b|0\b)|[!=]=\s*""|badAuth|AuthorName|authorit|authenticate\(|Unauthorized)`)
	var files int
	for _, dir := range []string{"../../internal", "../../cmd"} {
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			files++
			src, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for i, line := range strings.Split(string(src), "\n") {
				code, _, _ := strings.Cut(line, "//")
				if bad.MatchString(code) && !allowed.MatchString(code) {
					t.Errorf("%s:%d compares an account key without crypto/subtle: %s", p, i+1, strings.TrimSpace(line))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files < 50 {
		t.Fatalf("scanned %d files; the source tree was not found", files)
	}
}

// wrongKey is key with its last character changed: never key itself.
func wrongKey(key string) string {
	last := "0"
	if strings.HasSuffix(key, last) {
		last = "1"
	}
	return key[:len(key)-1] + last
}
