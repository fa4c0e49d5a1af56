package scheduler

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/hostav"
	"github.com/taskserver/taskserver/internal/planclass"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/shmcache"
)

// testPlanClassSpec is a project's plan_class_spec.xml for the tests: an
// NVIDIA CUDA class needing a recent driver, and a two-thread class.
const testPlanClassSpec = `<plan_classes>
  <plan_class>
    <name>cuda</name>
    <gpu_type>nvidia</gpu_type>
    <cuda/>
    <min_driver_version>50000</min_driver_version>
    <min_gpu_ram_mb>1024</min_gpu_ram_mb>
    <cpu_frac>0.1</cpu_frac>
    <gpu_peak_flops_scale>0.2</gpu_peak_flops_scale>
  </plan_class>
  <plan_class>
    <name>mt</name>
    <min_ncpus>2</min_ncpus>
    <max_threads>2</max_threads>
    <nthreads_cmdline/>
    <mem_usage_base_mb>100</mem_usage_base_mb>
    <mem_usage_per_cpu_mb>50</mem_usage_per_cpu_mb>
  </plan_class>
</plan_classes>`

// testPlanClasses parses testPlanClassSpec.
func testPlanClasses(t testing.TB) *planclass.Specs {
	t.Helper()
	s, err := planclass.Parse(strings.NewReader(testPlanClassSpec))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// avIDs are the app version ids of vs.
func avIDs(vs []version) []int64 {
	out := make([]int64, len(vs))
	for i, v := range vs {
		out[i] = v.av.ID
	}
	return out
}

// gpuCoprocs is a request's <coprocs> with one NVIDIA GPU (driver 535.18,
// 4 GB) asking for secs seconds of work.
func gpuCoprocs(driver int, secs float64) *protocol.Coprocs {
	return &protocol.Coprocs{NVIDIA: &protocol.CoprocNVIDIA{Count: 1, Name: "NVIDIA GeForce RTX 3080", AvailableRAM: 4e9,
		HaveCUDA: 1, ReqSecs: secs, ReqInstances: 1, PeakFlops: 1e12, CUDAVersion: 12020, DrvVersion: driver,
		TotalGlobalMem: 4e9, Major: 8, Minor: 6}}
}

// The version each app runs with on a host, per resource: the fastest on
// that host, from its own record once it has enough valid results, else
// from the plan class's projection, else the benchmark; now and then an
// unmeasured one.
func TestChooseVersionPerHost(t *testing.T) {
	t.Parallel()
	const (
		app                               = 10
		plain, mt, cuda, oldPlain         = 100, 101, 102, 99
		measured                          = hostav.MinSamples
		unmeasured                        = hostav.MinSamples - 1
		linux                             = "x86_64-pc-linux-gnu"
		explore, noExplore        float64 = 0.05, 0.5
	)
	cat := newCatalog(shmcache.Tables{
		Platforms: []row.Platform{{ID: 1, Name: linux}},
		Apps:      []row.App{{ID: app, Name: "sim"}},
		AppVersions: []row.AppVersion{{ID: oldPlain, AppID: app, VersionNum: 99, PlatformID: 1},
			{ID: plain, AppID: app, VersionNum: 100, PlatformID: 1},
			{ID: mt, AppID: app, VersionNum: 100, PlatformID: 1, PlanClass: "mt"},
			{ID: cuda, AppID: app, VersionNum: 100, PlatformID: 1, PlanClass: "cuda"},
			{ID: 103, AppID: app, VersionNum: 100, PlatformID: 1, PlanClass: "undefined"}},
	}, 1, testPlanClasses(t))
	host := row.Host{PNCPUs: 4, PFpops: 1e9, OSName: "Linux"}
	rate := func(id int64, n int, flops float64) row.HostAppVersion {
		return row.HostAppVersion{AppVersionID: id, EtN: n, EtAvg: 1 / flops, EtMedian: 1 / flops}
	}
	for _, tt := range []struct {
		name      string
		ncpus     int
		coprocs   *protocol.Coprocs
		havs      []row.HostAppVersion
		draw      float64
		want      map[string]int64 // resource → version id
		noRsc     []string
		refusedBy string // a rule in the explanation
	}{
		{name: "no record: the projection (2 threads) beats the benchmark (1 CPU)", coprocs: gpuCoprocs(53518, 100),
			want: map[string]int64{protocol.ResourceCPU: mt, protocol.ResourceNVIDIA: cuda}},
		{name: "the host's own rate beats the projection", coprocs: gpuCoprocs(53518, 100),
			havs: []row.HostAppVersion{rate(plain, measured, 3e9)},
			want: map[string]int64{protocol.ResourceCPU: plain, protocol.ResourceNVIDIA: cuda}},
		{name: "too few results: the host's rate is not used yet",
			havs: []row.HostAppVersion{rate(plain, unmeasured, 3e9)}, want: map[string]int64{protocol.ResourceCPU: mt}},
		{name: "a version measured slow loses to the benchmark of another",
			havs: []row.HostAppVersion{rate(mt, measured, 5e8)}, want: map[string]int64{protocol.ResourceCPU: plain}},
		{name: "exploration: an unmeasured version now and then", draw: explore,
			havs: []row.HostAppVersion{rate(plain, measured, 3e9)}, want: map[string]int64{protocol.ResourceCPU: mt}},
		{name: "no exploration on most draws", draw: noExplore,
			havs: []row.HostAppVersion{rate(plain, measured, 3e9)}, want: map[string]int64{protocol.ResourceCPU: plain}},
		{name: "nothing to explore when every version is measured", draw: explore,
			havs: []row.HostAppVersion{rate(plain, measured, 3e9), rate(mt, measured, 2e9)},
			want: map[string]int64{protocol.ResourceCPU: plain}},
		{name: "one CPU: the two-thread class refuses", ncpus: 1, want: map[string]int64{protocol.ResourceCPU: plain},
			refusedBy: "mt: <min_ncpus>"},
		{name: "old driver: no NVIDIA version, and the client is told", coprocs: gpuCoprocs(40000, 100),
			want: map[string]int64{protocol.ResourceCPU: mt}, noRsc: []string{protocol.ResourceNVIDIA},
			refusedBy: "cuda: <min_driver_version>"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := host
			if tt.ncpus > 0 {
				h.PNCPUs = tt.ncpus
			}
			req := &protocol.SchedulerRequest{PlatformName: linux, Coprocs: tt.coprocs}
			draw := cmp.Or(tt.draw, 1)
			ch := cat.choose(req, h, choiceParams{plans: testPlanClasses(t), havs: tt.havs,
				rand: func() float64 { return draw }})
			// The chosen version of each resource comes first, fastest
			// first; the other candidates (fallbacks) after them.
			got := map[string]int64{}
			var chosen []version
			for _, v := range ch.byApp[app] {
				if _, ok := got[v.resource()]; !ok {
					got[v.resource()] = v.av.ID
					chosen = append(chosen, v)
				}
			}
			if !maps.Equal(got, tt.want) {
				t.Fatalf("chosen %v, want %v", got, tt.want)
			}
			if vs := ch.byApp[app]; !slices.Equal(avIDs(vs[:len(chosen)]), avIDs(chosen)) ||
				!slices.IsSortedFunc(chosen, func(a, b version) int { return cmp.Compare(b.flops, a.flops) }) {
				t.Errorf("chosen versions not first, fastest first: %+v", vs)
			}
			if got := ch.noRscApps(); !slices.Equal(got, tt.noRsc) {
				t.Errorf("no_rsc_apps = %v, want %v", got, tt.noRsc)
			}
			if tt.refusedBy != "" && !slices.ContainsFunc(ch.refusals["sim"], func(r string) bool {
				return strings.HasPrefix(r, tt.refusedBy)
			}) {
				t.Errorf("refusals = %v, want one starting %q", ch.refusals, tt.refusedBy)
			}
		})
	}
}

