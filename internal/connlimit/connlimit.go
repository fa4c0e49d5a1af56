// Package connlimit bounds the connections a server holds open: in all,
// below the process's file-descriptor limit, so that a flood of
// connections can never leave the server without a descriptor for its
// database, its files or its next volunteer (accept4: too many open
// files); and per client network (an IPv4 address, an IPv6 /64), so that
// one client cannot take the whole allowance. A connection past either
// bound is closed as soon as it is accepted.
//
// The listener sees only the TCP peer: behind a reverse proxy every
// volunteer is the proxy's address, so the proxy's network belongs in
// Limits.Exempt (its own limits then stand in for the per-address one).
package connlimit

import (
	"io"
	"net"
	"net/netip"
	"sync"
)

// Reasons a connection is refused (label reason of
// connections_refused_total).
const (
	reasonTotal   = "total"   // the server holds Limits.Max connections
	reasonAddress = "address" // the client's network holds Limits.PerAddr
)

// Limits are the bounds of one listener.
type Limits struct {
	// Max is the most connections open at once; at least 1.
	Max int
	// PerAddr is the most connections open at once from one IPv4 address
	// or IPv6 /64; 0 is no per-address bound.
	PerAddr int
	// Exempt networks have no per-address bound (they still count towards
	// Max): loopback, where local tools run, and reverse proxies, which
	// carry many volunteers on one address.
	Exempt []netip.Prefix
}

// Listener is a net.Listener that holds to Limits.
type Listener struct {
	net.Listener
	limits  Limits
	metrics *Metrics

	mu     sync.Mutex
	open   int
	byAddr map[netip.Prefix]int
}

// Listen wraps ln with the bounds l; m may be nil.
func Listen(ln net.Listener, l Limits, m *Metrics) *Listener {
	l.Max = max(l.Max, 1)
	m.setMax(l.Max)
	return &Listener{Listener: ln, limits: l, metrics: m, byAddr: map[netip.Prefix]int{}}
}

// Accept returns the next connection within the bounds, closing the ones
// past them.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key, counted := l.key(c.RemoteAddr())
		if reason := l.admit(key, counted); reason != "" {
			_ = c.Close()
			l.metrics.refuse(reason)
			continue
		}
		l.metrics.opened()
		return &conn{Conn: c, l: l, key: key, counted: counted}, nil
	}
}

// key is the network a peer is bounded as, and whether it is bounded.
func (l *Listener) key(a net.Addr) (netip.Prefix, bool) {
	if l.limits.PerAddr <= 0 {
		return netip.Prefix{}, false
	}
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Prefix{}, false
	}
	ip := tcp.AddrPort().Addr().Unmap()
	for _, p := range l.limits.Exempt {
		if p.Contains(ip) {
			return netip.Prefix{}, false
		}
	}
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p, true
}

// admit takes a place for a new connection, or says why there is none.
func (l *Listener) admit(key netip.Prefix, counted bool) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open >= l.limits.Max {
		return reasonTotal
	}
	if counted && l.byAddr[key] >= l.limits.PerAddr {
		return reasonAddress
	}
	l.open++
	if counted {
		l.byAddr[key]++
	}
	return ""
}

// release gives back a closed connection's place.
func (l *Listener) release(key netip.Prefix, counted bool) {
	l.mu.Lock()
	l.open--
	if counted {
		if l.byAddr[key] <= 1 {
			delete(l.byAddr, key)
		} else {
			l.byAddr[key]--
		}
	}
	l.mu.Unlock()
	l.metrics.closed()
}

// conn gives its place back once, on the first Close.
type conn struct {
	net.Conn
	l       *Listener
	key     netip.Prefix
	counted bool
	once    sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.key, c.counted) })
	return err
}

// ReadFrom passes the real connection's ReadFrom through, so that
// downloads still go out with sendfile.
func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(c.Conn, r)
}
