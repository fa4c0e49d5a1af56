package trickle

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/daemon"
)

// Outcomes of a message (label outcome of messages_total): handled, or
// found handled already by another replica when marked.
const (
	outcomeHandled  = "handled"
	outcomeConflict = "conflict"
)

// Kinds of failure (label kind of handler_errors_total).
const (
	failHandler = "handler"
	failTimeout = "timeout"
	failDB      = "db"
)

// Metrics are the trickle handler's domain metrics.
type Metrics struct {
	messages   *prometheus.CounterVec
	errors     *prometheus.CounterVec
	backingOff prometheus.Gauge
	replies    prometheus.Counter
	extended   prometheus.Counter
	credit     prometheus.Counter
}

// NewMetrics registers the trickle handler's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const sub = "trickle_handler"
	m := &Metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "messages_total", Help: "Trickle-up messages marked handled, by outcome (handled; conflict: another replica had)."},
			[]string{"outcome"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "handler_errors_total", Help: "Failed attempts to handle a trickle-up message, by kind (handler, timeout, db); it is retried."},
			[]string{"kind"}),
		backingOff: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "messages_backing_off", Help: "Messages whose last attempt failed, waiting for their retry."}),
		replies: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "replies_total", Help: "Trickle-down messages queued by the handler."}),
		extended: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "deadlines_extended_total", Help: "Report deadlines moved by --extend-deadline."}),
		credit: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "credit_granted_total", Help: "Credit granted by --credit-per-cpu-second (to a host, and the same to its user)."}),
	}
	for _, o := range []string{outcomeHandled, outcomeConflict} {
		m.messages.WithLabelValues(o)
	}
	for _, k := range []string{failHandler, failTimeout, failDB} {
		m.errors.WithLabelValues(k)
	}
	reg.MustRegister(m.messages, m.errors, m.backingOff, m.replies, m.extended, m.credit)
	return m
}

// BacklogStore is the count behind the trickle handler's backlog gauge.
type BacklogStore interface {
	MsgFromHostCountUnhandled(ctx context.Context, variety string, limit int64) (int64, error)
}

// RegisterBacklog registers taskserver_trickle_handler_backlog_messages on
// reg: unhandled messages of variety (all if empty), all replicas'
// together, up to daemon.BacklogLimit.
func RegisterBacklog(reg prometheus.Registerer, st BacklogStore, variety string) {
	daemon.RegisterBacklog(reg, "trickle_handler", "backlog_messages",
		"Trickle-up messages awaiting a handler (of --variety if set), all replicas' together, capped at 1e6.", nil,
		func(ctx context.Context) (int64, error) {
			return st.MsgFromHostCountUnhandled(ctx, variety, daemon.BacklogLimit)
		})
}
