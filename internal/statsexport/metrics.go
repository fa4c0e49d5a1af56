package statsexport

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/daemon"
)

// Metrics are db_dump's domain metrics.
type Metrics struct {
	exports    prometheus.Counter
	records    *prometheus.CounterVec
	bytes      prometheus.Gauge
	lastExport prometheus.Gauge
}

// NewMetrics registers db_dump's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const sub = "db_dump"
	m := &Metrics{
		exports: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "exports_total", Help: "Complete statistics dumps written and swapped in."}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "records_exported_total", Help: "Records written to swapped-in dumps, by table (user, team, host)."},
			[]string{"table"}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "dump_bytes", Help: "Size on disk of the last dump this process wrote."}),
		lastExport: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "last_export_timestamp_seconds", Help: "update_time of the dump in place (Unix seconds; 0 before one is seen)."}),
	}
	for _, table := range []string{"user", "team", "host"} {
		m.records.WithLabelValues(table)
	}
	reg.MustRegister(m.exports, m.records, m.bytes, m.lastExport)
	return m
}
