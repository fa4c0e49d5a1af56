package supervisor

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/daemon"
)

// metrics are the supervisor's own: one series per replica of the
// configuration's daemons list, a bounded set.
type metrics struct {
	up       *prometheus.GaugeVec
	restarts *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: daemon.Namespace, Subsystem: "supervisor",
			Name: "daemon_up", Help: "1 while the daemon's process is running, 0 otherwise."}, []string{"daemon"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: "supervisor",
			Name: "restarts_total", Help: "Times the daemon was started again after it exited unexpectedly."}, []string{"daemon"}),
	}
	reg.MustRegister(m.up, m.restarts)
	return m
}
