package scheduler

import (
	"fmt"
	"hash/maphash"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/daemon"
)

// AccountLimit bounds password guessing through lookup_account and
// create_account (whose answer for a taken address is a password check
// too). Every such request counts as a failure of its client address and
// of the e-mail address it names until it succeeds. After EmailFailures
// failures an e-mail address, and after AddrFailures a client address, is
// locked out for Lockout; each further failure after a lockout doubles it,
// up to MaxLockout. A locked-out request is refused at once, with no
// database work, even if its password is right. Failures are forgotten
// MaxLockout after the last one, and an e-mail address's at its next
// successful login. Independently, one client address may make AddrBurst
// requests back to back and then one every AddrEvery.
//
// A client address is an IPv4 address or an IPv6 /64, as for the
// scheduler's rate limit; an e-mail address is kept only as a keyed hash.
// EmailFailures or AddrFailures 0 turns that scope's lockout off, and
// AddrBurst 0 the rate limit.
type AccountLimit struct {
	EmailFailures int
	AddrFailures  int
	Lockout       time.Duration
	MaxLockout    time.Duration
	AddrBurst     int
	AddrEvery     time.Duration
	// Exempt client addresses (the scheduler's --rate-limit-exempt) are not
	// limited by address; the e-mail addresses they name still are.
	Exempt []netip.Prefix
	// MaxKeys bounds the client addresses and the e-mail addresses tracked.
	// Past it a request with a new key is refused (a guess must never go
	// untracked); keys whose failures are forgotten make room.
	MaxKeys int
}

// DefaultAccountLimit is the scheduler command's default: five wrong
// passwords for one account, twenty failures from one address (volunteers
// behind one NAT share it), then a minute's lockout doubling up to an hour
// (about 30 guesses a day after the first); 30 requests from one address
// back to back, then one every 20 s.
var DefaultAccountLimit = AccountLimit{
	EmailFailures: 5,
	AddrFailures:  20,
	Lockout:       time.Minute,
	MaxLockout:    time.Hour,
	AddrBurst:     30,
	AddrEvery:     20 * time.Second,
	MaxKeys:       1 << 18,
}

// Account limit scopes (label values of account_rpc_limited_total).
const (
	limitScopeAddress = "address"
	limitScopeEmail   = "email"
)

// accountLimiter is an AccountLimit's state and metric.
type accountLimiter struct {
	lim     AccountLimit
	mu      sync.Mutex
	addr    *failures[netip.Prefix]
	email   *failures[uint64]
	rate    *gcra[netip.Prefix]
	seed    maphash.Seed
	limited *prometheus.CounterVec
}

func newAccountLimiter(lim AccountLimit, reg prometheus.Registerer) (*accountLimiter, error) {
	if lim.EmailFailures < 0 || lim.AddrFailures < 0 || lim.AddrBurst < 0 || lim.MaxKeys < 0 {
		return nil, fmt.Errorf("account limit %+v: negative count", lim)
	}
	if (lim.EmailFailures > 0 || lim.AddrFailures > 0) && (lim.Lockout <= 0 || lim.MaxLockout < lim.Lockout) {
		return nil, fmt.Errorf("account limit %+v: want a positive lockout no longer than the longest", lim)
	}
	if lim.AddrBurst > 0 && lim.AddrEvery <= 0 {
		return nil, fmt.Errorf("account limit %+v: a rate limit needs a positive interval", lim)
	}
	if lim.MaxKeys == 0 {
		lim.MaxKeys = DefaultAccountLimit.MaxKeys
	}
	l := &accountLimiter{lim: lim, seed: maphash.MakeSeed(),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: "scheduler",
			Name: "account_rpc_limited_total",
			Help: "lookup_account and create_account requests refused without a database read because their client address or e-mail address was locked out after failed logins, over its request rate, or new while the tracked keys were at their bound, by scope (address, email)."},
			[]string{"scope"})}
	if lim.AddrFailures > 0 {
		l.addr = newFailures[netip.Prefix](lim)
	}
	if lim.EmailFailures > 0 {
		l.email = newFailures[uint64](lim)
	}
	if lim.AddrBurst > 0 {
		l.rate = newGCRA[netip.Prefix](lim.AddrBurst, lim.AddrEvery, lim.MaxKeys)
	}
	for _, s := range []string{limitScopeAddress, limitScopeEmail} {
		l.limited.WithLabelValues(s)
	}
	if err := reg.Register(l.limited); err != nil {
		return nil, fmt.Errorf("account limit metrics: %w", err)
	}
	return l, nil
}

// attempt is a request let through, counted as a failure until it
// succeeds.
type attempt struct {
	addr     netip.Prefix
	hasAddr  bool
	email    uint64
	hasEmail bool
}

