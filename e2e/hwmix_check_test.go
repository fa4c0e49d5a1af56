package e2e

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/taskserver/taskserver/internal/hostav"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/simclient"
	"github.com/taskserver/taskserver/internal/state"
)

// hwHost is what the server recorded of a host: its CPUs, benchmark and
// GPUs (host.coprocs).
type hwHost struct {
	ID     int64
	NCPUs  int
	PFpops float64
	GPUs   map[string]int // resource → instances
}

// hwResult is one instance that was sent.
type hwResult struct {
	ID, HostID, AVID int64
	Sent, Received   int64
	Outcome          state.Outcome
	Validate         state.ValidateState
	Elapsed          float64
	FlopsEst         float64 // result.flops_estimate
	FpopsEst         float64 // the job's rsc_fpops_est
}

// hwData is the final state the checks read.
type hwData struct {
	Hosts     map[int64]hwHost
	PlanClass map[int64]string // app version id → plan class
	Results   []hwResult       // sent instances, in send order
}

func hwCollect(ctx context.Context, lp *lcProject) (hwData, error) {
	d := hwData{Hosts: map[int64]hwHost{}, PlanClass: map[int64]string{}}
	rows, err := lp.db.QueryContext(ctx, `SELECT id, p_ncpus, p_fpops, COALESCE(coprocs, '') FROM host`)
	if err != nil {
		return d, err
	}
	for rows.Next() {
		var h hwHost
		var coprocs string
		if err := rows.Scan(&h.ID, &h.NCPUs, &h.PFpops, &coprocs); err != nil {
			rows.Close()
			return d, err
		}
		cs, err := protocol.DecodeCoprocs(coprocs)
		if err != nil {
			rows.Close()
			return d, fmt.Errorf("host %d coprocs %q: %w", h.ID, coprocs, err)
		}
		h.GPUs = map[string]int{}
		for _, c := range cs {
			h.GPUs[c.Type] += int(c.Count)
		}
		d.Hosts[h.ID] = h
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return d, err
	}
	rows, err = lp.db.QueryContext(ctx, `SELECT id, plan_class FROM app_version`)
	if err != nil {
		return d, err
	}
	for rows.Next() {
		var id int64
		var pc string
		if err := rows.Scan(&id, &pc); err != nil {
			rows.Close()
			return d, err
		}
		d.PlanClass[id] = pc
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return d, err
	}
	rows, err = lp.db.QueryContext(ctx, `SELECT r.id, r.hostid, r.app_version_id, r.sent_time, r.received_time, r.outcome,
r.validate_state, r.elapsed_time, r.flops_estimate, w.rsc_fpops_est
FROM result r JOIN workunit w ON w.id = r.workunitid WHERE r.sent_time > 0 AND r.hostid > 0 ORDER BY r.sent_time, r.id`)
	if err != nil {
		return d, err
	}
	defer rows.Close()
	for rows.Next() {
		var r hwResult
		if err := rows.Scan(&r.ID, &r.HostID, &r.AVID, &r.Sent, &r.Received, &r.Outcome, &r.Validate, &r.Elapsed,
			&r.FlopsEst, &r.FpopsEst); err != nil {
			return d, err
		}
		d.Results = append(d.Results, r)
	}
	return d, rows.Err()
}

// hwResource is the resource a version of plan class pc runs on.
func hwResource(pc string) string {
	switch pc {
	case "cuda":
		return protocol.ResourceNVIDIA
	case "opencl_amd":
		return protocol.ResourceAMD
	}
	return protocol.ResourceCPU
}

// canRun says why host h cannot run a version of plan class pc ("" if it
// can).
func (h hwHost) canRun(pc string) string {
	switch pc {
	case "":
		return ""
	case "mt":
		if h.NCPUs < hwMTMinCPUs {
			return fmt.Sprintf("mt version on a host of %d CPUs", h.NCPUs)
		}
		return ""
	}
	if r := hwResource(pc); h.GPUs[r] <= 0 {
		return fmt.Sprintf("%s version on a host without a %s GPU", pc, r)
	}
	return ""
}

