package daemon_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/dbproxy"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
	"github.com/taskserver/taskserver/internal/transitioner"
)

// TestStuckDatabaseFailsHealthzThenItRecovers runs the transitioner's
// loop and admin listener, as its program does, against a real database
// behind a proxy, stalls the proxy (the bytes stop, no connection closes:
// a hung server) and watches /healthz: 503 once a pass has been cut off at
// --pass-timeout, 200 again by itself once the database answers.
func TestStuckDatabaseFailsHealthzThenItRecovers(t *testing.T) {
	cfg, err := mysql.ParseDSN(storetest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := dbproxy.Start(cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() }) // after the deferred st.Close
	cfg.Addr = proxy.Addr()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := store.Open(ctx, cfg.FormatDSN(), store.Options{MaxOpenConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	const program = "transitioner"
	reg := daemon.NewRegistry(program)
	m := daemon.NewLoopMetrics(reg, program)
	svc, err := transitioner.New(transitioner.Config{Mod: 1, Batch: 500, MaxOutputBytes: transitioner.DefaultMaxOutputBytes,
		TailInterval: transitioner.DefaultTailInterval}, transitioner.Deps{Store: st, Log: quietLog, Metrics: transitioner.NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	listening := make(chan string, 1)
	log := slog.New(listenCatcher{addr: listening})
	done := make(chan error, 1)
	go func() {
		done <- daemon.RunLoop(ctx, log, reg, "127.0.0.1:0", nil, m, svc, daemon.LoopOptions{
			Sleep: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, PassTimeout: 300 * time.Millisecond})
	}()
	var addr string
	select {
	case addr = <-listening:
	case err := <-done:
		t.Fatalf("RunLoop = %v before listening", err)
	case <-time.After(10 * time.Second):
		t.Fatal("RunLoop not listening after 10s")
	}
	url := "http://" + addr + "/healthz"

	waitHealthz(t, url, 200, "ok")
	stalled := time.Now()
	proxy.Stall()
	body := waitHealthz(t, url, 503, "pass ran past --pass-timeout 300ms: ")
	t.Logf("stalled %s: /healthz 503 %q", time.Since(stalled).Round(time.Millisecond), body)
	if got := metricLine(t, addr, "taskserver_transitioner_healthy"); got != "0" {
		t.Errorf("taskserver_transitioner_healthy = %s while the database is stuck, want 0", got)
	}
	proxy.Restore()
	waitHealthz(t, url, 200, "ok")
	if got := metricLine(t, addr, "taskserver_transitioner_healthy"); got != "1" {
		t.Errorf("taskserver_transitioner_healthy = %s after the database came back, want 1", got)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunLoop = %v after cancel, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunLoop did not stop within 10s of cancel")
	}
}

// waitHealthz polls url until it answers code with a body that contains
// want, for up to 30 s, and returns the body.
func waitHealthz(t *testing.T, url string, code int, want string) string {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for {
		resp, err := client.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body := strings.TrimSpace(string(b))
			if resp.StatusCode == code && strings.Contains(body, want) {
				return body
			}
			last = fmt.Sprintf("%d %q", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %s after 30s, want %d with %q", url, last, code, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metricLine returns the value of the unlabelled series name on addr's
// /metrics.
func metricLine(t *testing.T, addr, name string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			return v
		}
	}
	t.Fatalf("/metrics of %s has no %s", addr, name)
	return ""
}

// listenCatcher is a log handler that hands on the address of the
// "listening" line, the admin listener's bound port, and drops the rest.
type listenCatcher struct{ addr chan<- string }

func (listenCatcher) Enabled(context.Context, slog.Level) bool { return true }
func (l listenCatcher) WithAttrs([]slog.Attr) slog.Handler     { return l }
func (l listenCatcher) WithGroup(string) slog.Handler          { return l }
func (l listenCatcher) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "listening" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "addr" {
			select {
			case l.addr <- a.Value.String():
			default:
			}
		}
		return true
	})
	return nil
}
