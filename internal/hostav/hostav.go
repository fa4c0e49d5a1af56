// Package hostav holds the rules for what one host has shown of one app
// version (host_app_version, BOINC's HOST_APP_VERSION): the elapsed-time
// statistics its valid results build, the processing rate the scheduler
// assumes from them, and the daily quota that shrinks on errors and grows
// back on valid results. It is pure: no SQL, no clock (days and times are
// passed in), so every rule is a table test; the store applies the quota
// rules as relative SQL that a store test holds to these functions.
package hostav

import (
	"fmt"
	"math"

	"github.com/taskserver/taskserver/internal/row"
)

// MinSamples is how many valid results a host needs before its own rate
// for a version is trusted over the plan class's projection. BOINC waits
// for more than MIN_HOST_SAMPLES (10) samples of a mean; ours is a median,
// which one or two interrupted runs do not drag, and 5 samples put its
// running estimate within a few tens of percent on the skewed runtimes of
// volunteer hosts (TestMedianConverges), already better than a projection
// that can be off by a factor of ten. Fewer samples let a single
// anomalous first run decide.
const MinSamples = 5

// DefaultRate is the FLOPS assumed when nothing is known: BOINC's default
// for a host that reports no benchmark.
const DefaultRate = 1e9

// Source says which knowledge a Rate came from.
type Source string

// The sources of a Rate, best first.
const (
	SourceHost      Source = "host"
	SourcePlanClass Source = "plan_class"
	SourceBenchmark Source = "benchmark"
	SourceDefault   Source = "default"
)

// Rate returns the FLOPS to assume for a version on a host. Once the host
// has MinSamples valid results of the version it is 1/median(et), the
// host's own rate; before, the plan class's projection (projected, when >
// 0), then the benchmark (p_fpops times the version's average CPUs, when >
// 0), then DefaultRate.
//
// The median, not the mean. Seed 004 predicts a worker's queue with the
// average runtime and offers the median as "more robust to outliers" at
// the cost of a history of measurements per worker. Runtimes on volunteer
// hosts are skewed to the right (a run suspended by the volunteer, a
// throttled laptop, a restart from a checkpoint): a few such runs pull the
// mean of seconds per FLOP up, and the rate down, and the scheduler would
// send too little to a host that usually runs at full speed. The median is
// the typical run, which is what a deadline estimate is about; and the
// history's cost is avoided with a running estimate kept in one column
// (addSample). The mean stays in et_avg for operators and for the total
// work a host gets through (the queue's length is a sum, where the mean is
// the right statistic).
func Rate(st row.HostAppVersion, projected, benchmark float64) (float64, Source) {
	return RateBy(Median, st, projected, benchmark)
}

// Statistic is which statistic of a host's runtimes a rate comes from.
type Statistic string

// The statistics kept (DESIGN.md: "average or median, configurable").
const (
	Median Statistic = "median"
	Mean   Statistic = "mean"
)

// RateBy is Rate with the host's own rate from stat: 1/et_median (Median,
// Rate's) or 1/et_avg (Mean, BOINC's and seed 004's default), for a
// scheduler flag that chooses. An unknown stat is Median.
func RateBy(stat Statistic, st row.HostAppVersion, projected, benchmark float64) (float64, Source) {
	et := st.EtMedian
	if stat == Mean {
		et = st.EtAvg
	}
	if st.EtN >= MinSamples && et > 0 {
		return 1 / et, SourceHost
	}
	if projected > 0 {
		return projected, SourcePlanClass
	}
	if benchmark > 0 {
		return benchmark, SourceBenchmark
	}
	return DefaultRate, SourceDefault
}

// Day is the day number of Unix time now (days since 1970-01-01 UTC): the
// unit of the daily quota, as host_app_version.day stores it.
func Day(now int64) int64 {
	return int64(math.Floor(float64(now) / 86400))
}

// AddValid is st after a valid result that ran elapsed seconds of a job
// estimated at fpopsEst FLOPs and came back turnaround seconds after it was
// sent. The sample et = elapsed/fpopsEst joins the statistics when both are
// positive; the valid streak and count grow; and the quota, if shrunk,
// doubles back towards projectQuota (never above it): BOINC's
// got_good_result, applied on a valid result rather than on any success,
// as BOINC's own comment there asks, so that a host returning garbage fast
// does not earn its quota back. A quota of 0 (never set: the full quota)
// stays 0, and so does everything when projectQuota is 0 (no quota).
func AddValid(st row.HostAppVersion, elapsed, fpopsEst, turnaround float64, projectQuota int) row.HostAppVersion {
	if elapsed > 0 && fpopsEst > 0 {
		st.EtN, st.EtAvg, st.EtVar, st.EtMedian = addSample(st.EtN, st.EtAvg, st.EtVar, st.EtMedian, elapsed/fpopsEst)
	}
	if turnaround > 0 {
		st.TurnaroundN++
		st.TurnaroundAvg += (turnaround - st.TurnaroundAvg) / float64(st.TurnaroundN)
	}
	st.ConsecutiveValid++
	st.NValid++
	st.MaxJobsPerDay = GrowQuota(st.MaxJobsPerDay, projectQuota)
	return st
}

// GrowQuota is a quota per instance after a valid result: doubled, capped at
// projectQuota; 0 (the full quota) stays 0.
func GrowQuota(quota, projectQuota int) int {
	if quota <= 0 || projectQuota <= 0 || quota >= projectQuota {
		return quota
	}
	return min(quota*2, projectQuota)
}

