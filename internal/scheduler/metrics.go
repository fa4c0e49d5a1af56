package scheduler

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/hostav"
	"github.com/taskserver/taskserver/internal/protocol"

	"github.com/taskserver/taskserver/internal/daemon"
)

// Request outcomes (label values of requests_total).
const (
	outcomeOK               = "ok"
	outcomeBadRequest       = "bad_request"
	outcomeTooLarge         = "too_large"
	outcomeBadAuthenticator = "bad_authenticator"
	outcomeUnavailable      = "unavailable"
)

// Report outcomes (label values of results_reported_total).
const (
	reportSuccess     = "success"
	reportClientError = "client_error"
	reportIgnored     = "ignored" // unknown, foreign or already reported: acked, nothing changed
	reportError       = "error"   // database failure: not acked, the client reports again
)

// Reasons a request got less work than it asked for (label values of
// send_shortfall_total, and of no_work_total when it got none), a bounded
// set. Reasons about a candidate come from the send decision's checks
// (walk.check); the others say why the walk stopped.
const (
	reasonNoCachedWork     = "no_cached_work"    // the cache held nothing more the host could be offered
	reasonCacheUnavailable = "cache_unavailable" // the feeder's cache file could not be read
	reasonAppDeprecated    = "app_deprecated"
	reasonRPCLimit         = "rpc_limit" // --max-results-per-rpc reached
	reasonDatabase         = "database"  // the database failed: nothing more is sent
	reasonPlatform         = "platform"
	reasonMemory           = "memory"
	reasonDisk             = "disk"
	reasonDeadline         = "deadline"
	reasonInProgressLimit  = "in_progress_limit"
	reasonOnePerUser       = "one_per_user"
	reasonHR               = "homogeneous_redundancy"
	reasonQuarantined      = "quarantined"
	reasonReliableOnly     = "reliable_only"
	reasonPlanClass        = "plan_class" // every version's plan class refuses the host
	reasonResource         = "resource"   // versions only for resources not (or no longer) asked
	reasonDailyQuota       = "daily_quota"
)

// Cache claim results (label values of cache_claims_total).
const (
	claimOK          = "ok"
	claimConflict    = "conflict"
	claimOnePerUser  = "one_per_user"
	claimHRMismatch  = "hr_mismatch"  // the job was bound to another host class meanwhile
	claimCouldntSend = "couldnt_send" // the job cannot be sent at all: COULDNT_SEND
)

// Metrics are the scheduler's domain metrics.
type Metrics struct {
	// reg is where the rate limiter registers its counter, if limits are
	// on: a scheduler without limits exports no series for them.
	reg             prometheus.Registerer
	requests        *prometheus.CounterVec
	duration        prometheus.Histogram
	resultsSent     prometheus.Counter
	resultsResent   prometheus.Counter
	resultsReported *prometheus.CounterVec
	noWork          *prometheus.CounterVec
	shortfall       *prometheus.CounterVec
	// shortfallBy holds shortfall's children, resolved once: the hot path
	// does one map read instead of hashing the label.
	shortfallBy    map[string]prometheus.Counter
	claims         *prometheus.CounterVec
	resultsAborted *prometheus.CounterVec
	arSends        *prometheus.CounterVec
	lateReports    prometheus.Counter
	detached       prometheus.Counter
	commitBatch    prometheus.Histogram
	readBatch      prometheus.Histogram
	stageWait      *prometheus.HistogramVec
	trickleUps     *prometheus.CounterVec
	trickleDowns   prometheus.Counter
	// sentBy counts results sent by resource and by where the estimate of
	// their runtime came from (hostav.Source), resolved once.
	sentBy map[[2]string]prometheus.Counter
}

// sentResources are the resource labels of results_sent_by_resource_total;
// any other coprocessor (a volunteer names it) is "other".
var sentResources = []string{protocol.ResourceCPU, protocol.ResourceNVIDIA, protocol.ResourceAMD, protocol.ResourceIntel,
	protocol.ResourceApple, "other"}

// sentEstimates are its estimate labels.
var sentEstimates = []hostav.Source{hostav.SourceHost, hostav.SourcePlanClass, hostav.SourceBenchmark, hostav.SourceDefault}

// countSent counts a result sent with v.
func (m *Metrics) countSent(v *version) {
	c, ok := m.sentBy[[2]string{v.resource(), string(v.source)}]
	if !ok {
		c, ok = m.sentBy[[2]string{"other", string(v.source)}]
	}
	if ok {
		c.Inc()
	}
}

