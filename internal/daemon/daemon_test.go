package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/httpserve"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// scripted returns the next result from a list, then "nothing to do".
type scripted struct {
	calls   atomic.Int64
	results []func() (int, error)
	ran     chan struct{}
}

func (s *scripted) RunOnce(context.Context) (int, error) {
	i := s.calls.Add(1) - 1
	defer func() {
		if s.ran != nil {
			select {
			case s.ran <- struct{}{}:
			default:
			}
		}
	}()
	if int(i) < len(s.results) {
		return s.results[i]()
	}
	return 0, nil
}

func TestLoopGoesAgainWhileWorkIsFoundThenSleeps(t *testing.T) {
	t.Parallel()
	svc := &scripted{results: []func() (int, error){
		func() (int, error) { return 3, nil },
		func() (int, error) { return 2, nil },
		func() (int, error) { return 0, nil },
	}, ran: make(chan struct{}, 1)}
	reg := prometheus.NewRegistry()
	m := NewLoopMetrics(reg, "test")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- Loop(ctx, quiet, m, svc, LoopOptions{Sleep: time.Hour}) }()
	for svc.calls.Load() < 3 {
		<-svc.ran
	}
	// The third pass found nothing: the loop is now asleep for an hour and
	// must not run a fourth pass; cancelling must wake it at once.
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Loop returned %v, want nil on cancel", err)
	}
	if got := svc.calls.Load(); got != 3 {
		t.Fatalf("RunOnce called %d times, want 3", got)
	}
	if got := testutil.ToFloat64(m.items); got != 5 {
		t.Fatalf("items_processed_total = %v, want 5", got)
	}
}

func TestLoopBacksOffOnErrorsAndRecovers(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	svc := &scripted{results: []func() (int, error){
		func() (int, error) { return 0, boom },
		func() (int, error) { return 0, boom },
		func() (int, error) { return 1, nil },
	}, ran: make(chan struct{}, 1)}
	reg := prometheus.NewRegistry()
	m := NewLoopMetrics(reg, "test")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- Loop(ctx, quiet, m, svc, LoopOptions{Sleep: time.Millisecond}) }()
	for svc.calls.Load() < 4 {
		<-svc.ran
	}
	cancel()
	<-done
	if got := testutil.ToFloat64(m.passErrors.WithLabelValues(ErrorKindOther)); got != 2 {
		t.Fatalf("pass_errors_total = %v, want 2", got)
	}
}

func TestOnePassReturnsThePassError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	svc := &scripted{results: []func() (int, error){func() (int, error) { return 0, boom }}}
	m := NewLoopMetrics(prometheus.NewRegistry(), "test")
	if err := Loop(context.Background(), quiet, m, svc, LoopOptions{Sleep: time.Second, OnePass: true}); !errors.Is(err, boom) {
		t.Fatalf("one pass Loop = %v, want %v", err, boom)
	}
	if svc.calls.Load() != 1 {
		t.Fatalf("one pass ran %d passes", svc.calls.Load())
	}
}

// TestLoopStartStopStress starts and stops loops many times while they are
// busy, to catch a pass that outlives its loop or a leaked goroutine.
func TestLoopStartStopStress(t *testing.T) {
	t.Parallel()
	for i := 0; i < 200; i++ {
		var inPass atomic.Int32
		svc := serviceFunc(func(ctx context.Context) (int, error) {
			inPass.Add(1)
			defer inPass.Add(-1)
			return 1, nil
		})
		m := NewLoopMetrics(prometheus.NewRegistry(), "test")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- Loop(ctx, quiet, m, svc, LoopOptions{Sleep: time.Millisecond}) }()
		time.Sleep(time.Duration(i%5) * 100 * time.Microsecond)
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Loop = %v", err)
		}
		if n := inPass.Load(); n != 0 {
			t.Fatalf("a pass was still running after Loop returned")
		}
	}
}

type serviceFunc func(ctx context.Context) (int, error)

func (f serviceFunc) RunOnce(ctx context.Context) (int, error) { return f(ctx) }

func TestAdminMuxServesMetricsAndHealth(t *testing.T) {
	t.Parallel()
	reg := NewRegistry("test")
	h := &Health{}
	srv := httptest.NewServer(AdminMux(reg, h))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, `taskserver_build_info{goversion=`) {
		t.Fatalf("/metrics = %d, body lacks build info:\n%.300s", code, body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz = %d, want 200", code)
	}
	h.Fail(errors.New("database unreachable"))
	if code, body := get("/healthz"); code != 503 || !strings.Contains(body, "database unreachable") {
		t.Fatalf("/healthz after Fail = %d %q, want 503 with the reason", code, body)
	}
}

// TestRunLoopStopsOnCancel also proves the admin listener on port 0
// reports the port it bound: /healthz answers there.
func TestRunLoopStopsOnCancel(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := NewLoopMetrics(reg, "test")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	addrFile := filepath.Join(t.TempDir(), "addrs")
	go func() {
		done <- RunLoop(ctx, quiet, reg, "127.0.0.1:0", httpserve.NewAddrFile(addrFile), m,
			serviceFunc(func(context.Context) (int, error) { return 0, nil }), LoopOptions{Sleep: time.Millisecond})
	}()
	var addr string
	for deadline := time.Now().Add(5 * time.Second); addr == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no %q line in the address file within 5s", AdminListener)
		}
		addrs, _ := httpserve.ReadAddrFile(addrFile)
		addr = addrs[AdminListener]
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Errorf("/healthz at the reported %s: %v", addr, err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("/healthz at the reported %s = %d, want 200", addr, resp.StatusCode)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunLoop = %v, want nil after cancel", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("RunLoop did not stop within 5s of cancel")
	}
}

// enumerating is a scripted service that also reports rows read.
type enumerating struct {
	scripted
	listed int
}

func (e *enumerating) RunOnce(ctx context.Context) (int, error) {
	e.listed += 4 // every pass reads four rows, handled or not
	return e.scripted.RunOnce(ctx)
}

func (e *enumerating) TakeEnumerated() int {
	n := e.listed
	e.listed = 0
	return n
}

func TestLoopCountsEnumeratedRows(t *testing.T) {
	t.Parallel()
	svc := &enumerating{scripted: scripted{results: []func() (int, error){
		func() (int, error) { return 1, nil },
		func() (int, error) { return 0, errors.New("database went away") },
	}}}
	m := NewLoopMetrics(prometheus.NewRegistry(), "test")
	if err := Loop(context.Background(), quiet, m, svc, LoopOptions{OnePass: true}); err != nil {
		t.Fatal(err)
	}
	if err := Loop(context.Background(), quiet, m, svc, LoopOptions{OnePass: true}); err == nil {
		t.Fatal("second pass: want its error")
	}
	// A failed pass still read its rows.
	if got := testutil.ToFloat64(m.enumerated); got != 8 {
		t.Fatalf("rows_enumerated_total = %v, want 8", got)
	}
	if got := testutil.ToFloat64(m.items); got != 1 {
		t.Fatalf("items_processed_total = %v, want 1", got)
	}
}
