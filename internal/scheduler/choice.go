package scheduler

import (
	"errors"
	"slices"

	"github.com/taskserver/taskserver/internal/appversion"
	"github.com/taskserver/taskserver/internal/hostav"
	"github.com/taskserver/taskserver/internal/planclass"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
)

// exploreProbability is the chance, per request, app and resource, that a
// version the host has returned too few valid results with
// (hostav.MinSamples) is sent instead of the fastest measured one: every
// version gets measured on every host, so a faster build is found, while
// most work goes to the best known one.
const exploreProbability = 0.1

// version is the app version chosen to run a job on a host, with what a
// task of it uses there and how fast it runs.
type version struct {
	app        row.App
	av         row.AppVersion // ID 0 for an anonymous-platform client's own build
	platform   string         // the name sent in <result><platform>
	anonymous  bool
	versionNum int
	planClass  string
	// files are the version's files to send with it (none for an
	// anonymous-platform client or a version without files).
	files []appversion.File
	// cmdline is the version's command-line arguments followed by those
	// its plan class adds (none for an anonymous-platform client: its
	// app_info.xml has its own).
	cmdline string
	// rsc is the resource a task runs on: an index into choice.rsc, 0 for
	// the CPU; rscName its name.
	rsc     int
	rscName string
	// avgNCPUs and maxNCPUs are the CPUs a task uses on average and at
	// most; gpuUsage the instances of its coprocessor (0.5: two tasks
	// share one GPU); memBytes the memory a task uses when its plan class
	// says (0: the job's rsc_memory_bound).
	avgNCPUs, maxNCPUs, gpuUsage, memBytes float64
	// flops is the version's processing rate on this host: runtimes are
	// estimated as rsc_fpops_est / flops, and the client is sent it so
	// that its own estimates agree.
	flops float64
	// samples is the valid results the host has returned with the
	// version (host_app_version.et_n); source where flops came from.
	samples int
	source  hostav.Source
	// rank is the preference of the version's platform for the host,
	// lower first.
	rank int
	// qi indexes the version's jobs left today in choice.quota (and the
	// walk's count of them, hostQueue.left); -1 when it has no quota.
	qi int
	// left is the jobs of the version the host may still get today.
	left int
}

// resource is the name of the resource a task of v runs on.
func (v *version) resource() string { return cmpOrStr(v.rscName, protocol.ResourceCPU) }

// usage is how many instances of its resource a task of v occupies.
func (v *version) usage() float64 {
	if v.rsc == 0 {
		return v.avgNCPUs
	}
	return v.gpuUsage
}

// faster orders versions for one resource: the higher rate, then the
// higher version number, then the preferred platform.
func faster(a, b *version) bool {
	switch {
	case a.flops != b.flops:
		return a.flops > b.flops
	case a.versionNum != b.versionNum:
		return a.versionNum > b.versionNum
	}
	return a.rank < b.rank
}

// choice is one request's decision of which version runs each app on the
// host, made once per request: every version of the host's platforms that
// its plan class accepts is a candidate, rated on this host; per app and
// resource the fastest is chosen (now and then an unmeasured one).
type choice struct {
	// rsc are the host's resources: the CPU, then its coprocessors in
	// protocol.Coprocs.Resources' order.
	rsc []protocol.Coproc
	// byApp holds, per app, the chosen version of each resource that has
	// one, fastest first, then the other candidates of each resource,
	// fastest first (fallbacks when a chosen one cannot take a job).
	byApp map[int64][]version
	// byAV are the candidates by app version id: a resend goes out with
	// the version it was sent with.
	byAV map[int64]version
	// own are, for a client on the anonymous platform, its builds by app.
	own map[int64][]version
	// why says, per app the host has no version of, why, when it is not
	// the platform: a plan class refused it (reasonPlanClass) or it is in
	// beta (reasonBeta).
	why map[int64]string
	// refusals are the plan-class rules that refused a version, per app
	// name, for taskctl host explain.
	refusals map[string][]string
	// hasApps says, per resource, whether some app has a version for it.
	hasApps []bool
	// quota are the jobs each chosen version may still go out today
	// (version.qi), hostav.NoLimit without a daily quota.
	quota []int

	// What evaluate needs, for a resend's version that is not a candidate.
	cat   *catalog
	plans *planclass.Specs
	ph    planclass.Host
	hav   map[int64]row.HostAppVersion
	bench float64
	p     choiceParams
}

