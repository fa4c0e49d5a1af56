package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/taskserver/taskserver/internal/planclass"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/shmcache"
	"github.com/taskserver/taskserver/internal/store"
)

// Policy is the part of Config the send decision depends on, so a dry run
// can be configured like the scheduler it explains. Zero fields get the
// flags' defaults.
type Policy struct {
	// MaxResultsPerRPC bounds new results per reply; default 10.
	MaxResultsPerRPC int
	// MaxInProgressPerCPU bounds the results a host holds, per CPU;
	// default 4.
	MaxInProgressPerCPU int
	// ARTrustValid is the valid results in a row that make a host trusted;
	// default 10.
	ARTrustValid int
	// QuarantineStreak is the error streak that quarantines a host; 0 (or
	// less) turns quarantine off.
	QuarantineStreak int
	// PlanClasses are the project's plan classes; nil defines none.
	PlanClasses *planclass.Specs
	// DailyResultQuota is the daily quota per instance (0: none), and
	// GPUQuotaMultiplier its multiplier for a GPU (0: 1).
	DailyResultQuota, GPUQuotaMultiplier int
	// MaxInProgressPerGPU bounds the tasks a host holds per GPU of a
	// type; 0 is no limit.
	MaxInProgressPerGPU int
	// AppMaxInProgress bounds the tasks of an app (by name) a host holds.
	AppMaxInProgress map[string]int
}

// setPolicy puts p, with the flags' defaults for its zero fields, into o:
// Explain's dry run decides as the scheduler it explains.
func (o *Config) setPolicy(p Policy) {
	o.MaxResultsPerRPC = cmpOr(p.MaxResultsPerRPC, 10)
	o.MaxInProgressPerCPU = cmpOr(p.MaxInProgressPerCPU, 4)
	o.ARTrustValid = cmpOr(p.ARTrustValid, 10)
	o.QuarantineStreak = max(p.QuarantineStreak, 0)
	o.PlanClasses = p.PlanClasses
	o.DailyResultQuota = max(p.DailyResultQuota, 0)
	o.GPUQuotaMultiplier = max(p.GPUQuotaMultiplier, 0)
	o.MaxInProgressPerGPU = max(p.MaxInProgressPerGPU, 0)
	o.AppMaxInProgress = p.AppMaxInProgress
}

// cmpOr is v if positive, else def.
func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// ExplainStore is what Explain reads; *store.Store is one. Explain writes
// nothing.
type ExplainStore interface {
	AppList(ctx context.Context) ([]row.App, error)
	AppVersionList(ctx context.Context) ([]row.AppVersion, error)
	HostGet(ctx context.Context, id int64) (row.Host, error)
	HostAppVersionListByHost(ctx context.Context, hostID int64) ([]row.HostAppVersion, error)
	HostPlatformIDs(ctx context.Context, hostID int64) ([]int64, error)
	PlatformList(ctx context.Context) ([]row.Platform, error)
	ResultListHostInProgress(ctx context.Context, hostID int64, limit int) ([]store.HostResult, error)
	ResultListUnsentByPriority(ctx context.Context, p store.FeederListParams) ([]store.UnsentResult, error)
	ResultListUnsentForCache(ctx context.Context, p store.FeederListParams) ([]store.UnsentResult, error)
	WorkunitListByIDs(ctx context.Context, ids []int64) ([]row.Workunit, error)
	WorkunitUserListSent(ctx context.Context, userID int64, wuIDs []int64) ([]int64, error)
	UserGet(ctx context.Context, id int64) (row.User, error)
}

// CacheReader is the read-only part of the feeder's cache: Explain never
// claims a slot.
type CacheReader interface {
	NSlots() int
	Peek(i int) (shmcache.Entry, bool)
	Tables() (shmcache.Tables, uint64, error)
}

