package scheduler

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/protocol"
)

// RateLimit bounds how often one host and one network address may call the
// scheduler. A request over either bound is answered at once with a reply
// that holds only a <request_delay> (the client waits that long before its
// next RPC, and reports again what it reported) and does no database work.
//
// A host is its host id together with its account key, so that nobody can
// exhaust another host's allowance by sending requests with its id; an
// address is the peer's IPv4 address or IPv6 /64 (one subscriber's
// network). A scope with Burst 0 is not limited.
type RateLimit struct {
	// HostBurst requests of one host may come back to back; after that one
	// more is allowed every HostEvery. The real client waits request_delay
	// between RPCs, so a host that follows it never comes near.
	HostBurst int
	HostEvery time.Duration
	// AddrBurst and AddrEvery bound one address the same way; they must
	// leave room for the many volunteers behind one NAT.
	AddrBurst int
	AddrEvery time.Duration
	// Exempt addresses are never limited: by default (the command's flag)
	// loopback, where local tools and benchmarks run and where a reverse
	// proxy on the same machine would make every volunteer one address.
	Exempt []netip.Prefix
	// MaxKeys bounds the hosts or addresses tracked per scope; past it, new
	// ones are let through rather than refused (a flood of distinct keys
	// must not lock out everyone). Default 1<<18.
	MaxKeys int
}

// problems returns what is wrong with rl, each naming its flag: a limited
// scope needs a positive interval.
func (rl RateLimit) problems() []error {
	var errs []error
	for _, f := range []struct {
		flag  string
		burst int
		every time.Duration
	}{{"host", rl.HostBurst, rl.HostEvery}, {"addr", rl.AddrBurst, rl.AddrEvery}} {
		if f.burst < 0 {
			errs = append(errs, fmt.Errorf("--rate-limit-%s-burst %d: want 0 (off) or more", f.flag, f.burst))
		}
		if f.burst > 0 && f.every <= 0 {
			errs = append(errs, fmt.Errorf("--rate-limit-%s-every %s: want a positive duration", f.flag, f.every))
		}
	}
	if rl.MaxKeys < 0 {
		errs = append(errs, fmt.Errorf("rate limit keys %d: want 0 (the default) or more", rl.MaxKeys))
	}
	return errs
}

// Default rate limits of the scheduler command: a host may make 10 RPCs in
// a row and then one a second (the real client waits request_delay, 5 s by
// default, between them); an address 100 in a row and then 20 a second.
const (
	DefaultHostBurst = 10
	DefaultHostEvery = time.Second
	DefaultAddrBurst = 100
	DefaultAddrEvery = 50 * time.Millisecond
)

// Rate limit scopes (label values of rate_limited_total) and the requests
// outcome of a refused request.
const (
	scopeHost          = "host"
	scopeAddress       = "address"
	outcomeRateLimited = "rate_limited"
)

// rateLimiter holds the two scopes' state and their metric.
type rateLimiter struct {
	host    *gcra[uint64]
	addr    *gcra[netip.Prefix]
	exempt  []netip.Prefix
	seed    maphash.Seed
	limited *prometheus.CounterVec
}

// newRateLimiter returns nil when both scopes are off.
func newRateLimiter(rl RateLimit, reg prometheus.Registerer) (*rateLimiter, error) {
	if err := errors.Join(rl.problems()...); err != nil {
		return nil, err
	}
	if rl.HostBurst == 0 && rl.AddrBurst == 0 {
		return nil, nil
	}
	if rl.MaxKeys == 0 {
		rl.MaxKeys = 1 << 18
	}
	l := &rateLimiter{exempt: rl.Exempt, seed: maphash.MakeSeed(),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: "scheduler",
			Name: "rate_limited_total", Help: "Scheduler RPCs answered with only a request_delay because their host or address was over its rate limit, by scope (host, address)."},
			[]string{"scope"})}
	if rl.HostBurst > 0 {
		l.host = newGCRA[uint64](rl.HostBurst, rl.HostEvery, rl.MaxKeys)
	}
	if rl.AddrBurst > 0 {
		l.addr = newGCRA[netip.Prefix](rl.AddrBurst, rl.AddrEvery, rl.MaxKeys)
	}
	for _, s := range []string{scopeHost, scopeAddress} {
		l.limited.WithLabelValues(s)
	}
	if err := reg.Register(l.limited); err != nil {
		return nil, fmt.Errorf("rate limit metrics: %w", err)
	}
	return l, nil
}

// addrKey is what an address is limited as, and whether it is limited.
func (l *rateLimiter) addrKey(ip string) (netip.Prefix, bool) { return addressKey(ip, l.exempt) }

