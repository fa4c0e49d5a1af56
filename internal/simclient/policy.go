package simclient

import (
	"math/rand/v2"
	"time"

	"github.com/taskserver/taskserver/internal/clientpolicy"
)

// Kind is how a simulated host behaves.
type Kind int

// Host kinds.
const (
	// KindNormal computes correct output and reports success.
	KindNormal Kind = iota
	// KindFailing reports every task as a compute error (state 3, exit 1).
	KindFailing
	// KindVanishing takes work and never contacts the server again.
	KindVanishing
	// KindCheating uploads an output of the right format with a wrong digest,
	// a different one on every cheating host, so two cheaters never agree.
	KindCheating
	// KindLate computes correct output but goes offline after fetching
	// work: it uploads and reports each task only after the task's report
	// deadline has passed (plus Options.LateBy), and makes no RPC while it
	// holds unfinished tasks, as a laptop closed for the weekend would.
	KindLate
)

// kindCount is the number of kinds, for arrays indexed by Kind.
const kindCount = int(KindLate) + 1

func (k Kind) String() string {
	switch k {
	case KindNormal:
		return "normal"
	case KindFailing:
		return "failing"
	case KindVanishing:
		return "vanishing"
	case KindCheating:
		return "cheating"
	case KindLate:
		return "late"
	}
	return "unknown"
}

// kindFracs are the shares of hosts of each special kind.
type kindFracs struct {
	fail, vanish, cheat, late float64
}

// assignKinds gives n hosts their kinds: round(frac × n) of each special
// kind, the rest normal, in an order shuffled by r so the special hosts are
// spread over users and host numbers.
func assignKinds(n int, f kindFracs, r *rand.Rand) []Kind {
	kinds := make([]Kind, n)
	i := 0
	for _, k := range []struct {
		kind Kind
		frac float64
	}{{KindFailing, f.fail}, {KindVanishing, f.vanish}, {KindCheating, f.cheat}, {KindLate, f.late}} {
		for c := int(k.frac*float64(n) + 0.5); c > 0 && i < n; c-- {
			kinds[i] = k.kind
			i++
		}
	}
	r.Shuffle(n, func(a, b int) { kinds[a], kinds[b] = kinds[b], kinds[a] })
	return kinds
}

// Client delays of the real client (PROTOCOL.md §9.4 and §6), before
// Options.BackoffScale.
const (
	rpcBackoffMin       = time.Minute
	rpcBackoffMax       = 4 * time.Hour
	workFetchBackoffMin = 10 * time.Minute
	workFetchBackoffMax = 24 * time.Hour
	transferBackoffMin  = 2 * time.Minute
	transferBackoffMax  = 6 * time.Hour
	// A project's RPCs back off this way after consecutive task crashes
	// or transfer failures (seed 002): the RPC back-off's range.
	taskErrorBackoffMin = time.Minute
	taskErrorBackoffMax = 4 * time.Hour
	// masterFetchPeriod is the real client's MASTER_FETCH_PERIOD: after
	// this many consecutive failed RPCs it reads the master file again.
	masterFetchPeriod = 10
	// masterRereadDefault is how often a host reads a project's master
	// file again anyway, before Options.BackoffScale.
	masterRereadDefault = 24 * time.Hour
	// backoffDoublings caps the exponent, as the real client stops
	// growing its RPC back-off after 10 failures.
	backoffDoublings = 10
)

// backoff is the randomized exponential back-off after n ≥ 1 consecutive
// failures: lo × 2^(n-1), capped at hi, times a factor u in [0.5, 1.5) so
// hosts that failed together do not come back together, capped at hi
// again. u is a uniform random number in [0, 1).
func backoff(n int, lo, hi time.Duration, u float64) time.Duration {
	if n < 1 {
		return 0
	}
	d := lo
	for i := 1; i < min(n, backoffDoublings+1) && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return min(time.Duration(float64(d)*(0.5+u)), hi)
}

// scaled applies the run's back-off scale and cap to one of the real
// client's delay bounds.
func (o Options) scaled(d time.Duration) time.Duration {
	s := time.Duration(float64(d) * o.BackoffScale)
	if o.BackoffMax > 0 {
		s = min(s, o.BackoffMax)
	}
	return s
}

// policyConfig is the clientpolicy configuration of a host whose task
// takes computeTime seconds. The real client's periods are a day and an
// hour; a simulated host working through tasks of a second scales them to
// its task length, so it buffers BufferPerCPU to 2 × BufferPerCPU tasks per
// CPU and reschedules every ten tasks' time, unless the options say
// otherwise.
func (o Options) policyConfig(computeTime float64) clientpolicy.Config {
	connect := o.ConnectPeriod.Seconds()
	if connect <= 0 {
		connect = float64(o.BufferPerCPU) * computeTime
	}
	sched := o.SchedPeriod.Seconds()
	if sched <= 0 {
		sched = computeTime
	}
	reportAfter := clientpolicy.ReportImmediately
	if o.ReportAfter > 0 {
		reportAfter = o.ReportAfter.Seconds()
	}
	return clientpolicy.Config{
		Strategy:            o.Strategy,
		RuntimeStat:         o.RuntimeStat,
		ConnectPeriod:       connect,
		SchedPeriod:         sched,
		RPCBackoffMin:       o.scaled(rpcBackoffMin).Seconds(),
		RPCBackoffMax:       o.scaled(rpcBackoffMax).Seconds(),
		WorkFetchBackoffMin: o.scaled(workFetchBackoffMin).Seconds(),
		WorkFetchBackoffMax: o.scaled(workFetchBackoffMax).Seconds(),
		ErrorBackoffMin:     o.scaled(taskErrorBackoffMin).Seconds(),
		ErrorBackoffMax:     o.scaled(taskErrorBackoffMax).Seconds(),
		ReportAfter:         reportAfter,
		// A finished task whose deadline is within one connection period
		// is reported at once rather than risk missing it.
		ReportMargin: connect,
	}
}
