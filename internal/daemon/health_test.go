package daemon

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// healthz returns a GET of /healthz from h.
func healthz(t *testing.T, h http.Handler) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

func TestHealthzFailsAfterConsecutiveFailedPassesAndRecoversAfterAGoodOne(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	fail := func() (int, error) { return 0, boom }
	svc := &scripted{results: []func() (int, error){
		fail, fail, func() (int, error) { return 1, nil }, // two failures are not enough
		fail, fail, fail,
		func() (int, error) { return 0, nil },
	}}
	reg := prometheus.NewRegistry()
	m := NewLoopMetrics(reg, "test")
	mux := AdminMux(reg, m.Health())
	healthy := func() float64 { return gaugeValue(t, reg, "taskserver_test_healthy") }
	for pass, want := range []struct {
		code     int
		body     string
		failures float64
	}{
		{200, "ok", 1}, {200, "ok", 2}, {200, "ok", 0},
		{200, "ok", 1}, {200, "ok", 2}, {503, "3 consecutive passes failed, last: boom", 3},
		{200, "ok", 0},
	} {
		_ = Loop(context.Background(), quiet, m, svc, LoopOptions{OnePass: true})
		code, body := healthz(t, mux)
		if code != want.code || strings.TrimSpace(body) != want.body {
			t.Fatalf("after pass %d: /healthz = %d %q, want %d %q", pass+1, code, body, want.code, want.body)
		}
		if got := testutil.ToFloat64(m.health.failuresGauge); got != want.failures {
			t.Errorf("after pass %d: consecutive_failed_passes = %v, want %v", pass+1, got, want.failures)
		}
		if got, wantUp := healthy(), float64(map[bool]int{true: 1}[want.code == 200]); got != wantUp {
			t.Errorf("after pass %d: healthy = %v, want %v", pass+1, got, wantUp)
		}
	}
}

func TestHealthzBodyIsOneLine(t *testing.T) {
	t.Parallel()
	h := newPassHealth(prometheus.NewRegistry(), "test")
	for range UnhealthyAfter {
		h.passEnded(errors.Join(errors.New("first"), errors.New("second")), false)
	}
	code, body := healthz(t, h)
	if code != 503 || body != "3 consecutive passes failed, last: first; second\n" {
		t.Fatalf("/healthz = %d %q, want 503 and the joined error on one line", code, body)
	}
}

func TestLoopCancelsAPassAtItsTimeoutAndCountsItFailed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		pass func(ctx context.Context) (int, error)
	}{
		{"pass returns the context's error", func(ctx context.Context) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}},
		{"pass wraps a driver error", func(ctx context.Context) (int, error) {
			<-ctx.Done()
			return 0, errors.New("invalid connection")
		}},
		{"pass overruns and reports success", func(ctx context.Context) (int, error) {
			<-ctx.Done()
			return 5, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := NewLoopMetrics(prometheus.NewRegistry(), "test")
			done := make(chan error, 1)
			go func() {
				done <- Loop(context.Background(), quiet, m, serviceFunc(tc.pass), LoopOptions{OnePass: true, PassTimeout: 30 * time.Millisecond})
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("a pass with a 30ms timeout still ran after 10s")
			}
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "--pass-timeout 30ms") {
				t.Fatalf("Loop = %v, want a deadline error naming --pass-timeout 30ms", err)
			}
			if got := testutil.ToFloat64(m.passErrors.WithLabelValues(ErrorKindTimeout)); got != 1 {
				t.Errorf("pass_errors_total{kind=timeout} = %v, want 1", got)
			}
			if got := testutil.ToFloat64(m.items); got != 0 {
				t.Errorf("items_processed_total = %v, want 0 for a failed pass", got)
			}
			// One pass cut off is enough for /healthz: it took the whole
			// timeout. The next good pass makes it healthy again.
			if code, body := healthz(t, m.Health()); code != 503 || !strings.HasPrefix(body, "pass ran past --pass-timeout 30ms") {
				t.Errorf("/healthz after a pass cut off = %d %q, want 503 saying it ran past --pass-timeout 30ms", code, body)
			}
			ok := serviceFunc(func(context.Context) (int, error) { return 1, nil })
			if err := Loop(context.Background(), quiet, m, ok, LoopOptions{OnePass: true, PassTimeout: time.Minute}); err != nil {
				t.Fatal(err)
			}
			if code, body := healthz(t, m.Health()); code != 200 {
				t.Errorf("/healthz after a good pass = %d %q, want 200", code, body)
			}
		})
	}
}

// A stop signal lets the pass in hand go on (its context is not
// cancelled), bounded by its own deadline: the reason a row is never left
// half done on SIGTERM.
func TestStopSignalLeavesThePassInHandRunningUnderItsDeadline(t *testing.T) {
	t.Parallel()
	inPass, release := make(chan struct{}), make(chan struct{})
	type seen struct {
		err         error
		hasDeadline bool
	}
	got := make(chan seen, 1)
	svc := serviceFunc(func(ctx context.Context) (int, error) {
		close(inPass)
		<-release
		_, ok := ctx.Deadline()
		got <- seen{ctx.Err(), ok}
		return 1, nil
	})
	m := NewLoopMetrics(prometheus.NewRegistry(), "test")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- Loop(ctx, quiet, m, svc, LoopOptions{Sleep: time.Hour, PassTimeout: time.Hour}) }()
	<-inPass
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Loop returned %v with a pass in hand, want it to wait for the pass", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Loop = %v, want nil after cancel", err)
	}
	if s := <-got; s.err != nil || !s.hasDeadline {
		t.Errorf("after the stop signal the pass saw ctx.Err() = %v, deadline %v; want nil and a deadline", s.err, s.hasDeadline)
	}
	if got := testutil.ToFloat64(m.items); got != 1 {
		t.Errorf("items_processed_total = %v, want the finished pass's 1", got)
	}
}

// A pass that ignores its cancelled context makes /healthz fail while it
// runs past its timeout, and the loop does not start another pass.
func TestHealthzFailsWhileAPassRunsPastItsTimeout(t *testing.T) {
	t.Parallel()
	inPass, release := make(chan struct{}), make(chan struct{})
	var passes int
	svc := serviceFunc(func(context.Context) (int, error) {
		passes++
		if passes == 1 {
			close(inPass)
			<-release // deaf to its context, like a call without one
		}
		return 0, nil
	})
	reg := prometheus.NewRegistry()
	m := NewLoopMetrics(reg, "test")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- Loop(ctx, quiet, m, svc, LoopOptions{Sleep: time.Hour, PassTimeout: 20 * time.Millisecond})
	}()
	<-inPass
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := healthz(t, m.Health())
		if code == 503 {
			if !strings.HasPrefix(body, "pass running for ") || !strings.Contains(body, "over --pass-timeout 20ms") {
				t.Errorf("/healthz = 503 %q, want the overdue pass named", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz = %d %q 5s into a pass with a 20ms timeout, want 503", code, body)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := gaugeValue(t, reg, "taskserver_test_healthy"); got != 0 {
		t.Errorf("healthy = %v during the overdue pass, want 0", got)
	}
	cancel()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Once it returns it is a pass cut off at its timeout: still unhealthy.
	if code, body := healthz(t, m.Health()); code != 503 || !strings.HasPrefix(body, "pass ran past --pass-timeout 20ms") {
		t.Errorf("/healthz after the overdue pass ended = %d %q, want 503 saying it ran past --pass-timeout", code, body)
	}
	if passes != 1 {
		t.Errorf("RunOnce called %d times, want 1: no pass starts while one hangs", passes)
	}
}

// gaugeValue reads gauge name from reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}