// kind names the host's hardware for the summary.
func (h hwHost) kind() string {
	var parts []string
	if h.NCPUs >= hwMTMinCPUs {
		parts = append(parts, "multi-core")
	}
	for _, r := range []string{protocol.ResourceNVIDIA, protocol.ResourceAMD} {
		if h.GPUs[r] > 0 {
			parts = append(parts, r)
		}
	}
	if len(parts) == 0 {
		return "cpu-only"
	}
	return strings.Join(parts, "+")
}

// hwSummary is what the run showed.
type hwSummary struct {
	Sent, Valid int
	HostKinds   map[string]int
	ByClass     map[string]int // sent instances per plan class ("" plain)
	Misplaced   []string
	// Compared counts host-resources where two or more versions were
	// measured; Later the sends on them once they were, OnBest those that
	// used the fastest measured version; Wrong describes hosts that did
	// not converge.
	Compared, Later, OnBest int
	Wrong                   []string
	// EstN results sent once their host-version was measured; EstErr and
	// NaiveErr the median relative errors of rsc_fpops_est/flops_estimate
	// and of rsc_fpops_est/p_fpops against their elapsed times.
	EstN             int
	EstErr, NaiveErr float64
	// ByClassEst are the same per plan class: the overall median may be
	// decided by the most numerous class, so each is judged too.
	ByClassEst map[string]hwEst
	Report     simclient.HardwareStats
	Details    []string
}

// hwEst is the estimates of one plan class's results.
type hwEst struct {
	N          int
	Err, Naive float64
}

func (s hwSummary) String() string {
	return fmt.Sprintf("%d sent, %d valid; hosts %v; sent by plan class %v; %d misplaced; %d host-resources compared, "+
		"%d of %d later sends on the fastest version; estimates after %d results: median error %.1f%% (naive %.1f%%); "+
		"GPU busy %.2f, GPU hosts' CPUs busy %.2f, all CPUs busy %.2f, %d GPU tasks, %d mt tasks, %d for a missing device",
		s.Sent, s.Valid, s.HostKinds, s.ByClass, len(s.Misplaced), s.Compared, s.OnBest, s.Later, s.EstN,
		100*s.EstErr, 100*s.NaiveErr, s.Report.GPUBusyFrac, s.Report.GPUHostCPUBusyFrac, s.Report.CPUBusyFrac,
		s.Report.GPUTasks, s.Report.MTTasks, s.Report.NoDevice)
}