// choiceParams are the inputs of a choice beyond the request.
type choiceParams struct {
	plans *planclass.Specs
	// havs are what the host has shown of each version it ran.
	havs []row.HostAppVersion
	// beta says the volunteer runs beta apps and versions.
	beta bool
	// rand draws exploration, uniform in [0, 1).
	rand func() float64
	// quota is the project's daily quota per instance (0: none), gpuQuota
	// its multiplier for a GPU (0: 1), day today (hostav.Day).
	quota, gpuQuota int
	day             int64
}

// resources lists the host's resources, the CPU first; a coprocessor whose
// type repeats (two "other" declarations) counts once. A request without
// <coprocs> has those stored from an earlier one (as planHost has them),
// asked no work.
func resources(h row.Host, req *protocol.SchedulerRequest) []protocol.Coproc {
	out := []protocol.Coproc{{Type: protocol.ResourceCPU, Count: max(h.PNCPUs, 1), PeakFlops: h.PFpops,
		CoprocRequest: protocol.CoprocRequest{ReqSecs: req.CPUReqSecs, ReqInstances: req.CPUReqInstances,
			EstimatedDelay: req.EstimatedDelay}}}
	cs := req.Coprocs.Resources()
	if req.Coprocs == nil && h.Coprocs != "" {
		cs, _ = protocol.DecodeCoprocs(h.Coprocs)
		for i := range cs {
			cs[i].CoprocRequest = protocol.CoprocRequest{}
		}
	}
	for _, c := range cs {
		if c.Type == protocol.ResourceCPU || slices.ContainsFunc(out, func(o protocol.Coproc) bool { return o.Type == c.Type }) {
			continue
		}
		out = append(out, c)
	}
	return out
}

// rscIndex is resource name's index in rsc, -1 if the host has none.
func rscIndex(rsc []protocol.Coproc, name string) int {
	if name == "" {
		return 0
	}
	for i := range rsc {
		if rsc[i].Type == name {
			return i
		}
	}
	return -1
}

// choose decides, for the host and request, the version of each app per
// resource.
func (c *catalog) choose(req *protocol.SchedulerRequest, h row.Host, p choiceParams) *choice {
	ch := &choice{rsc: resources(h, req), byApp: map[int64][]version{}, byAV: map[int64]version{},
		why: map[int64]string{}, cat: c, plans: p.plans, bench: h.PFpops, p: p}
	if !finitePositive(ch.bench) {
		ch.bench = defaultFlops
	}
	ch.hasApps = make([]bool, len(ch.rsc))
	if len(p.havs) > 0 {
		ch.hav = make(map[int64]row.HostAppVersion, len(p.havs))
		for _, st := range p.havs {
			ch.hav[st.AppVersionID] = st
		}
	}
	if p.rand == nil {
		p.rand = func() float64 { return 1 }
	}
	var cands []version
	if req.PlatformName == anonymousPlatform {
		ch.own = map[int64][]version{}
		for _, v := range ch.anonymous(c, req) {
			ch.own[v.app.ID] = append(ch.own[v.app.ID], v)
		}
		for _, vs := range ch.own {
			ch.pick(vs, p.rand)
		}
		return ch
	}
	names := []string{req.PlatformName}
	for _, alt := range req.AltPlatforms {
		names = append(names, alt.Name)
	}
	rank := map[int64]int{} // platform id → preference, lower is better
	for i, n := range names {
		if pl, ok := c.platformByName[n]; ok {
			if _, seen := rank[pl.ID]; !seen {
				rank[pl.ID] = i
			}
		}
	}
	if len(rank) == 0 {
		return ch
	}
	ch.ph = planHost(h, req)
	for appID, vs := range c.versionsByApp {
		a := c.appByID[appID]
		cands = cands[:0]
		for _, av := range vs {
			r, ok := rank[av.PlatformID]
			if !ok {
				continue
			}
			if (a.Beta || av.Beta) && !p.beta {
				ch.why[appID] = cmpOrStr(ch.why[appID], reasonBeta)
				continue
			}
			v, err := ch.evaluate(av)
			if err == nil && v.left <= 0 {
				// Out of quota today: resends still go out with it.
				ch.byAV[av.ID] = v
				ch.why[appID] = reasonDailyQuota
				continue
			}
			if err != nil {
				ch.why[appID] = reasonPlanClass
				var ref *planclass.Refusal
				rule := err.Error()
				if errors.As(err, &ref) {
					rule = "<" + ref.Rule + ">: " + ref.Detail
				}
				if ch.refusals == nil {
					ch.refusals = map[string][]string{}
				}
				ch.refusals[a.Name] = append(ch.refusals[a.Name], av.PlanClass+": "+rule)
				continue
			}
			v.rank = r
			cands = append(cands, v)
		}
		if len(cands) > 0 {
			delete(ch.why, appID)
		}
		ch.pick(cands, p.rand)
	}
	return ch
}

