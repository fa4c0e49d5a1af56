// Package daemon is the runtime every task-server program shares: the
// enumerate–handle–sleep loop with back-off, the /metrics and /healthz
// listener, the standard loop metrics, logging set-up, and signal handling.
//
// # One constructor shape
//
// Every daemon's service package (dbpurge, filedeleter, transitioner,
// feeder, validator, assimilator, workgenerator, scheduler) is built the
// same way:
//
//	func New(cfg Config, deps Deps) (*Service, error)
//
// Its parts:
//
//   - Config holds every setting, typed (durations as time.Duration), each
//     documented, with the rules of the flag it comes from: a setting whose
//     flag rejects 0 rejects 0, and a zero that means a default says so.
//     Config.Validate returns every problem at once (errors.Join), each
//     worded as the flag: "--tail-interval 0s: want at least 1s". Loop
//     daemons check their --mod, --mod-index and --batch with
//     config.CheckPartition.
//   - Deps holds the collaborators that are not settings, always in this
//     order: Store, then what the package alone needs (the shared-memory
//     cache, the job creator and input maker, the handler, the checker, the
//     scheduler's keys), then Log (nil: a discarding logger), Metrics (the
//     package's NewMetrics on the program's registry; nil: registered
//     nowhere) and Now (nil: time.Now), then what tests replace besides
//     the clock (random draws, the process probe), nil meaning the real one.
//   - New calls cfg.Validate and returns its error unwrapped, so a bad
//     setting reads the same from New as from the command line; a missing
//     collaborator New cannot do without (the handler, the job creator,
//     the scheduler's store, cache and key) is an error too.
//   - A setting without a flag (a worker count, a wait, a timeout) may take
//     its default from 0, and its doc says so; no other zero is a default.
//
// Flags become a Config only in the program layer: cmd/<daemon>/main.go, or
// the program.go the public plug-in packages share. RunLoopProgram calls
// Validate with the common and loop flags' checks, before the database is
// opened, so one start reports every bad flag in one message.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/httpserve"
	"github.com/taskserver/taskserver/internal/store"
)

// Namespace is the first part of every metric name.
const Namespace = "taskserver"

// Version is stamped at build time with -ldflags "-X .../internal/daemon.Version=...".
var Version = "dev"

// Service is one pass of a daemon's work. RunOnce handles one batch and
// reports how many items it handled; 0 means there was nothing to do and the
// loop sleeps before the next pass.
type Service interface {
	RunOnce(ctx context.Context) (int, error)
}

// Enumerator is a Service that counts the rows its passes' enumeration
// queries read; Loop exports the count as rows_enumerated_total. Read
// against items_processed_total, it shows a daemon reading rows it cannot
// handle (held back, retried later, another replica's).
type Enumerator interface {
	// TakeEnumerated returns the rows read since the last call.
	TakeEnumerated() int
}

// LoopOptions configures Loop.
type LoopOptions struct {
	// Sleep is the idle pause after a pass that found nothing; it is jittered
	// by ±25% so replicas do not poll in step.
	Sleep time.Duration
	// OnePass runs a single pass and returns its error.
	OnePass bool
	// MaxBackoff caps the pause after consecutive failed passes; 0 means 30s.
	MaxBackoff time.Duration
	// DBMaxBackoff, when set, caps the pause after a pass that failed on
	// the database (--db-retry-backoff) instead: a database that is back,
	// or another node of it, is used as soon as it answers.
	DBMaxBackoff time.Duration
	// PassTimeout bounds each pass (--pass-timeout); 0 means
	// config.DefaultPassTimeout.
	PassTimeout time.Duration
}

// LoopMetrics are the metrics every looping daemon exports.
type LoopMetrics struct {
	enumerated  prometheus.Counter
	passes      prometheus.Counter
	passErrors  *prometheus.CounterVec
	duration    prometheus.Histogram
	items       prometheus.Counter
	lastSuccess prometheus.Gauge
	slept       *prometheus.CounterVec
	health      *PassHealth
}

// Kinds of failed pass (label kind of pass_errors_total).
const (
	// ErrorKindDB is an error from the database or the connection to it.
	ErrorKindDB = "db"
	// ErrorKindTimeout is a pass that ran past a deadline.
	ErrorKindTimeout = "timeout"
	// ErrorKindOther is any other error: files, handlers, bad rows.
	ErrorKindOther = "other"
)

// Reasons the loop sleeps (label reason of sleep_seconds_total).
const (
	sleepIdle    = "idle"    // the last pass found nothing to do
	sleepBackoff = "backoff" // the last pass failed
)

