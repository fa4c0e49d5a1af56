package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskserver/taskserver/internal/hostav"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// withPlanClasses is a setup mod: the project defines testPlanClassSpec.
func withPlanClasses(t testing.TB) func(*Options) {
	return func(o *Options) { o.PlanClasses = testPlanClasses(t) }
}

// addVersion adds a version of app appID on the fixture's platform and
// publishes the tables again.
func (f *fixture) addVersion(appID int64, num int, planClass string) int64 {
	f.t.Helper()
	ps, err := f.st.PlatformList(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	id := storetest.AppVersion(f.t, f.st, storetest.AppVersionOptions{CreateTime: 1, App: appID, VersionNum: num,
		Platform: ps[0].ID, PlanClass: planClass}).ID
	f.publishTables()
	return id
}

// gpuRPC posts r as a host with one NVIDIA GPU (driver 535.18, 4 GB)
// asking gpuSecs seconds of GPU work; r's workSecs are its CPU request.
func (f *fixture) gpuRPC(r request, driver int, gpuSecs float64) *protocol.SchedulerReply {
	f.t.Helper()
	return f.gpuRPCWith(r, driver, gpuSecs, "")
}

// gpuRPCWith is gpuRPC with extra elements (an anonymous platform's
// <app_versions>) in the request.
func (f *fixture) gpuRPCWith(r request, driver int, gpuSecs float64, extra string) *protocol.SchedulerReply {
	f.t.Helper()
	if r.auth == "" {
		r.auth = f.user.Authenticator
	}
	coprocs := fmt.Sprintf(`<coprocs>
<coproc_cuda>
   <count>1</count>
   <name>NVIDIA GeForce RTX 3080</name>
   <available_ram>4000000000.000000</available_ram>
   <have_cuda>1</have_cuda>
   <have_opencl>0</have_opencl>
   <req_secs>%f</req_secs>
   <req_instances>%f</req_instances>
   <estimated_delay>0.000000</estimated_delay>
   <peak_flops>1000000000000.000000</peak_flops>
   <cudaVersion>12020</cudaVersion>
   <drvVersion>%d</drvVersion>
   <totalGlobalMem>4000000000.000000</totalGlobalMem>
   <major>8</major>
   <minor>6</minor>
</coproc_cuda>
</coprocs>
%s</scheduler_request>`, gpuSecs, min(gpuSecs, 1), driver, extra)
	body := strings.Replace(r.body(), "</scheduler_request>", coprocs, 1)
	code, out := f.post(body)
	if code != 200 {
		f.t.Fatalf("POST /scheduler = %d %q", code, out)
	}
	rep, err := protocol.ParseSchedulerReply(strings.NewReader(out))
	if err != nil {
		f.t.Fatalf("ParseSchedulerReply: %v\n%s", err, out)
	}
	return rep
}

// replyVersions indexes a reply's app versions by plan class.
func replyVersions(t *testing.T, rep *protocol.SchedulerReply) map[string]protocol.AppVersion {
	t.Helper()
	out := map[string]protocol.AppVersion{}
	for _, av := range rep.AppVersions {
		if _, dup := out[av.PlanClass]; dup {
			t.Fatalf("app version %q described twice: %+v", av.PlanClass, rep.AppVersions)
		}
		out[av.PlanClass] = av
	}
	return out
}

// A host with a GPU that asks for CPU and GPU work gets both: GPU tasks
// with the CUDA version (one GPU, part of a CPU, the GPU's rate) and CPU
// tasks with the plain one, each result naming its plan class.
func TestGPUHostGetsCPUAndGPUWork(t *testing.T) {
	t.Parallel()
	f := setup(t, withPlanClasses(t))
	f.addVersion(f.appID, 100, "cuda")
	for i := range 8 {
		f.addJob(fmt.Sprintf("wu%d", i), job{})
	}
	rep := f.gpuRPC(request{ncpus: 2, workSecs: 20}, 53518, 5)
	avs := replyVersions(t, rep)
	cuda, plain := avs["cuda"], avs[""]
	if len(avs) != 2 || len(cuda.Coprocs) != 1 || cuda.Coprocs[0].Type != protocol.ResourceNVIDIA || cuda.Coprocs[0].Count != 1 ||
		!(cuda.AvgNCPUs > 0 && cuda.AvgNCPUs < 1) || !(cuda.Flops > 1e9) || plain.AvgNCPUs != 1 || plain.Flops != 1e9 ||
		len(plain.Coprocs) != 0 {
		t.Fatalf("app versions = %+v, want a CUDA one (1 NVIDIA GPU, <1 CPU, faster) and a plain one (1 CPU at 1e9)", rep.AppVersions)
	}
	n := map[string]int{}
	for _, r := range rep.Results {
		n[r.PlanClass]++
	}
	// CPU: 20 s asked of 10 s tasks; GPU: 5 s of ~1 s tasks.
	if n[""] != 2 || n["cuda"] < 4 || len(rep.Results) > 10 {
		t.Fatalf("results by plan class = %v (%q), want 2 CPU tasks and GPU tasks covering 5 s", n, messages(rep))
	}
	if len(rep.NoRscApps) != 0 {
		t.Fatalf("no_rsc_apps = %v, want none: the project has apps for both", rep.NoRscApps)
	}
	if cpu, gpu := testutil.ToFloat64(f.svc.m.sentBy[[2]string{protocol.ResourceCPU, "benchmark"}]),
		testutil.ToFloat64(f.svc.m.sentBy[[2]string{protocol.ResourceNVIDIA, "plan_class"}]); cpu != 2 || gpu != float64(n["cuda"]) {
		t.Fatalf("results_sent_by_resource_total: CPU/benchmark %v, NVIDIA/plan_class %v; want 2 and %d", cpu, gpu, n["cuda"])
	}

	// Asking far more GPU work than a reply holds, the host still gets CPU
	// work: the faster GPU does not take every place in the reply.
	for i := range 12 {
		f.addJob(fmt.Sprintf("more%d", i), job{})
	}
	rep = f.gpuRPC(request{ncpus: 2, workSecs: 20, hostID: rep.HostID}, 53518, 1000)
	n = map[string]int{}
	for _, r := range rep.Results {
		n[r.PlanClass]++
	}
	if len(rep.Results) != 10 || n[""] < 1 || n["cuda"] < 1 {
		t.Fatalf("results by plan class = %v, want a full reply with CPU and GPU tasks", n)
	}
}

// A multi-threaded version goes out with avg_ncpus 2 and its thread
// count on the command line, and a task counts two CPUs' worth against
// the request.
func TestMultiThreadedVersion(t *testing.T) {
	t.Parallel()
	f := setup(t, withPlanClasses(t))
	f.addVersion(f.appID, 100, "mt")
	for i := range 8 {
		f.addJob(fmt.Sprintf("wu%d", i), job{})
	}
	// 4 CPUs asking 40 CPU-seconds: a task of 1e10 FLOP runs 5 s on two
	// CPUs at 2e9, 10 CPU-seconds.
	rep := f.rpc(request{ncpus: 4, workSecs: 40})
	avs := replyVersions(t, rep)
	mt, ok := avs["mt"]
	if !ok || len(avs) != 1 || mt.AvgNCPUs != 2 || mt.MaxNCPUs != 2 || mt.Flops != 2e9 || !strings.HasSuffix(mt.Cmdline, "--nthreads 2") {
		t.Fatalf("app versions = %+v, want the mt one with 2 CPUs, 2e9, --nthreads 2", rep.AppVersions)
	}
	if len(rep.Results) != 4 || rep.Results[0].PlanClass != "mt" {
		t.Fatalf("results = %+v, want 4 mt tasks (40 CPU-seconds)", rep.Results)
	}
}

// A host no version's plan class accepts gets no work, with the reason;
// it is told it need not ask for that resource, not for the ones it may
// use.
func TestPlanClassRefusedHostGetsNone(t *testing.T) {
	t.Parallel()
	f := setup(t, withPlanClasses(t))
	gpuApp := storetest.App(f.t, f.st, storetest.AppOptions{CreateTime: 1, Name: "gpuonly", Weight: 1}).ID
	f.addVersion(gpuApp, 100, "cuda")
	f.appID = gpuApp
	f.addJob("g0", job{})

	// Driver 400.00: the cuda class wants 500.00.
	rep := f.gpuRPC(request{ncpus: 2, workSecs: 100}, 40000, 100)
	if len(rep.Results) != 0 {
		t.Fatalf("host refused by the plan class got %v", resultNames(rep))
	}
	if !strings.Contains(messages(rep), noWorkText[reasonPlanClass]) {
		t.Fatalf("messages %q, want %q", messages(rep), noWorkText[reasonPlanClass])
	}
	if got := testutil.ToFloat64(f.svc.m.noWork.WithLabelValues(reasonPlanClass)); got != 1 {
		t.Fatalf("no_work_total{plan_class} = %v, want 1", got)
	}
	// The demo app has a CPU version; no app has an NVIDIA one it may use.
	if !slices.Equal(rep.NoRscApps, []string{protocol.ResourceNVIDIA}) {
		t.Fatalf("no_rsc_apps = %v, want [NVIDIA]", rep.NoRscApps)
	}

	// taskctl host explain says the same, with the rule, from the GPU the
	// host row recorded.
	ex, err := Explain(f.ctx, f.st, ExplainParams{HostID: rep.HostID, Platforms: []string{platformName},
		Now: f.now.Load(), Policy: Policy{PlanClasses: testPlanClasses(t)}})
	if err != nil {
		t.Fatal(err)
	}
	if ex.WouldSend != 0 || ex.Rejected[reasonPlanClass] != 1 || ex.Short != reasonPlanClass ||
		!slices.ContainsFunc(ex.PlanClassRefusals["gpuonly"], func(r string) bool {
			return strings.HasPrefix(r, "cuda: <min_driver_version>")
		}) {
		t.Fatalf("explanation = %+v, want the job rejected by the cuda class's min_driver_version", ex)
	}

	// With a recent driver the same host gets it.
	rep = f.gpuRPC(request{ncpus: 2, workSecs: 100}, 53518, 100)
	if len(rep.Results) != 1 || rep.Results[0].PlanClass != "cuda" || len(rep.NoRscApps) != 0 {
		t.Fatalf("host with a recent driver: results %+v, no_rsc_apps %v; want the cuda task", rep.Results, rep.NoRscApps)
	}
}

// A project with only GPU versions tells a host not to ask for CPU work.
func TestNoCPUApps(t *testing.T) {
	t.Parallel()
	f := setup(t, withPlanClasses(t))
	if _, err := f.st.DB().Exec(`UPDATE app_version SET deprecated = 1 WHERE id = ?`, f.avID); err != nil {
		t.Fatal(err)
	}
	f.addVersion(f.appID, 100, "cuda")
	rep := f.gpuRPC(request{ncpus: 2, workSecs: 100}, 53518, 100)
	if !slices.Equal(rep.NoRscApps, []string{protocol.ResourceCPU}) {
		t.Fatalf("no_rsc_apps = %v, want [CPU]", rep.NoRscApps)
	}
	// A host with no GPU would be told it has nothing: it is told nothing.
	rep = f.rpc(request{ncpus: 2, workSecs: 100})
	if len(rep.NoRscApps) != 0 {
		t.Fatalf("CPU-only host: no_rsc_apps = %v, want none (it would never ask again)", rep.NoRscApps)
	}
}

// A lost task is resent with the version it was sent with and that
// version's usage, even when a newer one has come since.
func TestResendKeepsVersion(t *testing.T) {
	t.Parallel()
	f := setup(t, withPlanClasses(t))
	cuda := f.addVersion(f.appID, 100, "cuda")
	f.addJob("g0", job{})
	rep := f.gpuRPC(request{ncpus: 2}, 53518, 5)
	if len(rep.Results) != 1 || rep.Results[0].PlanClass != "cuda" {
		t.Fatalf("first request: results %+v, want the cuda task", rep.Results)
	}
	host := rep.HostID
	if r := f.result(f.resultID("g0_0")); r.AppVersionID != cuda {
		t.Fatalf("sent with version %d, want %d", r.AppVersionID, cuda)
	}
	f.addVersion(f.appID, 101, "cuda")
	rep = f.gpuRPC(request{hostID: host, hasOther: true}, 53518, 0)
	avs := replyVersions(t, rep)
	if len(rep.Results) != 1 || rep.Results[0].PlanClass != "cuda" || rep.Results[0].VersionNum != 100 ||
		avs["cuda"].VersionNum != 100 || len(avs["cuda"].Coprocs) != 1 || avs["cuda"].Coprocs[0].Type != protocol.ResourceNVIDIA {
		t.Fatalf("resend: results %+v, versions %+v; want g0_0 with cuda 100 on an NVIDIA GPU", rep.Results, rep.AppVersions)
	}
}

// resultID is the id of the instance called name.
func (f *fixture) resultID(name string) int64 {
	f.t.Helper()
	var id int64
	if err := f.st.DB().QueryRow(`SELECT id FROM result WHERE name = ?`, name).Scan(&id); err != nil {
		f.t.Fatal(err)
	}
	return id
}

// The daily quota per app version: a host gets at most the quota per CPU
// a day, counted within a request and across requests, with the reason.
func TestDailyQuotaStopsSends(t *testing.T) {
	t.Parallel()
	f := setup(t, func(o *Options) { o.DailyResultQuota = 2 })
	for i := range 6 {
		f.addJob(fmt.Sprintf("wu%d", i), job{})
	}
	rep := f.rpc(request{ncpus: 1, workSecs: 1000})
	if len(rep.Results) != 2 {
		t.Fatalf("first request: %d results, want the quota of 2", len(rep.Results))
	}
	if got := testutil.ToFloat64(f.svc.m.shortfallBy[reasonDailyQuota]); got != 1 {
		t.Fatalf("send_shortfall_total{daily_quota} = %v, want 1", got)
	}
	rep = f.rpc(request{ncpus: 1, workSecs: 1000, hostID: rep.HostID})
	if len(rep.Results) != 0 || !strings.Contains(messages(rep), noWorkText[reasonDailyQuota]) {
		t.Fatalf("same day: results %v, messages %q; want none, with the daily quota's message", resultNames(rep), messages(rep))
	}
	// The next day the count starts again.
	f.now.Add(86400)
	rep = f.rpc(request{ncpus: 1, workSecs: 1000, hostID: rep.HostID, hasOther: true,
		other: []string{"wu0_0", "wu1_0"}})
	if len(rep.Results) != 2 {
		t.Fatalf("next day: %d results, want 2", len(rep.Results))
	}
}

// When the chosen version's daily quota runs out during a request, the
// rest of the request goes out with the next version of the resource, as
// BOINC looks again for a version with quota left; with every version's
// quota used up the host gets nothing more that day.
func TestDailyQuotaFallsBackToTheNextVersion(t *testing.T) {
	t.Parallel()
	// A quota of 1 is not multiplied by the CPUs: one job of each version.
	f := setup(t, withPlanClasses(t), func(o *Options) { o.DailyResultQuota = 1 })
	mt := f.addVersion(f.appID, 100, "mt")
	for i := range 6 {
		f.addJob(fmt.Sprintf("wu%d", i), job{})
	}
	rep := f.rpc(request{ncpus: 2, workSecs: 1e5})
	byVersion := map[int64]int{}
	for _, r := range rep.Results {
		byVersion[f.result(f.resultID(r.Name)).AppVersionID]++
	}
	if byVersion[mt] != 1 || byVersion[f.avID] != 1 || len(rep.Results) != 2 {
		t.Fatalf("first request: jobs by version %v (%d results); want 1 of the two-CPU version %d, then 1 of %d",
			byVersion, len(rep.Results), mt, f.avID)
	}
	rep = f.rpc(request{ncpus: 2, workSecs: 1e5, hostID: rep.HostID})
	if len(rep.Results) != 0 || !strings.Contains(messages(rep), noWorkText[reasonDailyQuota]) {
		t.Fatalf("second request: results %v, messages %q; want none, with the daily quota's message",
			resultNames(rep), messages(rep))
	}
}

// A client on the anonymous platform runs its own builds with the usage
// its app_info.xml declares: a CUDA build of its own gets the GPU work, a
// CPU build the CPU work, no project version is described, and the GPU
// jobs count in the host's record of its own NVIDIA build.
func TestAnonymousPlatformGPUBuild(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for i := range 6 {
		f.addJob(fmt.Sprintf("wu%d", i), job{})
	}
	builds := `<app_versions>
<app_version>
    <app_name>demo</app_name>
    <version_num>7</version_num>
    <platform>x86_64-pc-linux-gnu</platform>
    <avg_ncpus>1.000000</avg_ncpus>
    <flops>1000000000.000000</flops>
</app_version>
<app_version>
    <app_name>demo</app_name>
    <version_num>8</version_num>
    <platform>x86_64-pc-linux-gnu</platform>
    <plan_class>my_cuda</plan_class>
    <avg_ncpus>0.200000</avg_ncpus>
    <flops>50000000000.000000</flops>
    <coproc>
        <type>NVIDIA</type>
        <count>1.000000</count>
    </coproc>
</app_version>
</app_versions>
`
	rep := f.gpuRPCWith(request{ncpus: 2, workSecs: 10, platform: anonymousPlatform}, 53518, 0.5, builds)
	n := map[string]int{}
	for _, r := range rep.Results {
		n[fmt.Sprintf("%s/%d", r.PlanClass, r.VersionNum)]++
	}
	if n["/7"] != 1 || n["my_cuda/8"] != 3 || len(rep.AppVersions) != 0 {
		t.Fatalf("results by build = %v, app versions %+v; want 1 CPU task of build 7, 3 GPU tasks of build 8 (0.2 s each), none described",
			n, rep.AppVersions)
	}
	// The instances record the build's resource, as BOINC does, for the
	// validator and error reports to find its row.
	for _, r := range rep.Results {
		want := -int64(hostav.AnonCPU)
		if r.PlanClass == "my_cuda" {
			want = -hostav.AnonNVIDIA
		}
		if got := f.result(f.resultID(r.Name)).AppVersionID; got != want {
			t.Fatalf("instance %s app_version_id = %d, want %d", r.Name, got, want)
		}
	}
	if err := f.svc.Flush(f.ctx); err != nil {
		t.Fatal(err)
	}
	havs, err := f.st.HostAppVersionListByHost(f.ctx, rep.HostID)
	if err != nil {
		t.Fatal(err)
	}
	today := map[int64]int{}
	for _, h := range havs {
		today[h.AppVersionID] = h.NJobsToday
	}
	if gpu, cpu := today[hostav.GeneralizedID(f.appID, hostav.AnonNVIDIA)], today[hostav.GeneralizedID(f.appID, hostav.AnonCPU)]; gpu != 3 || cpu != 1 {
		t.Fatalf("jobs today of the host's own builds: NVIDIA %d, CPU %d (rows %+v); want 3 and 1", gpu, cpu, havs)
	}
}