// cmpOrStr is s, or def when s is empty.
func cmpOrStr(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

// evaluate makes the project's version av a candidate for the host: its
// plan class (none: one CPU) gives what a task uses, the host's record of
// it the rate; an error says the plan class refuses the host.
func (ch *choice) evaluate(av row.AppVersion) (version, error) {
	var u planclass.Usage
	if av.PlanClass == "" {
		u = planclass.CPUUsage(ch.ph)
	} else {
		var err error
		if u, err = ch.plans.Check(av.PlanClass, ch.ph); err != nil {
			return version{}, err
		}
	}
	r := rscIndex(ch.rsc, u.Resource)
	if u.Resource == protocol.ResourceCPU {
		r = 0
	}
	if r < 0 {
		return version{}, &planclass.Refusal{Class: av.PlanClass, Rule: "gpu_type", Detail: "the host has no " + u.Resource}
	}
	v := ch.cat.project(av)
	v.rsc, v.rscName, v.avgNCPUs, v.maxNCPUs, v.gpuUsage = r, ch.rsc[r].Type, u.AvgNCPUs, u.MaxNCPUs, u.GPUUsage
	v.memBytes = finite(u.MemBytes)
	if v.avgNCPUs <= 0 && r == 0 {
		v.avgNCPUs = 1
	}
	if r > 0 && v.gpuUsage <= 0 {
		v.gpuUsage = 1
	}
	if u.Cmdline != "" {
		if v.cmdline != "" {
			v.cmdline += " "
		}
		v.cmdline += u.Cmdline
	}
	bench := u.PeakFlops
	if !finitePositive(bench) {
		bench = ch.bench * max(v.avgNCPUs, 1)
	}
	projected := u.ProjectedFlops
	if av.PlanClass == "" {
		projected = 0 // one CPU's benchmark, not a plan class's projection
	}
	st := ch.hav[av.ID]
	v.flops, v.source = hostav.Rate(st, projected, bench)
	if !finitePositive(v.flops) {
		v.flops, v.source = bench, hostav.SourceBenchmark
	}
	v.samples = st.EtN
	v.qi, v.left = -1, ch.dailyLimit(st, r)
	return v, nil
}

// dailyLimit is how many jobs of a version whose record is st, on resource
// r, the host may still get today: the quota per instance times the CPUs,
// or the GPUs times the GPU multiplier.
func (ch *choice) dailyLimit(st row.HostAppVersion, r int) int {
	var gpus float64
	if r > 0 {
		gpus = float64(max(ch.rsc[r].Count, 1))
	}
	return hostav.DailyLimit(st, ch.p.quota, hostav.QuotaInstances(ch.rsc[0].Count, gpus, ch.p.gpuQuota), ch.p.day)
}

// anonCode is BOINC's anonymous-platform code of resource name, which keys
// a client's own build's host_app_version row; 0 for a resource without
// one (an "other" coprocessor).
func anonCode(name string) int {
	switch name {
	case protocol.ResourceCPU:
		return hostav.AnonCPU
	case protocol.ResourceNVIDIA:
		return hostav.AnonNVIDIA
	case protocol.ResourceAMD:
		return hostav.AnonAMD
	case protocol.ResourceIntel:
		return hostav.AnonIntel
	case protocol.ResourceApple:
		return hostav.AnonApple
	}
	return 0
}

// sendID is the app_version_id a send of v records: the project version's
// id, or for a client's own build its resource's negated code, as BOINC
// records it, so that the validator and error reports find the build's
// host_app_version row (hostav.Key); 0 for a resource without a code.
func (v *version) sendID(ch *choice) int64 {
	if v.anonymous {
		return -int64(v.anonResource(ch))
	}
	return v.av.ID
}

// anonResource is, for a client's own build, the code of its resource that
// a send records (decide.Send.Resource); 0 for a project version.
func (v *version) anonResource(ch *choice) int {
	if !v.anonymous || ch == nil || v.rsc >= len(ch.rsc) {
		return 0
	}
	return anonCode(ch.rsc[v.rsc].Type)
}

// anonymous makes the candidates of a client on the anonymous platform:
// the builds its app_info.xml lists, with the usage they declare (BOINC
// accepts any plan class there: the volunteer built or chose it).
func (ch *choice) anonymous(c *catalog, req *protocol.SchedulerRequest) []version {
	var out []version
	for _, cv := range req.AppVersions {
		a, ok := c.appByName[cv.AppName]
		if !ok {
			continue
		}
		v := version{app: a, platform: cv.Platform, anonymous: true, versionNum: cv.VersionNum, planClass: cv.PlanClass,
			avgNCPUs: finite(cv.AvgNCPUs), maxNCPUs: finite(cv.AvgNCPUs)}
		for _, u := range cv.Coprocs {
			if u.Count > 0 {
				v.rsc = rscIndex(ch.rsc, u.Type)
				v.gpuUsage = finite(u.Count)
				break
			}
		}
		if v.rsc < 0 {
			continue // a coprocessor the host does not have
		}
		v.rscName = ch.rsc[v.rsc].Type
		if v.avgNCPUs <= 0 && v.rsc == 0 {
			v.avgNCPUs, v.maxNCPUs = 1, 1
		}
		bench := ch.bench * max(v.avgNCPUs, 1)
		if v.rsc > 0 && finitePositive(ch.rsc[v.rsc].PeakFlops) {
			bench = ch.rsc[v.rsc].PeakFlops * v.gpuUsage
		}
		var st row.HostAppVersion
		if code := anonCode(ch.rsc[v.rsc].Type); code != 0 {
			st = ch.hav[hostav.GeneralizedID(a.ID, code)]
		}
		v.flops, v.source = hostav.Rate(st, finite(cv.Flops), bench)
		if !finitePositive(v.flops) {
			v.flops, v.source = bench, hostav.SourceBenchmark
		}
		v.samples = st.EtN
		v.qi, v.left = -1, ch.dailyLimit(st, v.rsc)
		if v.left <= 0 {
			ch.why[a.ID] = reasonDailyQuota
			continue
		}
		out = append(out, v)
	}
	return out
}

// pick chooses among one app's candidates, per resource, the fastest; when
// the fastest has been measured (hostav.MinSamples valid results) and
// others have not, one of those now and then (exploreProbability, one draw
// of rand per resource).
func (ch *choice) pick(cands []version, rand func() float64) {
	if len(cands) == 0 {
		return
	}
	appID := cands[0].app.ID
	// fallbacks are the other candidates of each resource: a job goes out
	// with one of them when the chosen version cannot take it (its daily
	// quota ran out during the request, or its plan class's memory does
	// not fit), as BOINC looks again when its best version's quota is
	// exceeded.
	var chosen, fallbacks []version
	for r := range ch.rsc {
		best, unmeasured := -1, 0
		for i := range cands {
			v := &cands[i]
			if v.rsc != r {
				continue
			}
			if v.av.ID != 0 {
				ch.byAV[v.av.ID] = *v
			}
			if v.samples < hostav.MinSamples {
				unmeasured++
			}
			if best < 0 || faster(v, &cands[best]) {
				best = i
			}
		}
		if best < 0 {
			continue
		}
		ch.hasApps[r] = true
		if cands[best].samples >= hostav.MinSamples && unmeasured > 0 {
			if u := rand(); u < exploreProbability {
				k := min(int(u/exploreProbability*float64(unmeasured)), unmeasured-1)
				for i := range cands {
					if cands[i].rsc == r && cands[i].samples < hostav.MinSamples {
						if k == 0 {
							best = i
							break
						}
						k--
					}
				}
			}
		}
		v := cands[best]
		v.qi = len(ch.quota)
		ch.quota = append(ch.quota, v.left)
		chosen = append(chosen, v)
		for i, o := range cands {
			if o.rsc == r && i != best {
				o.qi = len(ch.quota)
				ch.quota = append(ch.quota, o.left)
				fallbacks = append(fallbacks, o)
			}
		}
	}
	byRate := func(a, b version) int {
		if faster(&a, &b) {
			return -1
		}
		if faster(&b, &a) {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(chosen, byRate)
	slices.SortStableFunc(fallbacks, byRate)
	ch.byApp[appID] = append(chosen, fallbacks...)
}

// forResend returns the version a result in progress was sent with, so that
// a resend names the same build and is estimated with the same usage; if
// that version is gone, unreadable or now refused, the app's best one. A
// client on the anonymous platform runs only its own builds: the result is
// resent for the build of the app it lists with the version number the
// result was sent with, else for its best one, and not at all when it lists
// none (never with the project's version and files, which it would not
// run).
func (ch *choice) forResend(appID, avID int64, avNum int) (version, bool) {
	if ch.own != nil {
		for _, o := range ch.own[appID] {
			if o.versionNum == avNum {
				return o, true
			}
		}
		if vs := ch.byApp[appID]; len(vs) > 0 {
			return vs[0], true
		}
		return version{}, false
	}
	if v, ok := ch.byAV[avID]; ok && avID != 0 {
		return v, true
	}
	if avID != 0 && ch.cat != nil {
		if av, ok := ch.cat.versionByID[avID]; ok && ch.cat.unreadable[avID] == nil && ch.cat.unknownPlan[avID] == "" {
			if v, err := ch.evaluate(av); err == nil {
				return v, true
			}
		}
	}
	if vs := ch.byApp[appID]; len(vs) > 0 {
		return vs[0], true
	}
	return version{}, false
}

// held is the version a task the host holds runs with, for its place in
// the host's queues and limits: the version it was sent with as it runs on
// the host, else (gone, or refused now) one CPU at the host's benchmark.
func (ch *choice) held(avID int64) *version {
	if ch == nil {
		return &version{avgNCPUs: 1, maxNCPUs: 1, flops: defaultFlops}
	}
	if v, ok := ch.byAV[avID]; ok {
		return &v
	}
	if avID < 0 {
		// A client's own build, by its resource's code (sendID).
		for _, vs := range ch.own {
			for i := range vs {
				if -int64(anonCode(vs[i].resource())) == avID {
					return &vs[i]
				}
			}
		}
	}
	// An older version, or one now out of quota: as it runs on the host.
	if av, ok := ch.cat.versionByID[avID]; ok && ch.ph.NCPUs > 0 && ch.cat.unreadable[avID] == nil {
		if v, err := ch.evaluate(av); err == nil {
			ch.byAV[avID] = v
			return &v
		}
	}
	return &version{avgNCPUs: 1, maxNCPUs: 1, flops: ch.bench}
}

// noRscApps names the host's resources that no app has a version for, so
// that the client stops asking for work for them; none when that would be
// every resource the host has (the client would never ask again, as
// BOINC's scheduler also guards).
func (ch *choice) noRscApps() []string {
	if !slices.Contains(ch.hasApps, true) {
		return nil
	}
	var out []string
	for r, ok := range ch.hasApps {
		if !ok {
			out = append(out, ch.rsc[r].Type)
		}
	}
	return out
}

// resources are the host's resources as ch has them, or, with no choice
// (the cache could not be read), as the request says.
func (ch *choice) resources(h row.Host, req *protocol.SchedulerRequest) []protocol.Coproc {
	if ch != nil {
		return ch.rsc
	}
	return resources(h, req)
}

// noVersion is why no app has a version for the host: a plan class
// refused it, it is in beta, or none is for its platforms.
func (ch *choice) noVersion() string {
	why := reasonPlatform
	for _, r := range ch.why {
		if r == reasonPlanClass {
			return r
		}
		why = r
	}
	return why
}
