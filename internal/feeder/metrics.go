package feeder

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/shmcache"
	"github.com/taskserver/taskserver/internal/store"
)

const subsystem = "feeder"

// Metrics are the feeder's domain metrics; the loop metrics come from
// daemon.NewLoopMetrics.
type Metrics struct {
	slots           *prometheus.GaugeVec
	fillRatio       prometheus.Gauge
	fills           prometheus.Counter
	reclaims        prometheus.Counter
	rows            prometheus.Counter
	tablesPublishes prometheus.Counter
}

// NewMetrics registers the feeder's domain metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		slots: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: daemon.Namespace, Subsystem: subsystem,
			Name: "slots", Help: "Cache slots by state (empty, filling, present, busy) at the end of the last pass."},
			[]string{"state"}),
		fillRatio: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: daemon.Namespace, Subsystem: subsystem,
			Name: "cache_fill_ratio", Help: "Fraction of cache slots holding a result at the end of the last pass."}),
		fills: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: subsystem,
			Name: "fills_total", Help: "Cache slots filled with an unsent result."}),
		reclaims: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: subsystem,
			Name: "reclaims_total", Help: "Busy slots emptied because their scheduler died or held them too long."}),
		rows: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: subsystem,
			Name: "enumerated_rows_total", Help: "Unsent results read from the database."}),
		tablesPublishes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: subsystem,
			Name: "tables_publishes_total", Help: "Times the static tables were published into the cache."}),
	}
	reg.MustRegister(m.slots, m.fillRatio, m.fills, m.reclaims, m.rows, m.tablesPublishes)
	return m
}

// setSlots records the slot counts by state.
func (m *Metrics) setSlots(counts [shmcache.NumStates]int) {
	total := 0
	for s, n := range counts {
		m.slots.WithLabelValues(shmcache.SlotState(s).String()).Set(float64(n))
		total += n
	}
	if total > 0 {
		m.fillRatio.Set(float64(total-counts[shmcache.SlotEmpty]) / float64(total))
	}
}

// BacklogStore is the count behind the feeder's backlog gauge.
type BacklogStore interface {
	ResultCountUnsent(ctx context.Context, p store.BacklogCountParams) (int64, error)
}

// RegisterBacklog registers taskserver_feeder_backlog_results_unsent on reg:
// the unsent instances in the database, cached or not, up to
// daemon.BacklogLimit.
func RegisterBacklog(reg prometheus.Registerer, st BacklogStore) {
	daemon.RegisterBacklog(reg, subsystem, "backlog_results_unsent",
		"Unsent instances in the database (cached or not), capped at 1e6.", nil,
		func(ctx context.Context) (int64, error) {
			return st.ResultCountUnsent(ctx, store.BacklogCountParams{Limit: daemon.BacklogLimit})
		})
}
