package dbpurge

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/daemon"
)

// Metrics are db_purge's domain metrics. Label table is workunit, result,
// workunit_user, workunit_shared_file or throughput (deleted only; the
// status page's per-minute counts, not archived).
type Metrics struct {
	archived     *prometheus.CounterVec
	deleted      *prometheus.CounterVec
	archiveBytes *prometheus.CounterVec
}

// NewMetrics registers db_purge's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const sub = "db_purge"
	m := &Metrics{
		archived: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "rows_archived_total", Help: "Rows written to archive files, by table."}, []string{"table"}),
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "rows_deleted_total", Help: "Rows deleted after archiving, by table."}, []string{"table"}),
		archiveBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "archive_bytes_total", Help: "Compressed bytes written to archive files, by table."}, []string{"table"}),
	}
	for _, table := range []string{"workunit", "result"} {
		m.archived.WithLabelValues(table)
		m.archiveBytes.WithLabelValues(table)
	}
	for _, table := range []string{"workunit", "result", "workunit_user", "workunit_shared_file", "throughput"} {
		m.deleted.WithLabelValues(table)
	}
	reg.MustRegister(m.archived, m.deleted, m.archiveBytes)
	return m
}