// NewMetrics registers the scheduler's domain metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const sub = "scheduler"
	m := &Metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "requests_total", Help: "Scheduler RPCs by outcome (ok, bad_request, too_large, bad_authenticator, unavailable)."},
			[]string{"outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "request_duration_seconds", Help: "Time to handle one scheduler RPC.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12)}),
		resultsSent: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "results_sent_total", Help: "Results sent to hosts for the first time."}),
		resultsResent: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "results_resent_total", Help: "Results in progress sent again because the host no longer listed them."}),
		resultsReported: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "results_reported_total", Help: "Results reported by hosts, by outcome (success, client_error; ignored: unknown, foreign or already reported; error: not recorded, not acked)."},
			[]string{"outcome"}),
		noWork: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "no_work_total", Help: "Work requests answered with no work, by main reason."},
			[]string{"reason"}),
		shortfall: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "send_shortfall_total", Help: "Work requests sent less than they asked for (fewer seconds or instances), by the reason the send decision stopped short (taskctl host explain runs it for one host)."},
			[]string{"reason"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "cache_claims_total", Help: "Cache slots claimed, by result (ok: sent; conflict: taken or no longer unsent; one_per_user: job already sent to the user; hr_mismatch: job bound to another host class; couldnt_send: job cannot be sent, instance set COULDNT_SEND)."},
			[]string{"result"}),
		resultsAborted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "results_aborted_total", Help: "Tasks a host listed that it was told to drop, by kind (abort: unknown, not this host's, or over; if_not_started: its job is already done)."},
			[]string{"kind"}),
		arSends: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "ar_sends_total", Help: "Results of adaptive replication apps sent, by whether the job was replicated (host untrusted or spot-checked) or trusted to the host alone."},
			[]string{"replicated"}),
		lateReports: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "late_reports_total", Help: "Results reported after they timed out or were marked detached, and recorded all the same."}),
		detached: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "results_detached_total", Help: "Results in progress marked CLIENT_DETACHED because their host's client attached anew."}),
		commitBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "commit_batch_requests", Help: "Requests whose writes went into one group-commit transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 9)}),
		readBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "read_batch_requests", Help: "Requests whose account, host and instances were read together.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 9)}),
		stageWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "stage_duration_seconds", Help: "Time a request spent in a shared database stage (read: its account, host and instances; commit: its writes), waiting for its batch included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"stage"}),
		trickleUps: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "trickle_ups_total", Help: "Trickle-up messages received, by outcome (stored; duplicate: stored before, its ack lost; refused: past the per-request bounds, not acked; error: not stored, not acked)."},
			[]string{"outcome"}),
		trickleDowns: prometheus.NewCounter(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
			Name: "trickle_downs_total", Help: "Trickle-down messages put in a reply (and marked delivered)."}),
	}
	for _, o := range []string{trickleStored, trickleDuplicate, trickleRefused, trickleError} {
		m.trickleUps.WithLabelValues(o)
	}
	for _, s := range []string{stageRead, stageCommit} {
		m.stageWait.WithLabelValues(s)
	}
	for _, o := range []string{outcomeOK, outcomeBadRequest, outcomeTooLarge, outcomeBadAuthenticator, outcomeUnavailable} {
		m.requests.WithLabelValues(o)
	}
	for _, o := range []string{reportSuccess, reportClientError, reportIgnored, reportError} {
		m.resultsReported.WithLabelValues(o)
	}
	for r := range noWorkText {
		m.noWork.WithLabelValues(r)
	}
	m.shortfallBy = make(map[string]prometheus.Counter, len(reasonText))
	for r := range reasonText {
		m.shortfallBy[r] = m.shortfall.WithLabelValues(r)
	}
	for _, r := range []string{claimOK, claimConflict, claimOnePerUser, claimHRMismatch, claimCouldntSend} {
		m.claims.WithLabelValues(r)
	}
	for _, k := range []string{abortNow, abortIfNotStarted} {
		m.resultsAborted.WithLabelValues(k)
	}
	for _, r := range []string{"true", "false"} {
		m.arSends.WithLabelValues(r)
	}
	sentBy := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: daemon.Namespace, Subsystem: sub,
		Name: "results_sent_by_resource_total", Help: "Results sent for the first time, by the resource they run on (CPU, NVIDIA, ATI, intel_gpu, apple_gpu, other) and where their runtime estimate came from (host: the host's own rate for the version; plan_class: the plan class's projection; benchmark; default)."},
		[]string{"resource", "estimate"})
	m.sentBy = map[[2]string]prometheus.Counter{}
	for _, r := range sentResources {
		for _, e := range sentEstimates {
			m.sentBy[[2]string{r, string(e)}] = sentBy.WithLabelValues(r, string(e))
		}
	}
	reg.MustRegister(sentBy)
	reg.MustRegister(m.requests, m.duration, m.resultsSent, m.resultsResent, m.resultsReported, m.noWork, m.shortfall, m.claims, m.resultsAborted,
		m.arSends, m.lateReports, m.detached, m.commitBatch, m.readBatch, m.stageWait, m.trickleUps, m.trickleDowns)
	return m
}