// passBackoff is the pause after failures consecutive failed passes, the
// last with err: doubling from the idle sleep up to maxBackoff, or up to
// opts.DBMaxBackoff when the database failed.
func passBackoff(opts LoopOptions, maxBackoff time.Duration, failures int, err error) time.Duration {
	limit := maxBackoff
	if opts.DBMaxBackoff > 0 && ErrorKind(err) == ErrorKindDB {
		limit = opts.DBMaxBackoff
	}
	return min(opts.Sleep*time.Duration(1<<min(failures, 16)), limit)
}

// ErrorKind sorts a pass's error into one of the ErrorKind values.
func ErrorKind(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return ErrorKindTimeout
	case store.IsDBError(err):
		return ErrorKindDB
	default:
		return ErrorKindOther
	}
}

// NewLoopMetrics registers the standard loop metrics of program on reg.
func NewLoopMetrics(reg prometheus.Registerer, program string) *LoopMetrics {
	m := &LoopMetrics{
		passes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: program,
			Name: "passes_total", Help: "Enumeration passes run."}),
		passErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: program,
			Name: "pass_errors_total", Help: "Passes that failed, by kind of error (db, timeout, other)."}, []string{"kind"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: program,
			Name: "pass_duration_seconds", Help: "Time one pass took.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9)}),
		items: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: program,
			Name: "items_processed_total", Help: "Items (jobs, results, files, rows) handled."}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: program,
			Name: "last_success_timestamp_seconds", Help: "Unix time of the last pass that succeeded."}),
		enumerated: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: program,
			Name: "rows_enumerated_total", Help: "Rows read by the passes' enumeration queries (handled or not)."}),
		slept: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: program,
			Name: "sleep_seconds_total", Help: "Time spent sleeping between passes, by reason (idle: nothing to do; backoff: after a failed pass)."},
			[]string{"reason"}),
	}
	for _, k := range []string{ErrorKindDB, ErrorKindTimeout, ErrorKindOther} {
		m.passErrors.WithLabelValues(k)
	}
	for _, r := range []string{sleepIdle, sleepBackoff} {
		m.slept.WithLabelValues(r)
	}
	reg.MustRegister(m.passes, m.passErrors, m.duration, m.items, m.lastSuccess, m.slept, m.enumerated)
	m.health = newPassHealth(reg, program)
	return m
}

// Health is the loop's health as its passes show it: what /healthz serves.
func (m *LoopMetrics) Health() *PassHealth { return m.health }

// Loop runs svc until ctx ends: work found → next pass at once; nothing
// found → jittered sleep; error → exponential back-off with jitter, logged
// once per back-off step with the count, and "recovered" once afterwards.
// A pass in hand is allowed to finish: ctx is only checked between passes,
// and the context given to RunOnce is not cancelled by the stop signal, so
// a row is never left half done. What bounds a pass is its own deadline,
// PassTimeout, stop signal or not: a pass that runs past it is cancelled
// and counts as failed (kind timeout), and m's PassHealth reports it, or
// one that has not returned by then.
func Loop(ctx context.Context, log *slog.Logger, m *LoopMetrics, svc Service, opts LoopOptions) error {
	maxBackoff := opts.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = 30 * time.Second
	}
	timeout := opts.PassTimeout
	if timeout <= 0 {
		timeout = config.DefaultPassTimeout
	}
	unstoppable := context.WithoutCancel(ctx)
	failures := 0
	for {
		if ctx.Err() != nil {
			return nil
		}
		start := time.Now()
		m.health.passStarted(start, timeout)
		n, cutOff, err := runPass(unstoppable, svc, start, timeout)
		m.health.passEnded(err, cutOff)
		m.passes.Inc()
		m.duration.Observe(time.Since(start).Seconds())
		if e, ok := svc.(Enumerator); ok {
			m.enumerated.Add(float64(e.TakeEnumerated()))
		}
		if err != nil {
			m.passErrors.WithLabelValues(ErrorKind(err)).Inc()
			if opts.OnePass {
				return err
			}
			failures++
			backoff := passBackoff(opts, maxBackoff, failures, err)
			log.Error("pass failed", "error", err, "consecutive_failures", failures, "retry_in", backoff)
			if !m.sleep(ctx, sleepBackoff, jitter(backoff)) {
				return nil
			}
			continue
		}
		if failures > 0 {
			log.Info("recovered", "after_failures", failures)
			failures = 0
		}
		m.items.Add(float64(n))
		m.lastSuccess.SetToCurrentTime()
		if opts.OnePass {
			return nil
		}
		if n == 0 && !m.sleep(ctx, sleepIdle, jitter(opts.Sleep)) {
			return nil
		}
	}
}

