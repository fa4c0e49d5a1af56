package chaos

import (
	"bufio"
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
	x, err := startDBProxy(echoServer(t))
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
	x, err := startDBProxy(target)
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