// Broken lists the promises the run did not keep, and the run's own
// shortfalls (a host kind or version missing, too few results to judge).
func (s hwSummary) Broken() []string {
	var out []string
	for i, m := range s.Misplaced {
		if i == 5 {
			out = append(out, fmt.Sprintf("... %d misplaced tasks in all", len(s.Misplaced)))
			break
		}
		out = append(out, "misplaced: "+m)
	}
	if s.Report.NoDevice > 0 {
		out = append(out, fmt.Sprintf("the hosts got %d tasks for a coprocessor they lack", s.Report.NoDevice))
	}
	for _, k := range []string{"cpu-only", "multi-core", protocol.ResourceNVIDIA, protocol.ResourceAMD} {
		n := 0
		for kind, c := range s.HostKinds {
			if kind == k || strings.Contains(kind, k) {
				n += c
			}
		}
		if n == 0 {
			out = append(out, fmt.Sprintf("no %s host in the run (another HWMIX_SEED)", k))
		}
	}
	for _, pc := range []string{"", "mt", "cuda", "opencl_amd"} {
		if s.ByClass[pc] == 0 {
			out = append(out, fmt.Sprintf("no task of the %q version was sent", pc))
		}
	}
	if s.Report.GPUBusyFrac < hwMinGPUBusy {
		out = append(out, fmt.Sprintf("GPUs busy %.2f of the time, want at least %.2f", s.Report.GPUBusyFrac, hwMinGPUBusy))
	}
	if s.Report.GPUHostCPUBusyFrac < hwMinGPUHostCPUBusy {
		out = append(out, fmt.Sprintf("GPU hosts' CPUs busy %.2f of the time, want at least %.2f", s.Report.GPUHostCPUBusyFrac, hwMinGPUHostCPUBusy))
	}
	if s.Compared == 0 || s.Later < 10 {
		out = append(out, fmt.Sprintf("%d host-resources with two measured versions and %d sends after: too few to judge convergence", s.Compared, s.Later))
	} else if f := float64(s.OnBest) / float64(s.Later); f < hwMinOnBest {
		out = append(out, fmt.Sprintf("%d of %d sends after the versions were measured used the host's fastest (%.2f, want %.2f): %s",
			s.OnBest, s.Later, f, hwMinOnBest, strings.Join(s.Wrong, "; ")))
	}
	switch {
	case s.EstN < 50:
		out = append(out, fmt.Sprintf("%d results sent after their host-version was measured: too few to judge estimates", s.EstN))
	case !(s.EstErr <= hwMaxEstErr && s.EstErr <= s.NaiveErr/2):
		out = append(out, fmt.Sprintf("median estimate error %.1f%%, want at most %.0f%% and half the naive %.1f%%",
			100*s.EstErr, 100*hwMaxEstErr, 100*s.NaiveErr))
	}
	for _, pc := range slices.Sorted(maps.Keys(s.ByClassEst)) {
		if e := s.ByClassEst[pc]; e.N >= 20 && !(e.Err <= hwMaxEstErr) {
			out = append(out, fmt.Sprintf("median estimate error of the %q version %.1f%% over %d results, want at most %.0f%%",
				pc, 100*e.Err, e.N, 100*hwMaxEstErr))
		}
	}
	return out
}

// hostVersion keys a host's record of an app version.
type hostVersion struct{ host, av int64 }

