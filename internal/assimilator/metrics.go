package assimilator

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// Kinds of assimilated job (label kind of jobs_assimilated_total).
const (
	kindSuccess     = "success"
	kindError       = "error"
	kindKnownAnswer = "known_answer"
)

// Kinds of failure (label kind of handler_errors_total): the handler
// returned an error, it ran past its time limit, or reading or marking the
// job in the database failed.
const (
	failHandler = "handler"
	failTimeout = "timeout"
	failDB      = "db"
)

// Metrics are the assimilator's domain metrics.
type Metrics struct {
	jobs          *prometheus.CounterVec
	handlerErrors *prometheus.CounterVec
	backingOff    prometheus.Gauge
	conflicts     prometheus.Counter
}

// NewMetrics registers the assimilator's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const sub = "assimilator"
	m := &Metrics{
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "jobs_assimilated_total",
			Help: "Jobs handed to the project, by kind (success, error, or known_answer: marked done unhandled)."},
			[]string{"kind"}),
		handlerErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "handler_errors_total",
			Help: "Failed attempts to assimilate a job, by kind (handler, timeout, db); the job is retried."},
			[]string{"kind"}),
		backingOff: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "jobs_backing_off", Help: "Jobs whose last attempt failed, waiting for their retry."}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "conflicts_total", Help: "Jobs found no longer ready when marked assimilated."}),
	}
	for _, k := range []string{kindSuccess, kindError, kindKnownAnswer} {
		m.jobs.WithLabelValues(k)
	}
	for _, k := range []string{failHandler, failTimeout, failDB} {
		m.handlerErrors.WithLabelValues(k)
	}
	reg.MustRegister(m.jobs, m.handlerErrors, m.backingOff, m.conflicts)
	return m
}

// BacklogStore is the count behind the assimilator's backlog gauge.
type BacklogStore interface {
	AppGetByName(ctx context.Context, name string) (row.App, error)
	WorkunitCountAssimilateReady(ctx context.Context, p store.BacklogCountParams) (int64, error)
}

// RegisterBacklog registers taskserver_assimilator_backlog_jobs on reg:
// app's jobs ready to assimilate, up to daemon.BacklogLimit.
func RegisterBacklog(reg prometheus.Registerer, st BacklogStore, app string) {
	var appID int64 // found on the first count; the gauge serialises counts
	daemon.RegisterBacklog(reg, "assimilator", "backlog_jobs",
		"Jobs of the app awaiting assimilation (assimilate_state READY), all replicas' together, capped at 1e6.", nil,
		func(ctx context.Context) (int64, error) {
			if appID == 0 {
				a, err := st.AppGetByName(ctx, app)
				if err != nil {
					return 0, err
				}
				appID = a.ID
			}
			return st.WorkunitCountAssimilateReady(ctx, store.BacklogCountParams{AppID: appID, Limit: daemon.BacklogLimit})
		})
}