// begin checks a request from ip naming email (normalized; "" names none)
// and counts it as a failure of both. A refused request gets how long to
// wait and the scope that refused it, and counts nothing.
func (l *accountLimiter) begin(ip, email string, now time.Time) (attempt, time.Duration, string) {
	var at attempt
	if k, limited := addressKey(ip, l.lim.Exempt); limited {
		at.addr, at.hasAddr = k, true
	}
	if email != "" {
		at.email, at.hasEmail = maphash.String(l.seed, email), true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if at.hasAddr && l.addr != nil {
		if wait := l.addr.check(at.addr, now); wait > 0 {
			return l.refuse(limitScopeAddress, wait)
		}
	}
	if at.hasEmail && l.email != nil {
		if wait := l.email.check(at.email, now); wait > 0 {
			return l.refuse(limitScopeEmail, wait)
		}
	}
	if at.hasAddr && l.rate != nil {
		if wait := l.rate.allow(at.addr, now); wait > 0 {
			return l.refuse(limitScopeAddress, wait)
		}
	}
	if at.hasAddr && l.addr != nil {
		l.addr.fail(at.addr, now, l.lim.AddrFailures)
	}
	if at.hasEmail && l.email != nil {
		l.email.fail(at.email, now, l.lim.EmailFailures)
	}
	return at, 0, ""
}

func (l *accountLimiter) refuse(scope string, wait time.Duration) (attempt, time.Duration, string) {
	l.limited.WithLabelValues(scope).Inc()
	return attempt{}, wait, scope
}

// succeeded takes back the failure begin counted: the e-mail address's
// failures are forgotten (only its password could log in), the client
// address's reduced by one (it may have guessed others).
func (l *accountLimiter) succeeded(at attempt) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if at.hasAddr && l.addr != nil {
		l.addr.undo(at.addr, l.lim.AddrFailures)
	}
	if at.hasEmail && l.email != nil {
		delete(l.email.m, at.email)
	}
}

// failures counts one scope's recent failures per key. Its caller holds
// the limiter's lock.
type failures[K comparable] struct {
	lockout, maxLockout time.Duration
	maxKeys             int
	m                   map[K]*failureCount
	sweepAt             int       // map size at which forgotten keys are next removed
	swept               time.Time // time of the last sweep
}

type failureCount struct {
	n     int
	last  time.Time // of the last failure
	until time.Time // locked out before this
}

func newFailures[K comparable](lim AccountLimit) *failures[K] {
	return &failures[K]{lockout: lim.Lockout, maxLockout: lim.MaxLockout, maxKeys: lim.MaxKeys,
		m: map[K]*failureCount{}, sweepAt: 1024}
}

// forgotten tells whether a key's failures are old enough to drop.
func (f *failures[K]) forgotten(c *failureCount, now time.Time) bool {
	return !now.Before(c.until) && now.Sub(c.last) > f.maxLockout
}

// check returns how long k is still locked out, 0 if it may try. A new key
// while the map is full is refused for a second (a sweep may make room).
func (f *failures[K]) check(k K, now time.Time) time.Duration {
	c, ok := f.m[k]
	if ok && f.forgotten(c, now) {
		delete(f.m, k)
		ok = false
	}
	if ok {
		return max(c.until.Sub(now), 0)
	}
	if len(f.m) >= min(f.sweepAt, f.maxKeys) {
		// Sweep when the map doubled, or at most once a second while it
		// is full: a sweep reads every key.
		if len(f.m) >= f.sweepAt || now.Sub(f.swept) >= time.Second {
			for key, c := range f.m {
				if f.forgotten(c, now) {
					delete(f.m, key)
				}
			}
			f.sweepAt = max(2*len(f.m), 1024)
			f.swept = now
		}
		if len(f.m) >= f.maxKeys {
			return time.Second
		}
	}
	return 0
}

// fail counts a failure of k (which check let through); the failure that
// reaches threshold locks k out for the lockout, each later one for twice
// the one before, up to the longest.
func (f *failures[K]) fail(k K, now time.Time, threshold int) {
	c := f.m[k]
	if c == nil {
		c = &failureCount{}
		f.m[k] = c
	}
	c.n++
	c.last = now
	if c.n >= threshold {
		lock := f.maxLockout
		if shift := c.n - threshold; shift < 32 {
			lock = min(f.lockout<<shift, f.maxLockout)
		}
		c.until = now.Add(lock)
	}
}

// undo takes back one failure of k; below the threshold it is no longer
// locked out.
func (f *failures[K]) undo(k K, threshold int) {
	c := f.m[k]
	if c == nil {
		return
	}
	c.n--
	if c.n < threshold {
		c.until = time.Time{}
	}
	if c.n <= 0 {
		delete(f.m, k)
	}
}

// size is the number of keys tracked.
func (f *failures[K]) size() int { return len(f.m) }