// check computes the summary.
func (d hwData) check() hwSummary {
	s := hwSummary{HostKinds: map[string]int{}, ByClass: map[string]int{}}
	for _, h := range d.Hosts {
		s.HostKinds[h.kind()]++
	}
	// Valid results per host-version, in the order they were reported:
	// measuredAt is when the host had hostav.MinSamples of them.
	valid := map[hostVersion][]hwResult{}
	for _, r := range d.Results {
		s.Sent++
		pc := d.PlanClass[r.AVID]
		s.ByClass[pc]++
		h, ok := d.Hosts[r.HostID]
		if !ok {
			s.Misplaced = append(s.Misplaced, fmt.Sprintf("result %d on unknown host %d", r.ID, r.HostID))
			continue
		}
		if why := h.canRun(pc); why != "" {
			s.Misplaced = append(s.Misplaced, fmt.Sprintf("result %d: %s", r.ID, why))
		}
		if r.Outcome == state.OutcomeSuccess && r.Validate == state.ValidateValid && r.Elapsed > 0 {
			s.Valid++
			k := hostVersion{r.HostID, r.AVID}
			valid[k] = append(valid[k], r)
		}
	}
	measuredAt := map[hostVersion]int64{}
	rate := map[hostVersion]float64{}
	for k, rs := range valid {
		if len(rs) < hostav.MinSamples {
			continue
		}
		byReport := slices.SortedFunc(slices.Values(rs), func(a, b hwResult) int { return cmp.Compare(a.Received, b.Received) })
		measuredAt[k] = byReport[hostav.MinSamples-1].Received + hwMargin
		rates := make([]float64, len(rs))
		for i, r := range rs {
			rates[i] = r.FpopsEst / r.Elapsed
		}
		rate[k] = median(rates)
	}

	// Convergence: per host and resource with two or more measured
	// versions, the sends once all of them were measured.
	type hostRsc struct {
		host int64
		rsc  string
	}
	measured := map[hostRsc][]int64{}
	for k := range rate {
		hr := hostRsc{k.host, hwResource(d.PlanClass[k.av])}
		measured[hr] = append(measured[hr], k.av)
	}
	for hr, avs := range measured {
		if len(avs) < 2 {
			continue
		}
		s.Compared++
		best, since := avs[0], int64(0)
		for _, av := range avs {
			k := hostVersion{hr.host, av}
			if rate[k] > rate[hostVersion{hr.host, best}] {
				best = av
			}
			since = max(since, measuredAt[k])
		}
		later, onBest := 0, 0
		for _, r := range d.Results {
			if r.HostID == hr.host && r.Sent > since && hwResource(d.PlanClass[r.AVID]) == hr.rsc {
				later++
				if r.AVID == best {
					onBest++
				}
			}
		}
		s.Later += later
		s.OnBest += onBest
		var rates []string
		for _, av := range avs {
			rates = append(rates, fmt.Sprintf("%q %.3g", d.PlanClass[av], rate[hostVersion{hr.host, av}]))
		}
		sort.Strings(rates)
		line := fmt.Sprintf("host %d (%s) %s: rates %s; %d of %d later sends on %q",
			hr.host, d.Hosts[hr.host].kind(), hr.rsc, strings.Join(rates, ", "), onBest, later, d.PlanClass[best])
		s.Details = append(s.Details, line)
		if later > 0 && float64(onBest) < hwMinOnBest*float64(later) {
			s.Wrong = append(s.Wrong, line)
		}
	}

	// Estimates of the valid results sent once their host-version was
	// measured, against the naive estimate over the same results.
	var est, naive []float64
	perClass := map[string][2][]float64{}
	for k, rs := range valid {
		at, ok := measuredAt[k]
		if !ok {
			continue
		}
		h := d.Hosts[k.host]
		pc := d.PlanClass[k.av]
		for _, r := range rs {
			if r.Sent <= at || !(r.FlopsEst > 0) || !(h.PFpops > 0) {
				continue
			}
			e := math.Abs(r.FpopsEst/r.FlopsEst-r.Elapsed) / r.Elapsed
			n := math.Abs(r.FpopsEst/h.PFpops-r.Elapsed) / r.Elapsed
			est, naive = append(est, e), append(naive, n)
			c := perClass[pc]
			c[0], c[1] = append(c[0], e), append(c[1], n)
			perClass[pc] = c
		}
	}
	s.EstN = len(est)
	s.EstErr, s.NaiveErr = median(est), median(naive)
	s.ByClassEst = map[string]hwEst{}
	for _, pc := range slices.Sorted(maps.Keys(perClass)) {
		c := perClass[pc]
		s.ByClassEst[pc] = hwEst{N: len(c[0]), Err: median(c[0]), Naive: median(c[1])}
		s.Details = append(s.Details, fmt.Sprintf("estimates of %q after measuring: %d results, median error %.1f%% (naive %.1f%%)",
			pc, len(c[0]), 100*median(c[0]), 100*median(c[1])))
	}
	// GPU use per host from the server's side (informational: the
	// simulated client's busy fractions are the checked ones): GPU-seconds
	// reported over the instances' time in the run.
	gpuSecs := map[hostRsc]float64{}
	for _, r := range d.Results {
		pc := d.PlanClass[r.AVID]
		if rsc := hwResource(pc); rsc != protocol.ResourceCPU && r.Elapsed > 0 {
			gpuSecs[hostRsc{r.HostID, rsc}] += r.Elapsed * hwGPUUsage[pc]
		}
	}
	for hr, secs := range gpuSecs {
		n := d.Hosts[hr.host].GPUs[hr.rsc]
		s.Details = append(s.Details, fmt.Sprintf("host %d (%s): %d %s GPUs busy %.2f from reported runtimes",
			hr.host, d.Hosts[hr.host].kind(), n, hr.rsc, secs/(float64(max(n, 1))*hwRun.Seconds())))
	}
	slices.Sort(s.Details)
	return s
}

// hwGPUUsage is the GPU share of a task of each GPU class (its ngpus).
var hwGPUUsage = map[string]float64{"cuda": 1, "opencl_amd": 0.5}

// median of xs (NaN when empty); xs is not changed.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
