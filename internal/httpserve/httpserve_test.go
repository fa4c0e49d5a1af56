package httpserve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs h under rate until the test ends and returns its address.
func serve(t *testing.T, h http.Handler, rate MinRate) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, New(h, Options{MinRate: rate}), ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v", err)
		}
	})
	return ln.Addr().String()
}

// upload sends a body of chunks pieces of size bytes, one every gap, and
// returns the server's answer or the error that ended the exchange.
func upload(addr string, chunks, size int, gap time.Duration) (string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", chunks*size); err != nil {
		return "", err
	}
	piece := []byte(strings.Repeat("u", size))
	for range chunks {
		time.Sleep(gap)
		if _, err := c.Write(piece); err != nil {
			return "", err
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}

// counted answers the number of body bytes read, and nothing when the body
// could not be read.
var counted = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, r.Body)
	if err != nil {
		return
	}
	fmt.Fprintf(w, "got %d", n)
})

// TestUploadAboveMinimumRateCompletes: an upload at four times the
// minimum rate, lasting longer than a window, is never cut.
func TestUploadAboveMinimumRateCompletes(t *testing.T) {
	t.Parallel()
	addr := serve(t, counted, MinRate{BytesPerSecond: 1000, Window: 2 * time.Second})
	got, err := upload(addr, 40, 400, 100*time.Millisecond) // 4,000 bytes/s for 4 s
	if err != nil || !strings.HasSuffix(got, "got 16000") {
		t.Fatalf("upload at 4x the minimum rate = %q, %v; want it complete", got, err)
	}
}

// TestUploadBelowMinimumRateIsCut: the same upload at a hundredth of the
// rate is cut within a window or two.
func TestUploadBelowMinimumRateIsCut(t *testing.T) {
	t.Parallel()
	addr := serve(t, counted, MinRate{BytesPerSecond: 1000, Window: 2 * time.Second})
	got, _ := upload(addr, 40, 4, 100*time.Millisecond)
	if strings.Contains(got, "got ") {
		t.Fatalf("upload at 40 bytes/s = %q, want it cut", got)
	}
}

// TestSlowHandlerIsNotCut: a handler that works longer than a window after
// reading the body still gets its answer out; the deadlines bound the
// client's transfers, not the server's work.
func TestSlowHandlerIsNotCut(t *testing.T) {
	t.Parallel()
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
			return // the request's context must not end for a deadline
		}
		fmt.Fprint(w, "done")
	}), MinRate{BytesPerSecond: 1000, Window: time.Second})
	got, err := upload(addr, 1, 10, 0)
	if err != nil || !strings.HasSuffix(got, "done") {
		t.Fatalf("answer of a handler that works 3 s with a 1 s window = %q, %v", got, err)
	}
}

// TestListenRecordsEveryAddress listens twice on port 0 into one address
// file and reads both bound addresses back, each one accepting.
func TestListenRecordsEveryAddress(t *testing.T) {
	path := t.TempDir() + "/addrs"
	f := NewAddrFile(path)
	a, err := Listen("127.0.0.1:0", "addr", f)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Listen("127.0.0.1:0", "listen", f)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got, err := ReadAddrFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"addr": a.Addr().String(), "listen": b.Addr().String()}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("address file = %v, want %v", got, want)
	}
	for name, addr := range got {
		if strings.HasSuffix(addr, ":0") {
			t.Errorf("%s recorded as %s, not the bound port", name, addr)
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Errorf("%s: dial the recorded %s: %v", name, addr, err)
			continue
		}
		c.Close()
	}
	if _, err := Listen("127.0.0.1:0", "no name", f); err == nil {
		t.Error("a listener name with a space was recorded")
	}
	if ln, err := Listen("127.0.0.1:0", "x", nil); err != nil {
		t.Errorf("Listen with no address file: %v", err)
	} else {
		ln.Close()
	}
}

// serveOptions runs h with o until the test ends and returns its address.
func serveOptions(t *testing.T, h http.Handler, o Options) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, New(h, o), ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v", err)
		}
	})
	return ln.Addr().String()
}

// closedWithin reports whether the server closes c within d, reading
// (and dropping) whatever it sends first.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return err == nil || !(errors.As(err, &ne) && ne.Timeout())
}

// TestSlowHeadersAndIdleConnectionsAreCut: a client that trickles its
// request's headers is cut after ReadHeaderTimeout, and a kept-alive
// connection that sends no next request after IdleTimeout.
func TestSlowHeadersAndIdleConnectionsAreCut(t *testing.T) {
	t.Parallel()
	addr := serveOptions(t, counted, Options{ReadHeaderTimeout: 500 * time.Millisecond, IdleTimeout: 500 * time.Millisecond,
		MinRate: MinRate{BytesPerSecond: 1000, Window: time.Minute}})

	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() { // a header byte every 100 ms, never the blank line
		defer close(trickled)
		_, _ = io.WriteString(slow, "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := slow.Write([]byte("x")); err != nil {
					return
				}
			}
		}
	}()
	cut := closedWithin(slow, 5*time.Second)
	close(stop)
	<-trickled
	if !cut {
		t.Error("a client trickling its headers for 5 s was not cut (ReadHeaderTimeout 500 ms)")
	}

	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if _, err := io.WriteString(idle, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(idle, 5*time.Second) {
		t.Error("a kept-alive connection idle for 5 s after its answer was not closed (IdleTimeout 500 ms)")
	}
}
