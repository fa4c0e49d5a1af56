package filedeleter

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/store"
)

// Metrics are the file deleter's domain metrics. Label kind is "input",
// "output" or "shared" ("orphan" too for errors); table is "workunit",
// "result" or "shared_file" (outcome "done" only);
// outcome is "done" or "error" for rows, and what the orphan sweep made of
// a file for orphan_sweep_files_total.
type Metrics struct {
	filesDeleted   *prometheus.CounterVec
	filesMissing   *prometheus.CounterVec
	errors         *prometheus.CounterVec
	rows           *prometheus.CounterVec
	orphanFiles    *prometheus.CounterVec
	orphansDeleted prometheus.Counter
	tombstones     prometheus.Counter
}

// NewMetrics registers the file deleter's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const sub = "file_deleter"
	m := &Metrics{
		filesDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "files_deleted_total", Help: "Files deleted, by kind (input, output, shared)."}, []string{"kind"}),
		filesMissing: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "files_missing_total", Help: "Files to delete that were already absent, by kind."}, []string{"kind"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "errors_total", Help: "Files that could not be deleted or rows whose XML was unreadable, by kind; kind orphan: file system errors of the orphan sweep."}, []string{"kind"}),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "rows_handled_total", Help: "Rows moved out of READY, by table and outcome (done, error); shared_file: shared files deleted."}, []string{"table", "outcome"}),
		orphanFiles: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "orphan_sweep_files_total", Help: "Entries of the upload directory the orphan sweep looked at, by outcome (young, referenced, orphan, unrecognised)."}, []string{"outcome"}),
		orphansDeleted: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "orphans_deleted_total", Help: "Uploaded files the orphan sweep deleted because no result row names them."}),
		tombstones: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "tombstones_total", Help: "Outputs replaced by an empty closed tombstone, because their upload certificate was still good, until it expires."}),
	}
	for _, kind := range []string{kindInput, kindOutput, kindShared} {
		m.filesDeleted.WithLabelValues(kind)
		m.filesMissing.WithLabelValues(kind)
		m.errors.WithLabelValues(kind)
	}
	m.errors.WithLabelValues(kindOrphan)
	for _, outcome := range []string{orphanYoung, orphanReferenced, orphanOrphan, orphanUnrecognised} {
		m.orphanFiles.WithLabelValues(outcome)
	}
	for _, table := range []string{"workunit", "result"} {
		m.rows.WithLabelValues(table, "done")
		m.rows.WithLabelValues(table, "error")
	}
	m.rows.WithLabelValues(tableSharedFile, "done")
	reg.MustRegister(m.filesDeleted, m.filesMissing, m.errors, m.rows, m.orphanFiles, m.orphansDeleted, m.tombstones)
	return m
}

// BacklogStore is the counts behind the file deleter's backlog gauges.
type BacklogStore interface {
	WorkunitCountFileDeleteReady(ctx context.Context, p store.BacklogCountParams) (int64, error)
	ResultCountFileDeleteReady(ctx context.Context, p store.BacklogCountParams) (int64, error)
}

// RegisterBacklog registers taskserver_file_deleter_backlog_rows{table} on
// reg: jobs (input files) and instances (output files) whose files await
// deletion, each up to daemon.BacklogLimit.
func RegisterBacklog(reg prometheus.Registerer, st BacklogStore) {
	const help = "Rows whose files await deletion (file_delete_state READY), by table (workunit: input files; result: output files), capped at 1e6."
	p := store.BacklogCountParams{Limit: daemon.BacklogLimit}
	daemon.RegisterBacklog(reg, "file_deleter", "backlog_rows", help, prometheus.Labels{"table": "workunit"},
		func(ctx context.Context) (int64, error) { return st.WorkunitCountFileDeleteReady(ctx, p) })
	daemon.RegisterBacklog(reg, "file_deleter", "backlog_rows", help, prometheus.Labels{"table": "result"},
		func(ctx context.Context) (int64, error) { return st.ResultCountFileDeleteReady(ctx, p) })
}