// ExplainParams says which host to explain, against which work and with
// which request.
type ExplainParams struct {
	HostID int64
	// Platforms are the platform names the host's client reports, primary
	// first. Empty takes those of the app versions the host has been sent
	// (the host row does not record them).
	Platforms []string
	// WorkSeconds is the work the request asks for (work_req_seconds); 0
	// means one day of each of the host's CPUs.
	WorkSeconds float64
	// Instances is the request's cpu_req_instances; 0 means the host's
	// CPUs.
	Instances float64
	// Cache, if set, gives the candidates (its present slots, in slot
	// order) and the static tables. Nil reads them from the database: the
	// unsent instances in the feeder's order (by priority, then by id), at
	// most Candidates of them.
	Cache CacheReader
	// Candidates bounds the instances read from the database; default 100.
	Candidates int
	// Now is the Unix time the decision is made at.
	Now    int64
	Policy Policy
}

// Verdicts of a candidate.
const (
	VerdictSend       = "send"
	VerdictReject     = "reject"
	VerdictNotReached = "not_reached" // the walk stopped before it
)

// Verdict is the send decision on one candidate.
type Verdict struct {
	// Slot is the cache slot, or the position in the feeder's order when
	// the candidates came from the database.
	Slot       int    `json:"slot"`
	ResultID   int64  `json:"result_id"`
	WorkunitID int64  `json:"workunit_id"`
	App        string `json:"app"`
	Verdict    string `json:"verdict"`
	// Reason is why a candidate was rejected or not reached ("covered":
	// the request was covered first); empty for a send.
	Reason string `json:"reason,omitempty"`
}

// Explanation is the outcome of a dry run of the send decision.
type Explanation struct {
	HostID      int64    `json:"host_id"`
	UserID      int64    `json:"user_id"`
	Platforms   []string `json:"platforms"`
	WorkSeconds float64  `json:"work_seconds"`
	Instances   float64  `json:"instances"`
	// Source is where the candidates came from: "cache" or "database".
	Source      string `json:"source"`
	InProgress  int    `json:"in_progress"`
	Limit       int    `json:"in_progress_limit"`
	Quarantined bool   `json:"quarantined"`
	// WouldSend is how many candidates the scheduler would send.
	WouldSend int `json:"would_send"`
	// Short is why it would send less than asked (a reason of
	// send_shortfall_total), empty if the request would be covered;
	// ShortText says it in words.
	Short     string `json:"short,omitempty"`
	ShortText string `json:"short_text,omitempty"`
	// Rejected counts the rejected candidates by reason.
	Rejected map[string]int `json:"rejected"`
	// PlanClassRefusals are, per app, the plan classes that refuse the
	// host and the rule that fails ("cuda: driver version 52000 < 53000").
	PlanClassRefusals map[string][]string `json:"plan_class_refusals,omitempty"`
	Candidates        []Verdict           `json:"candidates"`
}

// ErrPlatformUnknown means the host has never been sent work, so its
// platforms are not known: name them.
var ErrPlatformUnknown = errors.New("the host's platforms are not recorded (it was never sent work): name them")

// defaultExplainCandidates is ExplainParams.Candidates' default.
const defaultExplainCandidates = 100

