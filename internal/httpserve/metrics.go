package httpserve

import (
	"github.com/prometheus/client_golang/prometheus"
)

// namespace is daemon.Namespace; package daemon imports this one.
const namespace = "taskserver"

// Directions of a cut transfer (label direction of slow_transfers_total).
const (
	directionRequest  = "request"  // the request body arrived too slowly
	directionResponse = "response" // the client took the response too slowly
)

// Metrics count what the servers' deadlines cut.
type Metrics struct {
	slow *prometheus.CounterVec
}

// NewMetrics registers the metrics of program's public server on reg.
func NewMetrics(reg prometheus.Registerer, program string) *Metrics {
	m := &Metrics{
		slow: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: program,
			Name: "slow_transfers_total",
			Help: "Requests whose connection was closed because the request body (request) or the response (response) moved slower than the minimum transfer rate."},
			[]string{"direction"}),
	}
	for _, d := range []string{directionRequest, directionResponse} {
		m.slow.WithLabelValues(d)
	}
	reg.MustRegister(m.slow)
	return m
}

func (m *Metrics) cut(direction string) {
	if m != nil {
		m.slow.WithLabelValues(direction).Inc()
	}
}
