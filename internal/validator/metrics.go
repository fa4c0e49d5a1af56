package validator

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
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
	transient prometheus.Counter
	retrying  prometheus.Gauge
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
		transient: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "transient_errors_total",
			Help: "Jobs left for a later pass by an error that says nothing about the outputs (file system, checker program)."}),
		retrying: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "jobs_retrying", Help: "Jobs waiting to be tried again after a transient error."}),
	}
	for _, o := range []string{outcomeValid, outcomeInvalid, outcomeInconclusive, outcomeValidateError, outcomeTooLate} {
		m.results.WithLabelValues(o)
	}
	reg.MustRegister(m.results, m.jobs, m.credit, m.conflicts, m.transient, m.retrying)
	return m
}

// BacklogStore is the count behind the validator's backlog gauge.
type BacklogStore interface {
	AppGetByName(ctx context.Context, name string) (row.App, error)
	WorkunitCountNeedValidate(ctx context.Context, p store.BacklogCountParams) (int64, error)
}

// RegisterBacklog registers taskserver_validator_backlog_jobs on reg: app's
// jobs flagged need_validate, up to daemon.BacklogLimit.
func RegisterBacklog(reg prometheus.Registerer, st BacklogStore, app string) {
	var appID int64 // found on the first count; the gauge serialises counts
	daemon.RegisterBacklog(reg, "validator", "backlog_jobs",
		"Jobs of the app awaiting validation (need_validate set), all replicas' together, capped at 1e6.", nil,
		func(ctx context.Context) (int64, error) {
			if appID == 0 {
				a, err := st.AppGetByName(ctx, app)
				if err != nil {
					return 0, err
				}
				appID = a.ID
			}
			return st.WorkunitCountNeedValidate(ctx, store.BacklogCountParams{AppID: appID, Limit: daemon.BacklogLimit})
		})
}