// Explain answers "why does this host get nothing?": it runs the
// scheduler's send decision (the same walk as a request, in its dry mode)
// for the host as the database describes it, against the cache's
// candidates or the database's unsent instances, and returns the verdict on
// each candidate. It claims no slot and writes nothing. The jobs already
// sent to the host's user, which a request learns only when its send is
// refused, and the jobs' current homogeneous-redundancy class are read
// first, so that those verdicts come out as the send would.
func Explain(ctx context.Context, st ExplainStore, p ExplainParams) (Explanation, error) {
	h, err := st.HostGet(ctx, p.HostID)
	if err != nil {
		return Explanation{}, fmt.Errorf("explain host %d: %w", p.HostID, err)
	}
	held, err := st.ResultListHostInProgress(ctx, h.ID, maxInProgressListed)
	if err != nil {
		return Explanation{}, err
	}
	havs, err := st.HostAppVersionListByHost(ctx, h.ID)
	if err != nil {
		return Explanation{}, err
	}
	ex := Explanation{HostID: h.ID, UserID: h.UserID, Rejected: map[string]int{}, Candidates: []Verdict{}}

	var (
		tables  shmcache.Tables
		entries []shmcache.Entry
		slots   []int
	)
	if p.Cache != nil {
		ex.Source = "cache"
		if tables, _, err = p.Cache.Tables(); err != nil {
			return ex, fmt.Errorf("read the cache's tables: %w", err)
		}
		for i := range p.Cache.NSlots() {
			if e, ok := p.Cache.Peek(i); ok {
				entries, slots = append(entries, e), append(slots, i)
			}
		}
	} else {
		ex.Source = "database"
		if tables, err = tablesFrom(ctx, st); err != nil {
			return ex, err
		}
		if entries, err = unsentInFeederOrder(ctx, st, cmpOr(p.Candidates, defaultExplainCandidates)); err != nil {
			return ex, err
		}
		for i := range entries {
			slots = append(slots, i)
		}
	}

	platforms := p.Platforms
	if len(platforms) == 0 {
		if platforms, err = hostPlatforms(ctx, st, h.ID, tables.Platforms); err != nil {
			return ex, err
		}
	}
	ex.Platforms = platforms

	var wuIDs []int64
	for _, e := range entries {
		wuIDs = append(wuIDs, e.WorkunitID)
	}
	slices.Sort(wuIDs)
	wuIDs = slices.Compact(wuIDs)
	sentToUser, err := st.WorkunitUserListSent(ctx, h.UserID, wuIDs)
	if err != nil {
		return ex, err
	}
	if p.Cache != nil {
		// The cache keeps the class a job had when it was cached; a send
		// would find the one it has now.
		wus, err := st.WorkunitListByIDs(ctx, wuIDs)
		if err != nil {
			return ex, err
		}
		class := make(map[int64]int, len(wus))
		for _, wu := range wus {
			class[wu.ID] = wu.HRClass
		}
		for i, e := range entries {
			if e.HRClass == 0 && class[e.WorkunitID] != 0 {
				entries[i].HRClass = int32(class[e.WorkunitID])
			}
		}
	}

	ncpus := float64(max(h.PNCPUs, 1))
	ex.WorkSeconds, ex.Instances = p.WorkSeconds, p.Instances
	if !(ex.WorkSeconds > 0) || math.IsInf(ex.WorkSeconds, 0) {
		ex.WorkSeconds = 86400 * ncpus
	}
	if !(ex.Instances > 0) || math.IsInf(ex.Instances, 0) {
		ex.Instances = ncpus
	}
	req := &protocol.SchedulerRequest{PlatformName: platforms[0], WorkReqSeconds: ex.WorkSeconds,
		CPUReqSecs: ex.WorkSeconds, CPUReqInstances: ex.Instances}
	for _, name := range platforms[1:] {
		req.AltPlatforms = append(req.AltPlatforms, protocol.AltPlatform{Name: name})
	}

	// The volunteer's preferences as the scheduler reads them.
	u, err := st.UserGet(ctx, h.UserID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return ex, err
	}
	u.ID = h.UserID
	// No exploration (nil Rand): the explanation shows the fastest
	// versions. The host's GPUs, as its last request listed them, ask a
	// day of work each too.
	d := DecideSends(DecideInput{Now: p.Now, Tables: tables, Entries: entries, Host: h, HostAppVersions: havs,
		Held: held, Request: req, User: u, SentToUser: sentToUser, AskStoredGPUs: true, Policy: p.Policy})
	ex.PlanClassRefusals = d.PlanClassRefusals
	appName := make(map[int64]string, len(tables.Apps))
	for _, a := range tables.Apps {
		appName[a.ID] = a.Name
	}
	ex.InProgress, ex.Limit, ex.Quarantined = len(held), d.Limit, d.Quarantined
	ex.WouldSend, ex.Short, ex.ShortText = len(d.Sends), d.Short, reasonText[d.Short]
	notReached := d.Short
	if d.Short == "" {
		notReached = "covered"
	}
	for i, e := range entries {
		v := Verdict{Slot: slots[i], ResultID: e.ResultID, WorkunitID: e.WorkunitID, App: appName[e.AppID]}
		switch {
		case d.Sent[i]:
			v.Verdict = VerdictSend
		case d.Rejected[i] != "":
			v.Verdict, v.Reason = VerdictReject, d.Rejected[i]
		default:
			v.Verdict, v.Reason = VerdictNotReached, notReached
		}
		if v.Verdict == VerdictReject {
			ex.Rejected[v.Reason]++
		}
		ex.Candidates = append(ex.Candidates, v)
	}
	return ex, nil
}

