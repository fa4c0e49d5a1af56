package assimilator

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/daemon"
)

// Kinds of assimilated job: the label values of jobs_assimilated_total.
const (
	kindSuccess = "success"
	kindError   = "error"
)

// Metrics are the assimilator's domain metrics.
type Metrics struct {
	jobs          *prometheus.CounterVec
	handlerErrors prometheus.Counter
	conflicts     prometheus.Counter
}

// NewMetrics registers the assimilator's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const sub = "assimilator"
	m := &Metrics{
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "jobs_assimilated_total", Help: "Jobs handed to the project, by kind (success or error)."},
			[]string{"kind"}),
		handlerErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "handler_errors_total", Help: "Jobs whose handler failed; they are retried."}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "conflicts_total", Help: "Jobs found no longer ready when marked assimilated."}),
	}
	m.jobs.WithLabelValues(kindSuccess)
	m.jobs.WithLabelValues(kindError)
	reg.MustRegister(m.jobs, m.handlerErrors, m.conflicts)
	return m
}
