package submitapi

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the submission API's metrics.
type Metrics struct {
	requests      *prometheus.CounterVec
	jobsSubmitted prometheus.Counter
}

// NewMetrics registers the API's metrics with reg (the scheduler's registry,
// hence the program name in their names); nil reg registers nothing.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskserver_scheduler_submit_api_requests_total",
			Help: "Submission API requests by route and HTTP status code.",
		}, []string{"route", "code"}),
		jobsSubmitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskserver_scheduler_submit_api_jobs_submitted_total",
			Help: "Jobs created through the submission API (retried submissions not counted).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.jobsSubmitted)
	}
	return m
}