// tablesFrom reads the static tables as the feeder publishes them.
func tablesFrom(ctx context.Context, st ExplainStore) (shmcache.Tables, error) {
	ps, err := st.PlatformList(ctx)
	if err != nil {
		return shmcache.Tables{}, err
	}
	as, err := st.AppList(ctx)
	if err != nil {
		return shmcache.Tables{}, err
	}
	vs, err := st.AppVersionList(ctx)
	if err != nil {
		return shmcache.Tables{}, err
	}
	return shmcache.Tables{Platforms: ps, Apps: as, AppVersions: vs}, nil
}

// unsentInFeederOrder returns up to n unsent instances in the order the
// feeder caches them: by priority first, then by id.
func unsentInFeederOrder(ctx context.Context, st ExplainStore, n int) ([]shmcache.Entry, error) {
	urgent, err := st.ResultListUnsentByPriority(ctx, store.FeederListParams{Mod: 1, Limit: n})
	if err != nil {
		return nil, err
	}
	rest, err := st.ResultListUnsentForCache(ctx, store.FeederListParams{Mod: 1, Limit: n})
	if err != nil {
		return nil, err
	}
	var out []shmcache.Entry
	seen := map[int64]bool{}
	for _, r := range append(urgent, rest...) {
		if len(out) == n || seen[r.ID] {
			continue
		}
		seen[r.ID] = true
		out = append(out, shmcache.Entry{ResultID: r.ID, WorkunitID: r.WorkunitID, AppID: r.AppID,
			RscFpopsEst: r.RscFpopsEst, RscMemoryBound: r.RscMemoryBound, RscDiskBound: r.RscDiskBound,
			DelayBound: r.DelayBound, Priority: r.Priority, HRClass: r.HRClass, Flags: r.SendFlags})
	}
	return out, nil
}

// hostPlatforms names the platforms of the app versions host hostID has
// been sent.
func hostPlatforms(ctx context.Context, st ExplainStore, hostID int64, ps []row.Platform) ([]string, error) {
	ids, err := st.HostPlatformIDs(ctx, hostID)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range ps {
		if slices.Contains(ids, p.ID) {
			names = append(names, p.Name)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("explain host %d: %w", hostID, ErrPlatformUnknown)
	}
	return names, nil
}

// entryList is a snapshot of candidates seen as a cache that a dry run
// walks; it cannot be claimed from.
type entryList []shmcache.Entry

func (l entryList) NSlots() int { return len(l) }

func (l entryList) Peek(i int) (shmcache.Entry, bool) {
	if i < 0 || i >= len(l) {
		return shmcache.Entry{}, false
	}
	return l[i], true
}

func (entryList) Claim(int, int32, int64) (shmcache.Claim, bool) { return shmcache.Claim{}, false }
func (entryList) Release(shmcache.Claim) bool                    { return false }
func (entryList) Unclaim(shmcache.Claim) bool                    { return false }
func (entryList) Tables() (shmcache.Tables, uint64, error) {
	return shmcache.Tables{}, 0, errors.New("a dry run's candidates have no tables")
}
