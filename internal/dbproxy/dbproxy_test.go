package dbproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// echoServer answers every line with the same line until closed; it
// stands for the database server behind the proxy.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// roundTrip sends a line through c and reads the answer.
func roundTrip(c net.Conn, line string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSuffix(got, "\n"), err
}

func TestDBProxyCutDropsAndRefusesThenRestoreForwards(t *testing.T) {
	x, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()

	before, err := net.Dial("tcp", x.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	if got, err := roundTrip(before, "ping"); err != nil || got != "ping" {
		t.Fatalf("through the proxy: %q, %v; want ping, nil", got, err)
	}

	if n := x.Cut(); n != 1 {
		t.Errorf("Cut() dropped %d connections, want 1", n)
	}
	if got, err := roundTrip(before, "after cut"); err == nil {
		t.Errorf("an open connection after Cut answered %q, want an error", got)
	}
	during, err := net.Dial("tcp", x.Addr())
	if err == nil {
		got, rerr := roundTrip(during, "during cut")
		during.Close()
		if rerr == nil {
			t.Errorf("a new connection while cut answered %q, want an error", got)
		}
	}
	if n := x.Refused(); n != 1 {
		t.Errorf("Refused() = %d, want 1", n)
	}

	x.Restore()
	after, err := net.Dial("tcp", x.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if got, err := roundTrip(after, "back"); err != nil || got != "back" {
		t.Fatalf("after Restore: %q, %v; want back, nil", got, err)
	}
	if err := x.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if got, err := roundTrip(after, "closed"); err == nil {
		t.Errorf("a connection after Close answered %q, want an error", got)
	}
}

func TestDBProxyTargetDownClosesTheClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	ln.Close() // nothing listens there now
	x, err := Start(target)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	// The reset may already fail the dial; else the first exchange.
	c, err := net.Dial("tcp", x.Addr())
	if err != nil {
		return
	}
	defer c.Close()
	if got, err := roundTrip(c, "anyone?"); err == nil {
		t.Errorf("with the server down the proxy answered %q, want an error", got)
	}
}

func TestDBProxyStallHoldsBytesWithoutClosingThenRestoreDelivers(t *testing.T) {
	x, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	before, err := net.Dial("tcp", x.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	r := bufio.NewReader(before)
	if got, err := exchange(before, r, "ping", 5*time.Second); err != nil || got != "ping" {
		t.Fatalf("through the proxy: %q, %v; want ping, nil", got, err)
	}

	x.Stall()
	if got, err := exchange(before, r, "held", 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("an open connection while stalled answered %q, %v; want a read timeout, the connection open", got, err)
	}
	during, err := net.Dial("tcp", x.Addr())
	if err != nil {
		t.Fatalf("a new connection while stalled: %v, want it accepted", err)
	}
	defer during.Close()
	dr := bufio.NewReader(during)
	if got, err := exchange(during, dr, "new", 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("a new connection while stalled answered %q, %v; want a read timeout", got, err)
	}
	if n := x.Refused(); n != 0 {
		t.Errorf("Refused() = %d while stalled, want 0: a stall refuses nothing", n)
	}

	x.Restore()
	// What the stall held back arrives now, on the same connections.
	for _, tc := range []struct {
		c    net.Conn
		r    *bufio.Reader
		want string
	}{{before, r, "held"}, {during, dr, "new"}} {
		_ = tc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := tc.r.ReadString('\n')
		if err != nil || strings.TrimSuffix(got, "\n") != tc.want {
			t.Fatalf("after Restore read %q, %v; want the held %q", got, err, tc.want)
		}
	}
	if got, err := exchange(before, r, "flowing", 5*time.Second); err != nil || got != "flowing" {
		t.Fatalf("after Restore: %q, %v; want flowing, nil", got, err)
	}
}

// A stalled proxy still closes: Close must not wait for a Restore.
func TestDBProxyCloseEndsAStall(t *testing.T) {
	x, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", x.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	x.Stall()
	if got, err := exchange(c, bufio.NewReader(c), "held", 100*time.Millisecond); !isTimeout(err) {
		t.Fatalf("while stalled: %q, %v; want a read timeout", got, err)
	}
	done := make(chan error)
	go func() { done <- x.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close() = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close() of a stalled proxy did not return within 5s")
	}
}

// exchange sends a line through c and reads the answer through r within d.
func exchange(c net.Conn, r *bufio.Reader, line string, d time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	return strings.TrimSuffix(got, "\n"), err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
