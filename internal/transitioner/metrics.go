package transitioner

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

// errorBits are the error_mask bits counted one by one; the label is the
// bit's name, so its values are a fixed set.
var errorBits = []state.ErrorMask{
	state.ErrCouldntSendResult, state.ErrTooManyErrorResults, state.ErrTooManySuccessResult,
	state.ErrTooManyTotalResults, state.ErrCancelled, state.ErrNoCanonicalResult,
}

// Metrics are the transitioner's domain metrics.
type Metrics struct {
	jobs      prometheus.Counter
	created   prometheus.Counter
	timedOut  prometheus.Counter
	jobErrors *prometheus.CounterVec
	conflicts prometheus.Counter
	lag       prometheus.Gauge
	// The batch pass and holds.
	tailCopies  prometheus.Counter
	batchesDone prometheus.Counter
	jobsHeld    *prometheus.CounterVec
}

// holdBits are the bits a job can be held for: every error bit but
// CANCELLED.
var holdBits = []state.ErrorMask{
	state.ErrCouldntSendResult, state.ErrTooManyErrorResults, state.ErrTooManySuccessResult,
	state.ErrTooManyTotalResults, state.ErrNoCanonicalResult,
}

// NewMetrics registers the transitioner's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const sub = "transitioner"
	m := &Metrics{
		jobs: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "jobs_transitioned_total", Help: "Jobs whose transition was written."}),
		created: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "results_created_total", Help: "Instances created."}),
		timedOut: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "results_timed_out_total", Help: "In-progress instances timed out past their deadline."}),
		jobErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "job_errors_total", Help: "Jobs failed for good, by error_mask bit set."}, []string{"error"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "conflicts_total", Help: "Transitions dropped because the job or an instance changed meanwhile."}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "transition_lag_seconds", Help: "Age of the oldest due transition at the start of the last pass."}),
		tailCopies: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "tail_copies_total", Help: "Extra instances asked for by tail acceleration."}),
		batchesDone: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "batches_completed_total", Help: "Batches marked done, every job assimilated."}),
		jobsHeld: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "jobs_held_total", Help: "Jobs put on hold instead of failed, by hold_reason bit set."}, []string{"reason"}),
	}
	for _, b := range errorBits {
		m.jobErrors.WithLabelValues(b.String())
	}
	for _, b := range holdBits {
		m.jobsHeld.WithLabelValues(b.String())
	}
	reg.MustRegister(m.jobs, m.created, m.timedOut, m.jobErrors, m.conflicts, m.lag,
		m.tailCopies, m.batchesDone, m.jobsHeld)
	return m
}

func (m *Metrics) addErrors(added state.ErrorMask) {
	for _, b := range errorBits {
		if added&b != 0 {
			m.jobErrors.WithLabelValues(b.String()).Inc()
		}
	}
}

func (m *Metrics) addHeld(reason state.ErrorMask) {
	for _, b := range holdBits {
		if reason&b != 0 {
			m.jobsHeld.WithLabelValues(b.String()).Inc()
		}
	}
}

// BacklogStore is the count behind the transitioner's backlog gauge.
type BacklogStore interface {
	WorkunitCountDue(ctx context.Context, p store.BacklogCountParams) (int64, error)
}

// RegisterBacklog registers taskserver_transitioner_backlog_jobs_due on reg:
// the jobs whose transition_time has come, the whole table's (every --mod
// replica shows the same), up to daemon.BacklogLimit.
func RegisterBacklog(reg prometheus.Registerer, st BacklogStore, now func() time.Time) {
	daemon.RegisterBacklog(reg, "transitioner", "backlog_jobs_due",
		"Jobs due for transition (transition_time reached), all replicas' together, capped at 1e6.", nil,
		func(ctx context.Context) (int64, error) {
			return st.WorkunitCountDue(ctx, store.BacklogCountParams{Now: now().Unix(), Limit: daemon.BacklogLimit})
		})
}
