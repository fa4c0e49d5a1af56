package daemon

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// UnhealthyAfter is how many passes in a row must fail with an error
// before a loop daemon's /healthz answers 503. A constant, not a flag:
// three failures span at least two back-off pauses (2 s and 4 s at the
// default --sleep), so one deadlock or a failover blip does not flip it,
// while a database that refuses connections shows within seconds. How long
// to tolerate a failing /healthz is the prober's choice (its own
// threshold, an alert's `for:`), not the daemon's.
const UnhealthyAfter = 3

// PassHealth is a loop daemon's health, judged from its passes. It is
// unhealthy after UnhealthyAfter consecutive failed passes, and at once
// when a pass is overdue: still running past its timeout, or cut off at it
// (the last pass failed so). An overdue pass counts alone because it has
// already taken the whole --pass-timeout: waiting for three would leave a
// hung database unreported for three timeouts. It is healthy again after a
// pass that succeeds. It serves /healthz and the healthy gauge.
// NewLoopMetrics makes one; Loop keeps it.
type PassHealth struct {
	failuresGauge prometheus.Gauge

	mu       sync.Mutex
	failures int   // consecutive failed passes
	last     error // the last failed pass's error
	cutOff   bool  // the last pass was cut off at its timeout
	start    time.Time
	timeout  time.Duration // of the pass in progress; 0 between passes
}

func newPassHealth(reg prometheus.Registerer, program string) *PassHealth {
	h := &PassHealth{failuresGauge: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: program,
		Name: "consecutive_failed_passes", Help: "Passes in a row that failed (errors and passes cut off at --pass-timeout); 0 after a pass succeeds."})}
	healthy := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: program,
		Name: "healthy", Help: fmt.Sprintf("1 while /healthz answers 200; 0 after %d consecutive failed passes, "+
			"or a pass cut off at or running past --pass-timeout, until a pass succeeds.", UnhealthyAfter)},
		func() float64 {
			if h.Check(time.Now()) != nil {
				return 0
			}
			return 1
		})
	reg.MustRegister(h.failuresGauge, healthy)
	return h
}

// passStarted records that a pass began at start, bounded by timeout.
func (h *PassHealth) passStarted(start time.Time, timeout time.Duration) {
	h.mu.Lock()
	h.start, h.timeout = start, timeout
	h.mu.Unlock()
}

// passEnded records the pass's outcome: err nil resets the failure count;
// cutOff says the pass ran past its timeout.
func (h *PassHealth) passEnded(err error, cutOff bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.timeout = 0
	if err == nil {
		h.failures, h.last, h.cutOff = 0, nil, false
	} else {
		h.failures, h.last, h.cutOff = h.failures+1, err, cutOff
	}
	h.failuresGauge.Set(float64(h.failures))
}

// Check returns why the daemon is unhealthy at now, or nil if it is
// healthy.
func (h *PassHealth) Check(now time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.timeout > 0 {
		if ran := now.Sub(h.start); ran > h.timeout {
			return fmt.Errorf("pass running for %s, over --pass-timeout %s", roundDuration(ran), h.timeout)
		}
	}
	switch {
	case h.failures >= UnhealthyAfter:
		return fmt.Errorf("%d consecutive passes failed, last: %w", h.failures, h.last)
	case h.cutOff:
		return h.last // says it ran past --pass-timeout
	}
	return nil
}

// ServeHTTP answers 200 "ok", or 503 with Check's reason on one line.
func (h *PassHealth) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if err := h.Check(time.Now()); err != nil {
		// One line: the supervisor's table and the status page show it.
		http.Error(w, strings.ReplaceAll(err.Error(), "\n", "; "), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// roundDuration rounds d for a message: whole seconds from a second up.
func roundDuration(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}
