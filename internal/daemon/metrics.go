package daemon

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/store"
)

// DBMetrics are the database metrics every program that opens the store
// exports: query latency and failures by store method, and the retries
// and failovers the store made to get past a busy or failing node. It is
// the store's Observer (Observe) and Events.
type DBMetrics struct {
	duration  *prometheus.HistogramVec
	errors    *prometheus.CounterVec
	retries   *prometheus.CounterVec
	failovers prometheus.Counter
}

// NewDBMetrics registers program's database metrics on reg.
func NewDBMetrics(reg prometheus.Registerer, program string) *DBMetrics {
	m := &DBMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: program,
			Name: "db_query_duration_seconds",
			Help: "Time of one database call (a query, or a transaction from begin to commit), by store method.",
			// 100 µs to 26 s: a keyed read on a warm pool up to a stalled group commit.
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}, []string{"op"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: program,
			Name: "db_errors_total",
			Help: "Database calls that failed, by store method; conflicts and rows not found are not failures."}, []string{"op"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: program,
			Name: "db_retries_total",
			Help: "Database statements and transactions run again, by why: 1213 deadlock or certification conflict, " +
				"1205 lock-wait timeout, 1047 node not ready, 1180 COMMIT failed (a node leaving its cluster), conn connection lost or no node reachable."}, []string{"code"}),
		failovers: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: program,
			Name: "db_failovers_total",
			Help: "Times new database connections moved to the next address of --db-dsn because the current one was unreachable or not ready."}),
	}
	for _, code := range store.RetryCodes {
		m.retries.WithLabelValues(code)
	}
	reg.MustRegister(m.duration, m.errors, m.retries, m.failovers)
	return m
}

// Retry counts one retry; it is store.Events' Retry.
func (m *DBMetrics) Retry(code string) { m.retries.WithLabelValues(code).Inc() }

// Failover counts one failover; it is store.Events' Failover.
func (m *DBMetrics) Failover() { m.failovers.Inc() }

// StoreOptions are the store options every program sets from the common
// flags: the retry count and back-off, and m as the store's observer and
// events. The program adds its own (MaxOpenConns, Prepared, SyncReads).
func (m *DBMetrics) StoreOptions(common config.Common) store.Options {
	return store.Options{Observer: m.Observe, Events: m, Retries: common.DBRetriesOption(),
		RetryBackoff: common.DBRetryBackoff}
}

// Observe records one database call; it is a store.Observer. The error
// series of an op is created with its first call, so it exists at 0 before
// the first failure.
func (m *DBMetrics) Observe(op string, d time.Duration, err error) {
	m.duration.WithLabelValues(op).Observe(d.Seconds())
	c := m.errors.WithLabelValues(op)
	if store.QueryFailed(err) {
		c.Inc()
	}
}

// BacklogLimit caps a backlog count, so that the query behind a gauge reads
// a bounded index range however large the backlog grows.
const BacklogLimit = 1_000_000

// BacklogEvery is how long a backlog count is reused before it is read
// again: scrapes in between cost nothing.
const BacklogEvery = 5 * time.Second

// backlogTimeout bounds one count so a slow database cannot hold a scrape.
const backlogTimeout = 3 * time.Second

// RegisterBacklog registers the gauge taskserver_<program>_<name> whose
// value is count's, read when the gauge is scraped but at most once per
// BacklogEvery. A failed count shows as NaN, not as a stale number, until
// a count succeeds again; the error reaches the db_errors_total metric
// through the store's observer. labels are constant labels, for one name
// registered once per table or kind.
func RegisterBacklog(reg prometheus.Registerer, program, name, help string, labels prometheus.Labels,
	count func(ctx context.Context) (int64, error)) {
	b := &backlog{count: count}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: program,
		Name: name, Help: help, ConstLabels: labels}, b.value))
}

type backlog struct {
	count func(ctx context.Context) (int64, error)
	mu    sync.Mutex
	at    time.Time
	v     float64
}

func (b *backlog) value() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.at.IsZero() && time.Since(b.at) < BacklogEvery {
		return b.v
	}
	ctx, cancel := context.WithTimeout(context.Background(), backlogTimeout)
	defer cancel()
	n, err := b.count(ctx)
	b.at = time.Now()
	if err != nil {
		b.v = math.NaN()
	} else {
		b.v = float64(n)
	}
	return b.v
}
