// Package dbproxy is a TCP proxy in front of a database server that takes
// the database away from the programs using it, without touching the
// server: Cut resets every connection and refuses new ones, the way a
// network partition or a failover does; Stall stops the bytes in both
// directions while every connection stays open, the way a hung server or a
// black-holed route does; Restore gives the database back. The chaos load
// run and the daemons' health tests put it between the programs and
// MariaDB.
package dbproxy

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections from a loopback port to the database
// server.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup // the accept loop and every copy goroutine

	mu       sync.Mutex
	flowing  *sync.Cond            // signalled when a stall ends or the proxy closes
	conns    map[net.Conn]struct{} // both sides of every forwarded connection
	refusing bool
	stalled  bool
	closed   bool
	// refused counts connections closed at once while cut.
	refused int
}

// dialTimeout bounds the proxy's own connection to the database server.
const dialTimeout = 5 * time.Second

// copyBuffer is the most one copy goroutine reads before it writes: what a
// stall holds back per direction of a connection.
const copyBuffer = 32 << 10

// Start listens on a free loopback port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("database proxy: listen: %w", err)
	}
	x := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	x.flowing = sync.NewCond(&x.mu)
	x.wg.Add(1)
	go x.accept()
	return x, nil
}

// Addr is the proxy's host:port, to put in the programs' DSN.
func (x *Proxy) Addr() string { return x.ln.Addr().String() }

func (x *Proxy) accept() {
	defer x.wg.Done()
	for {
		c, err := x.ln.Accept()
		if err != nil {
			return // closed
		}
		x.mu.Lock()
		refusing, closed := x.refusing, x.closed
		if refusing {
			x.refused++
		}
		x.mu.Unlock()
		if refusing || closed {
			reset(c)
			continue
		}
		x.wg.Add(1)
		go x.forward(c)
	}
}

// forward connects c to the database server and copies both ways until
// either side ends, then closes both.
func (x *Proxy) forward(c net.Conn) {
	defer x.wg.Done()
	s, err := net.DialTimeout("tcp", x.target, dialTimeout)
	if err != nil {
		reset(c)
		return
	}
	if !x.track(c, s) {
		reset(c)
		reset(s)
		return
	}
	done := make(chan struct{}, 2)
	go func() { x.copy(s, c); done <- struct{}{} }()
	go func() { x.copy(c, s); done <- struct{}{} }()
	<-done
	x.untrack(c, s)
	c.Close()
	s.Close()
	<-done
}

// copy moves bytes from src to dst until either fails. While the proxy is
// stalled, what it has read waits, unwritten, for Restore; a plain io.Copy
// could not be held mid-stream.
func (x *Proxy) copy(dst, src net.Conn) {
	buf := make([]byte, copyBuffer)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !x.waitFlowing() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// waitFlowing blocks while the proxy is stalled; it reports false once the
// proxy is closed.
func (x *Proxy) waitFlowing() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	for x.stalled && !x.closed {
		x.flowing.Wait()
	}
	return !x.closed
}

// track registers a forwarded pair unless the proxy was cut or closed
// meanwhile.
func (x *Proxy) track(c, s net.Conn) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.refusing || x.closed {
		return false
	}
	x.conns[c], x.conns[s] = struct{}{}, struct{}{}
	return true
}

func (x *Proxy) untrack(c, s net.Conn) {
	x.mu.Lock()
	delete(x.conns, c)
	delete(x.conns, s)
	x.mu.Unlock()
}

// Cut drops every forwarded connection, both sides with a reset, and
// refuses new ones until Restore: every program sees its database
// connections fail mid-statement and cannot open new ones. It returns how
// many connections it dropped.
func (x *Proxy) Cut() (dropped int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.refusing = true
	for c := range x.conns {
		reset(c)
		delete(x.conns, c)
		dropped++
	}
	return dropped / 2
}

// Stall stops forwarding in both directions until Restore, closing
// nothing: open connections and new ones (which are accepted) see a
// database that never answers, and only a client's own timeout or
// cancellation ends its wait.
func (x *Proxy) Stall() {
	x.mu.Lock()
	x.stalled = true
	x.mu.Unlock()
}

// Restore ends a Cut or a Stall: new connections are forwarded again, and
// the bytes a stall held back go on to their destination.
func (x *Proxy) Restore() {
	x.mu.Lock()
	x.refusing, x.stalled = false, false
	x.flowing.Broadcast()
	x.mu.Unlock()
}

// Refused is how many connections were refused while cut.
func (x *Proxy) Refused() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.refused
}

// Close stops listening, drops every connection and waits for the
// proxy's goroutines.
func (x *Proxy) Close() error {
	x.mu.Lock()
	x.closed = true
	x.flowing.Broadcast()
	for c := range x.conns {
		c.Close()
		delete(x.conns, c)
	}
	x.mu.Unlock()
	err := x.ln.Close()
	x.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// reset closes c with an RST rather than a FIN: the peer's next read or
// write fails at once, as when a link or a server goes away.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}
