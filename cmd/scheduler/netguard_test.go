package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// testScheduler is a scheduler command run as main runs it.
type testScheduler struct {
	dir   string // project directory
	addr  string // public address
	admin string // --listen address
}

func (s *testScheduler) url(path string) string { return "http://" + s.addr + path }

// startScheduler runs the command with the settings of configYAML (a
// project configuration file, as an operator writes one) until the test
// ends. Settings go through the file rather than flags so that a
// setting this version does not know is ignored, not refused. Tests that
// call it are not parallel: two cli apps starting at once race on
// urfave/cli's help flag.
func startScheduler(t *testing.T, configYAML string) *testScheduler {
	t.Helper()
	dsn := storetest.NewDatabase(t)
	s := &testScheduler{dir: t.TempDir()}
	k, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(s.dir, "keys"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := keys.WritePrivateFile(filepath.Join(s.dir, "keys", "upload_private"), k); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(s.dir, "project.yaml")
	if err := os.WriteFile(cfg, []byte(configYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"scheduler", "--config", cfg, "--db-dsn", dsn, "--project-dir", s.dir,
			"--addr", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--addr-file", filepath.Join(s.dir, "addrs"), "--url-base", "",
			"--shm-path", filepath.Join(s.dir, "no-feeder-yet"), "--log-level", "error"})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run after cancel = %v, want nil", err)
		}
	})
	s.addr, s.admin = waitListening(t, filepath.Join(s.dir, "addrs"), done)
	return s
}

// schedulerRPC makes a scheduler request with an unknown account key and
// checks the scheduler answered it.
func (s *testScheduler) schedulerRPC(t *testing.T, forwardedFor string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url("/scheduler"),
		strings.NewReader("<scheduler_request><authenticator>nobody</authenticator><hostid>0</hostid></scheduler_request>"))
	if err != nil {
		t.Fatal(err)
	}
	if forwardedFor != "" {
		req.Header.Set("X-Forwarded-For", forwardedFor)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scheduler request: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "<scheduler_reply>") {
		t.Fatalf("scheduler request = %d:\n%s", resp.StatusCode, b)
	}
	return string(b)
}

// metric returns the value of the sample named by line's start (name and
// labels) on the admin listener, "" if there is none.
func (s *testScheduler) metric(t *testing.T, sample string) string {
	t.Helper()
	_, body := get(t, "http://"+s.admin+"/metrics")
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, sample+" "); ok {
			return v
		}
	}
	return ""
}

// waitClosed reads c until the server closes it and reports whether it did
// before limit.
func waitClosed(c net.Conn, limit time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(limit))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("still open after %s", limit)
	}
	return nil
}

// TestSlowlorisIsCut: a few hundred connections that send their headers
// and then a byte of the body now and then (the attack that exhausted the
// file descriptors) are closed within the configured time, and a
// volunteer's scheduler request is answered meanwhile.
func TestSlowlorisIsCut(t *testing.T) {
	s := startScheduler(t, "min-transfer-rate: 100\nmin-transfer-window: 1s\n")
	const conns = 200
	var readers, writers sync.WaitGroup
	errs := make(chan error, conns)
	stop := make(chan struct{})
	defer writers.Wait()
	defer close(stop)
	for i := range conns {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		defer c.Close()
		path := "/file_upload_handler"
		if i%2 == 1 {
			path = "/scheduler"
		}
		if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n<", path); err != nil {
			t.Fatal(err)
		}
		writers.Add(1)
		readers.Add(1)
		go func() { // a byte every half second: 2 bytes/s
			defer writers.Done()
			t := time.NewTicker(500 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					if _, err := c.Write([]byte("x")); err != nil {
						return
					}
				}
			}
		}()
		go func() {
			defer readers.Done()
			if err := waitClosed(c, 30*time.Second); err != nil {
				errs <- fmt.Errorf("slow connection %d to %s: %w", i, path, err)
			}
		}()
	}
	s.schedulerRPC(t, "")
	readers.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 3 {
			t.Error(err)
		}
	}
	if n > 0 {
		t.Fatalf("%d of %d slow connections were never closed", n, conns)
	}
	s.schedulerRPC(t, "")
	if v := s.metric(t, `taskserver_scheduler_slow_transfers_total{direction="request"}`); v != fmt.Sprint(conns) {
		t.Errorf("slow_transfers_total{direction=request} = %q, want %d", v, conns)
	}
}

// rawGET sends a GET on c and reads the answer's status line; an error
// means the server closed c instead.
func rawGET(c net.Conn, br *bufio.Reader) error {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return err
}