// addressKey is what a client address is limited as, an IPv4 address or an
// IPv6 /64 (one subscriber's network), and whether it is limited at all:
// not if it is in an exempt prefix.
func addressKey(ip string, exempt []netip.Prefix) (netip.Prefix, bool) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		// Not an IP (a test transport, a Unix socket): one shared key.
		return netip.Prefix{}, true
	}
	a = a.Unmap()
	for _, p := range exempt {
		if p.Contains(a) {
			return netip.Prefix{}, false
		}
	}
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p, true
}

// allowAddr checks the address scope: the wait before the next request is
// allowed, 0 if this one is.
func (l *rateLimiter) allowAddr(ip string, now time.Time) time.Duration {
	if l == nil || l.addr == nil {
		return 0
	}
	k, limited := l.addrKey(ip)
	if !limited {
		return 0
	}
	wait := l.addr.allow(k, now)
	if wait > 0 {
		l.limited.WithLabelValues(scopeAddress).Inc()
	}
	return wait
}

// allowHost checks the host scope. The key is a keyed hash, so the
// limiter's memory never holds an account key.
func (l *rateLimiter) allowHost(ip string, hostID int64, auth string, now time.Time) time.Duration {
	if l == nil || l.host == nil {
		return 0
	}
	if _, limited := l.addrKey(ip); !limited {
		return 0
	}
	var h maphash.Hash
	h.SetSeed(l.seed)
	var id [8]byte
	binary.LittleEndian.PutUint64(id[:], uint64(hostID))
	_, _ = h.Write(id[:])
	_, _ = h.WriteString(auth)
	wait := l.host.allow(h.Sum64(), now)
	if wait > 0 {
		l.limited.WithLabelValues(scopeHost).Inc()
	}
	return wait
}

// gcra is the generic cell rate algorithm: per key, the time at which the
// key's allowance is fully used up ("theoretical arrival time"). A request
// is allowed while that time is at most (burst-1) intervals ahead of now;
// a key whose time has passed holds its full burst and is forgotten.
type gcra[K comparable] struct {
	mu        sync.Mutex
	every     time.Duration
	tolerance time.Duration // (burst-1) * every
	maxKeys   int
	tat       map[K]time.Time
	sweepAt   int       // map size at which expired keys are next removed
	swept     time.Time // time of the last sweep
}

func newGCRA[K comparable](burst int, every time.Duration, maxKeys int) *gcra[K] {
	return &gcra[K]{every: every, tolerance: time.Duration(burst-1) * every, maxKeys: maxKeys,
		tat: map[K]time.Time{}, sweepAt: 1024}
}

// allow records a request of k at now and returns 0, or returns how long
// until k may make one and records nothing.
func (g *gcra[K]) allow(k K, now time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	tat, ok := g.tat[k]
	if !ok || tat.Before(now) {
		tat = now
	}
	if ahead := tat.Sub(now); ahead > g.tolerance {
		return ahead - g.tolerance
	}
	if !ok && len(g.tat) >= min(g.sweepAt, g.maxKeys) {
		// Sweep when the map doubled, or when it is full and its oldest
		// entries may have expired (each lasts at most burst intervals).
		if len(g.tat) >= g.sweepAt || now.Sub(g.swept) > g.tolerance+g.every {
			for key, t := range g.tat {
				if !t.After(now) {
					delete(g.tat, key)
				}
			}
			g.sweepAt = max(2*len(g.tat), 1024)
			g.swept = now
		}
		if len(g.tat) >= g.maxKeys {
			return 0
		}
	}
	g.tat[k] = tat.Add(g.every)
	return 0
}

// size is the number of keys tracked.
func (g *gcra[K]) size() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.tat)
}

// writeRateLimited answers a request over its limit: a scheduler reply
// with only a request_delay of at least the usual one, and a message the
// client logs. Nothing the request reported is acked, so the client
// reports it again after the delay.
func (s *Service) writeRateLimited(w http.ResponseWriter, wait time.Duration) {
	delay := math.Ceil(max(wait, s.opts.RequestDelay).Seconds())
	reply := &protocol.SchedulerReply{ProjectName: s.opts.ProjectName, RequestDelay: delay,
		Overloaded: &protocol.Empty{},
		Messages: []protocol.Message{{Priority: "low",
			Text: fmt.Sprintf("Too many scheduler requests; next one in %.0f seconds", delay)}}}
	var buf bytes.Buffer
	if err := protocol.WriteSchedulerReply(&buf, reply); err != nil {
		http.Error(w, "too many requests", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/xml; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}