// What a task of the chosen version uses, and its rate on the host.
func TestChooseUsage(t *testing.T) {
	t.Parallel()
	cat := newCatalog(shmcache.Tables{
		Platforms: []row.Platform{{ID: 1, Name: "x86_64-pc-linux-gnu"}},
		Apps:      []row.App{{ID: 10, Name: "sim"}},
		AppVersions: []row.AppVersion{{ID: 101, AppID: 10, VersionNum: 100, PlatformID: 1, PlanClass: "mt"},
			{ID: 102, AppID: 10, VersionNum: 100, PlatformID: 1, PlanClass: "cuda"}},
	}, 1, testPlanClasses(t))
	req := &protocol.SchedulerRequest{PlatformName: "x86_64-pc-linux-gnu", Coprocs: gpuCoprocs(53518, 100)}
	ch := cat.choose(req, row.Host{PNCPUs: 4, PFpops: 1e9}, choiceParams{plans: testPlanClasses(t)})
	mt, cuda := ch.byAV[101], ch.byAV[102]
	if mt.rsc != 0 || mt.avgNCPUs != 2 || mt.maxNCPUs != 2 || mt.flops != 2e9 || mt.cmdline != "--memory_size_mb 200 --nthreads 2" ||
		mt.memBytes != 200<<20 {
		t.Errorf("mt = %+v, want 2 CPUs at 2e9 with 200 MB and --nthreads 2", mt)
	}
	if cuda.rscName != protocol.ResourceNVIDIA || cuda.gpuUsage != 1 || !(cuda.avgNCPUs > 0 && cuda.avgNCPUs < 1) ||
		!(cuda.flops > 2e9) {
		t.Errorf("cuda = %+v, want one NVIDIA GPU, part of a CPU, faster than the CPU", cuda)
	}

	// The anonymous platform: the client's own builds, with the usage its
	// app_info.xml declares, any plan class.
	anon := &protocol.SchedulerRequest{PlatformName: anonymousPlatform, Coprocs: gpuCoprocs(53518, 100),
		AppVersions: []protocol.ClientAppVer{{AppName: "sim", VersionNum: 7, PlanClass: "mt", AvgNCPUs: 2, Flops: 5e9},
			{AppName: "sim", VersionNum: 8, PlanClass: "my_cuda", AvgNCPUs: 0.2,
				Coprocs: []protocol.CoprocUsage{{Type: protocol.ResourceNVIDIA, Count: 0.5}}},
			{AppName: "sim", VersionNum: 9, PlanClass: "opencl_ati", Coprocs: []protocol.CoprocUsage{{Type: protocol.ResourceAMD, Count: 1}}}}}
	ch = cat.choose(anon, row.Host{PNCPUs: 4, PFpops: 1e9}, choiceParams{})
	got := map[string]version{}
	for _, v := range ch.byApp[10] {
		got[v.resource()] = v
	}
	if v := got[protocol.ResourceCPU]; v.versionNum != 7 || v.avgNCPUs != 2 || v.flops != 5e9 || v.planClass != "mt" {
		t.Errorf("anonymous CPU build = %+v, want version 7 on 2 CPUs at its own 5e9", v)
	}
	if v := got[protocol.ResourceNVIDIA]; v.versionNum != 8 || v.gpuUsage != 0.5 || v.flops != 0.5e12 {
		t.Errorf("anonymous NVIDIA build = %+v, want version 8 on half a GPU at half its peak", v)
	}
	if len(got) != 2 {
		t.Errorf("anonymous builds = %d resources, want 2 (the host has no AMD GPU)", len(got))
	}
}

