package validator

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/daemon"
)

// Verdict labels of the results counter: a fixed set.
const (
	outcomeValid         = "valid"
	outcomeInvalid       = "invalid"
	outcomeInconclusive  = "inconclusive"
	outcomeValidateError = "validate_error"
	outcomeTooLate       = "too_late"
)

// Metrics are the validator's domain metrics.
type Metrics struct {
	results   *prometheus.CounterVec
	jobs      prometheus.Counter
	credit    prometheus.Counter
	conflicts prometheus.Counter
	errors    prometheus.Counter
}

// NewMetrics registers the validator's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const sub = "validator"
	m := &Metrics{
		results: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "results_total", Help: "Instances judged, by verdict."}, []string{"outcome"}),
		jobs: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "jobs_validated_total", Help: "Jobs whose validation was written."}),
		credit: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "credit_granted_total", Help: "Credit granted for valid instances, in cobblestones."}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "conflicts_total", Help: "Validations dropped because the job or an instance changed meanwhile."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "job_errors_total", Help: "Jobs left for a later pass because an output could not be read."}),
	}
	for _, o := range []string{outcomeValid, outcomeInvalid, outcomeInconclusive, outcomeValidateError, outcomeTooLate} {
		m.results.WithLabelValues(o)
	}
	reg.MustRegister(m.results, m.jobs, m.credit, m.conflicts, m.errors)
	return m
}
