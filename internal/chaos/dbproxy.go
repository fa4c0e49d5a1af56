package chaos

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// dbProxy forwards TCP connections from a loopback port to the database
// server. The load run gives every program its address instead of the
// server's, so it can take the database away from all of them at once
// (Cut) without touching the server, the way a network partition or a
// failover does, and give it back (Restore).
type dbProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup // the accept loop and every copy goroutine

	mu       sync.Mutex
	conns    map[net.Conn]struct{} // both sides of every forwarded connection
	refusing bool
	closed   bool
	// refused counts connections closed at once while cut.
	refused int
}

// dialTimeout bounds the proxy's own connection to the database server.
const dialTimeout = 5 * time.Second

// startDBProxy listens on a free loopback port and forwards to target.
func startDBProxy(target string) (*dbProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("database proxy: listen: %w", err)
	}
	x := &dbProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	x.wg.Add(1)
	go x.accept()
	return x, nil
}

// Addr is the proxy's host:port, to put in the programs' DSN.
func (x *dbProxy) Addr() string { return x.ln.Addr().String() }

func (x *dbProxy) accept() {
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
func (x *dbProxy) forward(c net.Conn) {
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
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(s, c)
	go pipe(c, s)
	<-done
	x.untrack(c, s)
	c.Close()
	s.Close()
	<-done
}

// track registers a forwarded pair unless the proxy was cut or closed
// meanwhile.
func (x *dbProxy) track(c, s net.Conn) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.refusing || x.closed {
		return false
	}
	x.conns[c], x.conns[s] = struct{}{}, struct{}{}
	return true
}

func (x *dbProxy) untrack(c, s net.Conn) {
	x.mu.Lock()
	delete(x.conns, c)
	delete(x.conns, s)
	x.mu.Unlock()
}

// Cut drops every forwarded connection, both sides with a reset, and
// refuses new ones until Restore: every program sees its database
// connections fail mid-statement and cannot open new ones.
func (x *dbProxy) Cut() (dropped int) {
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

// Restore forwards new connections again.
func (x *dbProxy) Restore() {
	x.mu.Lock()
	x.refusing = false
	x.mu.Unlock()
}

// Refused is how many connections were refused while cut.
func (x *dbProxy) Refused() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.refused
}

// Close stops listening, drops every connection and waits for the
// proxy's goroutines.
func (x *dbProxy) Close() error {
	x.mu.Lock()
	x.closed = true
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
