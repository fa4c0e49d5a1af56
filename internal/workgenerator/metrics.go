package workgenerator

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/daemon"
)

// Metrics are the work generator's domain metrics.
type Metrics struct {
	jobsCreated prometheus.Counter
	backlog     prometheus.Gauge
	totalJobs   prometheus.Gauge
}

// NewMetrics registers the work generator's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const sub = "work_generator"
	m := &Metrics{
		jobsCreated: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "jobs_created_total", Help: "Jobs (workunits) created by this process."}),
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "unsent_results", Help: "Unsent backlog of the app at the last pass, in instances, counting jobs still awaiting their instances."}),
		totalJobs: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "jobs_created_count", Help: "Jobs created for the app over all runs, as counted in the counter file."}),
	}
	reg.MustRegister(m.jobsCreated, m.backlog, m.totalJobs)
	return m
}