// AddInvalid is st after a result the validator found invalid: the valid
// streak ends. The quota is left alone: it never exceeds the project's
// quota here, and BOINC's is_invalid lowers only a quota above it. An
// invalid result is not an error (the app ran); a host that returns
// garbage is dealt with by replication and its credit, not by starving it.
func AddInvalid(st row.HostAppVersion) row.HostAppVersion {
	st.ConsecutiveValid = 0
	return st
}

// AddError is st after a result the host reported as a CLIENT_ERROR (the
// app crashed, or exceeded a limit): BOINC's got_bad_result. The quota per
// instance drops to one less than the smaller of itself and projectQuota,
// but never below 1 (a host that can never run the version still gets one
// job a day, in case something changed), and the valid streak ends. With
// projectQuota 0 (no quota) only the counts change.
func AddError(st row.HostAppVersion, projectQuota int) row.HostAppVersion {
	st.ConsecutiveValid = 0
	st.NErrors++
	st.MaxJobsPerDay = ShrinkQuota(st.MaxJobsPerDay, projectQuota, 1)
	return st
}

// ShrinkQuota is a quota per instance after n client errors: each takes one
// from the smaller of it (projectQuota when 0) and projectQuota, down to 1.
// In one closed form so the store can apply a request's errors in one
// relative statement.
func ShrinkQuota(quota, projectQuota, n int) int {
	if projectQuota <= 0 || n <= 0 {
		return quota
	}
	if quota <= 0 || quota > projectQuota {
		quota = projectQuota
	}
	return max(1, quota-n)
}

// NoLimit is DailyLimit's answer when the project has no daily quota.
const NoLimit = math.MaxInt32

// DailyLimit is how many jobs of the version the host may still get on day:
// the quota per instance (st.MaxJobsPerDay, or projectQuota when 0) times
// instances (the host's CPUs for a CPU version, its GPUs times the GPU
// multiplier for a GPU version; at least 1), minus the jobs sent today
// (st.NJobsToday when st.Day is day; an earlier day's count is void). A
// quota of 1 is not multiplied, as in BOINC: a host at 1 has failed with the
// version on every instance, and one job a day is the probe that finds out
// whether something changed. Never negative; NoLimit when projectQuota is 0.
func DailyLimit(st row.HostAppVersion, projectQuota int, instances float64, day int64) int {
	if projectQuota <= 0 {
		return NoLimit
	}
	q := st.MaxJobsPerDay
	if q <= 0 {
		q = projectQuota
	}
	total := q
	if q > 1 {
		total = int(math.Min(float64(q)*math.Max(instances, 1), NoLimit))
	}
	if st.Day == day {
		total -= st.NJobsToday
	}
	return max(total, 0)
}

// QuotaInstances is the instances the daily quota of a version is
// multiplied by (DailyLimit's instances), as BOINC scales it: a CPU version
// (gpus 0) the host's CPUs; a GPU version the host's GPUs of the version's
// kind times gpuMultiplier (--gpu-quota-multiplier; 0 counts as 1).
func QuotaInstances(ncpus int, gpus float64, gpuMultiplier int) float64 {
	if gpus > 0 {
		return gpus * float64(max(gpuMultiplier, 1))
	}
	return float64(max(ncpus, 1))
}

// Resource numbers of an anonymous-platform app version, as BOINC's
// ANON_PLATFORM_* codes count them (negated there): they make the
// generalized version id of a client's own build.
const (
	AnonCPU    = 2
	AnonNVIDIA = 3
	AnonAMD    = 4
	AnonIntel  = 5
	AnonApple  = 6
)

// GeneralizedID is the host_app_version key of an anonymous-platform
// client's own build of app appID for resource (AnonCPU, ...):
// -(appID*1000000 + resource), negative so it never meets a real version
// id (BOINC's generalized_app_version_id has the same digits, positive).
func GeneralizedID(appID int64, resource int) int64 {
	return -(appID*1000000 + int64(resource))
}

// Key is the host_app_version key of an instance that ran version
// appVersionID of app appID: the version itself, or for an
// anonymous-platform instance (appVersionID 0, or a negative BOINC
// ANON_PLATFORM code) the generalized id of its resource (CPU when the
// instance does not say).
func Key(appVersionID, appID int64) int64 {
	switch {
	case appVersionID > 0:
		return appVersionID
	case appVersionID < 0 && appVersionID >= -AnonApple:
		return GeneralizedID(appID, int(-appVersionID))
	case appVersionID < 0:
		return appVersionID // already generalized
	}
	return GeneralizedID(appID, AnonCPU)
}

// SplitGeneralizedID is GeneralizedID's inverse: the app and resource of an
// anonymous-platform key, ok false for a real version id.
func SplitGeneralizedID(id int64) (appID int64, resource int, ok bool) {
	if id >= 0 {
		return 0, 0, false
	}
	return -id / 1000000, int(-id % 1000000), true
}

// AnonResourceName names an anonymous-platform resource number, as the
// client's <coproc> types and BOINC's plan classes do.
func AnonResourceName(resource int) string {
	switch resource {
	case AnonCPU:
		return "cpu"
	case AnonNVIDIA:
		return "nvidia"
	case AnonAMD:
		return "ati"
	case AnonIntel:
		return "intel_gpu"
	case AnonApple:
		return "apple_gpu"
	}
	return fmt.Sprintf("resource %d", resource)
}
