package connlimit

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/daemon"
)

// Metrics are a listener's connection counts.
type Metrics struct {
	open    prometheus.Gauge
	max     prometheus.Gauge
	refused *prometheus.CounterVec
}

// NewMetrics registers the connection metrics of program on reg.
func NewMetrics(reg prometheus.Registerer, program string) *Metrics {
	m := &Metrics{
		open: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: daemon.Namespace, Subsystem: program,
			Name: "connections_open", Help: "Connections the public server holds open."}),
		max: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: daemon.Namespace, Subsystem: program,
			Name: "connections_max", Help: "The most connections the public server holds open at once (--max-connections, or derived from the file-descriptor limit)."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: program,
			Name: "connections_refused_total",
			Help: "Connections closed as soon as they were accepted, by reason (total: the server held its most; address: the client's IPv4 address or IPv6 /64 held its most)."},
			[]string{"reason"}),
	}
	for _, r := range []string{reasonTotal, reasonAddress} {
		m.refused.WithLabelValues(r)
	}
	reg.MustRegister(m.open, m.max, m.refused)
	return m
}

func (m *Metrics) setMax(n int) {
	if m != nil {
		m.max.Set(float64(n))
	}
}

func (m *Metrics) opened() {
	if m != nil {
		m.open.Inc()
	}
}

func (m *Metrics) closed() {
	if m != nil {
		m.open.Dec()
	}
}

func (m *Metrics) refuse(reason string) {
	if m != nil {
		m.refused.WithLabelValues(reason).Inc()
	}
}