// BenchmarkChoose is the version choice of one request: a host with four
// CPUs and a GPU, an app with a plain, a two-thread and a CUDA version,
// and the host's records of two of them.
func BenchmarkChoose(b *testing.B) {
	cat := newCatalog(shmcache.Tables{
		Platforms: []row.Platform{{ID: 1, Name: "x86_64-pc-linux-gnu"}},
		Apps:      []row.App{{ID: 10, Name: "sim"}},
		AppVersions: []row.AppVersion{{ID: 100, AppID: 10, VersionNum: 100, PlatformID: 1},
			{ID: 101, AppID: 10, VersionNum: 100, PlatformID: 1, PlanClass: "mt"},
			{ID: 102, AppID: 10, VersionNum: 100, PlatformID: 1, PlanClass: "cuda"}},
	}, 1, testPlanClasses(b))
	plans := testPlanClasses(b)
	req := &protocol.SchedulerRequest{PlatformName: "x86_64-pc-linux-gnu", Coprocs: gpuCoprocs(53518, 100)}
	h := row.Host{PNCPUs: 4, PFpops: 1e9}
	havs := []row.HostAppVersion{{AppVersionID: 100, EtN: 20, EtMedian: 1e-9}, {AppVersionID: 102, EtN: 3, EtMedian: 1e-10}}
	b.ReportAllocs()
	for b.Loop() {
		cat.choose(req, h, choiceParams{plans: plans, havs: havs, quota: 500, day: 1})
	}
}

// A plan class that says how much memory a task uses replaces the job's
// memory bound: a job bounded above the host's memory goes out with the
// two-thread version (200 MB), not with the plain one.
func TestPlanClassMemoryReplacesBound(t *testing.T) {
	t.Parallel()
	cat := newCatalog(shmcache.Tables{
		Platforms: []row.Platform{{ID: 1, Name: "x86_64-pc-linux-gnu"}},
		Apps:      []row.App{{ID: 10, Name: "sim"}},
		AppVersions: []row.AppVersion{{ID: 100, AppID: 10, VersionNum: 100, PlatformID: 1},
			{ID: 101, AppID: 10, VersionNum: 100, PlatformID: 1, PlanClass: "mt"}},
	}, 1, testPlanClasses(t))
	req := &protocol.SchedulerRequest{PlatformName: "x86_64-pc-linux-gnu", WorkReqSeconds: 100}
	e := shmcache.Entry{ResultID: 1, WorkunitID: 1, AppID: 10, RscFpopsEst: 1e10, RscMemoryBound: 2e9, DelayBound: 86400}
	for _, tt := range []struct {
		ncpus  int
		wantAV int64
		want   string
	}{{ncpus: 2, wantAV: 101}, {ncpus: 1, want: reasonMemory}} {
		h := row.Host{PNCPUs: tt.ncpus, PFpops: 1e9, MNbytes: 1e9}
		ch := cat.choose(req, h, choiceParams{plans: testPlanClasses(t)})
		w := &walk{host: h, cat: cat, ch: ch, q: newHostQueue(0, h, req, ch.rsc, 10, ch.quota),
			skipJob: map[int64]bool{}, hrBound: map[int64]bool{}}
		v, _, why := w.check(e)
		if why != tt.want || v.av.ID != tt.wantAV {
			t.Errorf("%d CPUs: check = version %d, %q; want %d, %q", tt.ncpus, v.av.ID, why, tt.wantAV, tt.want)
		}
	}
}
