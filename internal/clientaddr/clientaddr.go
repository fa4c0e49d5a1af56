// Package clientaddr finds the address of the client behind a request:
// the TCP peer, or, when the peer is a trusted reverse proxy, the address
// that proxy recorded in X-Forwarded-For. X-Forwarded-For from anyone else
// is ignored: a client can write anything in it.
package clientaddr

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Proxies are the networks of trusted reverse proxies.
type Proxies []netip.Prefix

// ParseProxies reads a list of CIDR prefixes (10.0.0.0/8, ::1/128) or
// single addresses; each item may itself be a comma-separated list, as a
// flag's value or an environment variable gives it.
func ParseProxies(items []string) (Proxies, error) {
	var ps Proxies
	for _, item := range items {
		for _, s := range strings.Split(item, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			if p, err := netip.ParsePrefix(s); err == nil {
				ps = append(ps, p.Masked())
				continue
			}
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("%q: want an address prefix such as 10.0.0.0/8 or an address", s)
			}
			ps = append(ps, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		}
	}
	return ps, nil
}

// trusts reports whether a is a trusted proxy.
func (ps Proxies) trusts(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Client returns the client's address given the TCP peer and the request's
// X-Forwarded-For values. From a trusted peer it is the right-most address
// in X-Forwarded-For that is not a trusted proxy (each proxy appends the
// address it got the request from; what lies left of the first untrusted
// one was written by the client). If the list holds only trusted proxies,
// it is the left-most; if it is missing, or an entry cannot be read before
// an untrusted address is found, the last trusted hop stands for the client.
func (ps Proxies) Client(peer netip.Addr, forwardedFor []string) netip.Addr {
	peer = peer.Unmap()
	if len(ps) == 0 || !ps.trusts(peer) {
		return peer
	}
	client := peer
	for i := len(forwardedFor) - 1; i >= 0; i-- {
		hops := strings.Split(forwardedFor[i], ",")
		for j := len(hops) - 1; j >= 0; j-- {
			a, ok := parseHop(hops[j])
			if !ok {
				return client
			}
			client = a
			if !ps.trusts(a) {
				return a
			}
		}
	}
	return client
}

// parseHop reads one X-Forwarded-For entry: an address, possibly with a
// port ("192.0.2.1:4711", "[2001:db8::1]:4711").
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}

type contextKey struct{}

// Handler records the client's address of each request for From before
// calling next. With no proxies it only passes requests on.
func (ps Proxies) Handler(next http.Handler) http.Handler {
	if len(ps) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer, ok := peerAddr(r)
		if ok && ps.trusts(peer) {
			client := ps.Client(peer, r.Header.Values("X-Forwarded-For"))
			r = r.WithContext(context.WithValue(r.Context(), contextKey{}, client))
		}
		next.ServeHTTP(w, r)
	})
}

// From returns the client's address of r as text: the one Handler
// recorded, else the TCP peer's, else r.RemoteAddr as it is (a test
// transport, a Unix socket).
func From(r *http.Request) string {
	if a, ok := r.Context().Value(contextKey{}).(netip.Addr); ok {
		return a.String()
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func peerAddr(r *http.Request) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}