// dialFrom connects to addr from the loopback address local.
func dialFrom(t *testing.T, local, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", local, err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// TestConnectionCaps: past the bound per address, and past the bound in
// all, a connection is closed at once; closing one frees its place.
func TestConnectionCaps(t *testing.T) {
	s := startScheduler(t, "max-connections: 4\nmax-connections-per-addr: 2\nmax-connections-exempt: \"\"\n")
	held := map[string][]net.Conn{}
	hold := func(from string) {
		c, br := dialFrom(t, from, s.addr)
		if err := rawGET(c, br); err != nil {
			t.Fatalf("connection from %s within the bounds: %v", from, err)
		}
		held[from] = append(held[from], c)
	}
	refused := func(from, bound string) {
		c, br := dialFrom(t, from, s.addr)
		if err := rawGET(c, br); err == nil {
			t.Errorf("connection from %s past the %s bound was served, want it closed", from, bound)
		}
	}
	hold("127.0.0.1")
	hold("127.0.0.1")
	refused("127.0.0.1", "per-address")
	hold("127.0.0.2")
	hold("127.0.0.2")
	refused("127.0.0.3", "overall")
	held["127.0.0.2"][0].Close()
	var c net.Conn
	var br *bufio.Reader
	for try := 0; ; try++ { // the server notices the close when it reads
		c, br = dialFrom(t, "127.0.0.3", s.addr)
		if err := rawGET(c, br); err == nil {
			break
		} else if try == 50 {
			t.Fatalf("connection after one closed: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v := s.metric(t, `taskserver_scheduler_connections_refused_total{reason="address"}`); v != "1" {
		t.Errorf(`connections_refused_total{reason="address"} = %q, want 1`, v)
	}
	if v := s.metric(t, `taskserver_scheduler_connections_refused_total{reason="total"}`); v == "" || v == "0" {
		t.Errorf(`connections_refused_total{reason="total"} = %q, want at least 1`, v)
	}
	// The scrape's own connection is the admin server's, not counted.
	if v := s.metric(t, `taskserver_scheduler_connections_open`); v != "4" {
		t.Errorf("connections_open = %q, want 4", v)
	}
}

// smallReceiveBuffer makes a client whose socket buffers little, so that a
// client that stops reading stops the server's writes soon.
var smallReceiveBuffer = &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
	Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10)
		})
		return errors.Join(err, serr)
	}}).DialContext, DisableKeepAlives: true}}

// TestSlowDownloadIsCut: a client that takes a download slower than the
// minimum rate is cut off; one above it gets the whole file.
func TestSlowDownloadIsCut(t *testing.T) {
	s := startScheduler(t, "min-transfer-rate: 262144\nmin-transfer-window: 2s\n")
	const name, size = "big_in", 16 << 20
	rel, err := fanout.Rel(name, 1024)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(s.dir, "download", rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	url := s.url("/download/" + rel)

	resp, err := smallReceiveBuffer.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(8 * time.Second) // 4 windows without reading
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil || n == size {
		t.Errorf("download read after stalling: %d of %d bytes, error %v; want it cut short", n, size, err)
	}

	resp, err = smallReceiveBuffer.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	n, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != size {
		t.Errorf("download read at full speed: %d of %d bytes, error %v", n, size, err)
	}
	if v := s.metric(t, `taskserver_scheduler_slow_transfers_total{direction="response"}`); v != "1" {
		t.Errorf(`slow_transfers_total{direction="response"} = %q, want 1`, v)
	}
}

// TestForwardedForFromTrustedProxiesOnly: behind a trusted proxy each
// volunteer's address is rate limited on its own; X-Forwarded-For from a
// peer that is not a trusted proxy changes nothing.
func TestForwardedForFromTrustedProxiesOnly(t *testing.T) {
	const limits = "rate-limit-addr-burst: 2\nrate-limit-addr-every: 1h\nrate-limit-host-burst: 0\nrate-limit-exempt: \"\"\n"
	limited := func(reply string) bool { return strings.Contains(reply, "Too many scheduler requests") }

	t.Run("trusted proxy", func(t *testing.T) {
		proxied := startScheduler(t, limits+"trusted-proxies: 127.0.0.0/8\n")
		for i := range 2 {
			if limited(proxied.schedulerRPC(t, "203.0.113.7")) {
				t.Fatalf("request %d of 203.0.113.7 via the proxy was rate limited, want its burst of 2", i+1)
			}
		}
		if !limited(proxied.schedulerRPC(t, "198.51.100.1, 203.0.113.7")) {
			t.Error("third request of 203.0.113.7 via the proxy (with a forged left-most entry) was not rate limited")
		}
		if limited(proxied.schedulerRPC(t, "203.0.113.8")) {
			t.Error("first request of 203.0.113.8 via the proxy was rate limited: the proxy's volunteers share one allowance")
		}
	})
	t.Run("no trusted proxy", func(t *testing.T) {

		direct := startScheduler(t, limits)
		direct.schedulerRPC(t, "203.0.113.1")
		direct.schedulerRPC(t, "203.0.113.2")
		if !limited(direct.schedulerRPC(t, "203.0.113.3")) {
			t.Error("a peer that is not a trusted proxy escaped its rate limit by naming other addresses in X-Forwarded-For")
		}
	})
}

// TestAdminListenDefaultsToLoopback: unless told otherwise, /metrics and
// /healthz are on a loopback address, never on the public one.
func TestAdminListenDefaultsToLoopback(t *testing.T) {
	var def string
	for _, f := range flags() {
		if sf, ok := f.(*cli.StringFlag); ok && sf.Name == config.FlagListen {
			def = sf.Value
		}
	}
	ap, err := netip.ParseAddrPort(def)
	if err != nil || !ap.Addr().IsLoopback() {
		t.Fatalf("--listen defaults to %q, want a loopback address and port", def)
	}
	s := startScheduler(t, "")
	if _, body := get(t, s.url("/metrics")); strings.Contains(body, "taskserver_") {
		t.Errorf("the public address serves /metrics:\n%.300s", body)
	}
	if _, body := get(t, s.url("/healthz")); body == "ok\n" {
		t.Error("the public address serves /healthz")
	}
	if code, body := get(t, "http://"+s.admin+"/metrics"); code != 200 || !strings.Contains(body, "taskserver_scheduler_connections_open") {
		t.Errorf("GET /metrics on --listen = %d, lacks the connection metrics:\n%.300s", code, body)
	}
}