// runPass runs one pass, started at start, under its own deadline and
// reports whether the pass was cut off by it. A pass that ran past it
// failed, whatever RunOnce returned: what it reports may be an error of
// the cancelled statement or nothing at all. The deadline is counted from
// start, as PassHealth counts it, and judged by the clock as well as by
// the context: a pass can return after its deadline before the context's
// timer has fired, and /healthz has already said it ran over.
func runPass(ctx context.Context, svc Service, start time.Time, timeout time.Duration) (n int, cutOff bool, err error) {
	deadline := start.Add(timeout)
	pctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	n, err = svc.RunOnce(pctx)
	if pctx.Err() == nil && !time.Now().After(deadline) {
		return n, false, err
	}
	switch {
	case err == nil:
		err = context.DeadlineExceeded
	case !errors.Is(err, context.DeadlineExceeded):
		err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return n, true, fmt.Errorf("pass ran past --pass-timeout %s: %w", timeout, err)
}

func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d*3/4 + time.Duration(rand.Int64N(int64(d)/2+1))
}

// sleep waits d or until ctx ends, counting the time slept under reason;
// it reports whether the full time passed.
func (m *LoopMetrics) sleep(ctx context.Context, reason string, d time.Duration) bool {
	start := time.Now()
	defer func() { m.slept.WithLabelValues(reason).Add(time.Since(start).Seconds()) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// NewRegistry returns a fresh registry with Go and process collectors and
// the build-info metric for program.
func NewRegistry(program string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	goVersion := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "build_info",
		Help:        "Build information of the running program; always 1.",
		ConstLabels: prometheus.Labels{"program": program, "version": Version, "goversion": goVersion}})
	info.Set(1)
	reg.MustRegister(info)
	return reg
}

// Health is what /healthz reports: healthy until Fail is called with an
// error, and again after Fail(nil).
type Health struct {
	err atomic.Pointer[error]
}

// Fail records the current health; nil means healthy.
func (h *Health) Fail(err error) {
	if err == nil {
		h.err.Store(nil)
		return
	}
	h.err.Store(&err)
}

// ServeHTTP answers 200 "ok" or 503 with the error.
func (h *Health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if p := h.err.Load(); p != nil {
		http.Error(w, (*p).Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// AdminMux returns a mux with /metrics for reg and /healthz for h (a
// *Health, or a loop's *PassHealth).
func AdminMux(reg *prometheus.Registry, h http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.Handle("/healthz", h)
	return mux
}

// AdminListener is the name of the --listen listener (/metrics and
// /healthz) in an --addr-file.
const AdminListener = "listen"

// Serve runs an HTTP server for handler on addr until ctx ends, then shuts
// it down, letting requests in flight finish for up to 10 s. An empty addr
// serves nothing and waits for ctx. The address bound (port 0 is any free
// port) is logged and recorded in addrs as AdminListener.
func Serve(ctx context.Context, log *slog.Logger, addr string, addrs *httpserve.AddrFile, handler http.Handler) error {
	if addr == "" {
		<-ctx.Done()
		return nil
	}
	ln, err := httpserve.Listen(addr, AdminListener, addrs)
	if err != nil {
		return err
	}
	log.Info("listening", "addr", ln.Addr().String())
	return httpserve.Serve(ctx, httpserve.New(handler, httpserve.Options{}), ln)
}

// RunLoop runs svc's loop and the admin listener on listen (recorded in
// addrs) side by side until ctx ends or the loop returns (one pass), and
// returns the first error. /healthz answers for the loop's passes
// (m.Health).
func RunLoop(ctx context.Context, log *slog.Logger, reg *prometheus.Registry, listen string, addrs *httpserve.AddrFile, m *LoopMetrics, svc Service, opts LoopOptions) error {
	if opts.OnePass {
		return Loop(ctx, log, m, svc, opts)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return Serve(gctx, log, listen, addrs, AdminMux(reg, m.Health())) })
	g.Go(func() error {
		err := Loop(gctx, log, m, svc, opts)
		if err == nil && ctx.Err() == nil {
			err = errors.New("loop ended")
		}
		return err
	})
	err := g.Wait()
	if ctx.Err() != nil && err == nil {
		log.Info("stopped")
	}
	return err
}

// NewLogger returns a text logger on stderr at level, tagged with program.
func NewLogger(program, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})).With("program", program)
}

// defaultGCPercent is the garbage collector's target unless GOGC is set.
const defaultGCPercent = 400

// Main runs a program: run gets a context cancelled by the first SIGINT or
// SIGTERM; a second signal exits at once. An error is printed as one line
// and the process exits 1. Call it from main and nothing else.
func Main(run func(ctx context.Context, args []string) error) {
	if os.Getenv("GOGC") == "" {
		// The daemons keep a few MB live and allocate per request or row;
		// at the default 100% the collector ran every few dozen scheduler
		// requests. 400% trades a few MB of heap for about a tenth of the
		// scheduler's CPU (BenchmarkDispatch cpu-ms/op).
		debug.SetGCPercent(defaultGCPercent)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sigs
		cancel()
		<-sigs
		fmt.Fprintln(os.Stderr, "second signal: exiting now")
		os.Exit(2)
	}()
	if err := run(ctx, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
