package simclient

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/protocol"
)

// The <coprocs> a GPU host writes is what the server reads: every model's
// element, spliced where the 7.x client puts it, parses with
// protocol.ParseSchedulerRequest into the right Resources().
func TestCoprocsWireFormParses(t *testing.T) {
	for _, m := range gpuModels {
		t.Run(m.Name, func(t *testing.T) {
			g := gpu{model: m, count: 2, speed: m.PeakFlops * DefaultGPUEfficiency}
			var cp bytes.Buffer
			writeCoprocs(&cp, []gpu{g}, []gpuRequest{{reqSecs: 123.5, reqInstances: 1, estimatedDelay: 7.25}})
			body, err := encodeRequest(&protocol.SchedulerRequest{Authenticator: "k", PlatformName: platformName,
				HostInfo: protocol.HostInfo{PNCPUs: 8, PFeatures: pFeatures(true)},
				Results:  []protocol.ReportResult{{Name: "r1", State: 5}}})
			if err != nil {
				t.Fatal(err)
			}
			body = spliceCoprocs(body, cp.Bytes())
			if i, j := bytes.Index(body, []byte("</disk_usage>")), bytes.Index(body, []byte("<coprocs>")); !(i >= 0 && j > i) ||
				j > bytes.Index(body, []byte("<result>")) {
				t.Errorf("<coprocs> at %d, want after </disk_usage> (%d) and before the results:\n%s", j, i, body)
			}
			req, err := protocol.ParseSchedulerRequest(bytes.NewReader(body))
			if err != nil {
				t.Fatalf("ParseSchedulerRequest: %v\n%s", err, body)
			}
			if len(req.Results) != 1 || !strings.Contains(req.HostInfo.PFeatures, "avx2") {
				t.Errorf("rest of the request lost: results %d, p_features %q", len(req.Results), req.HostInfo.PFeatures)
			}
			rs := req.Coprocs.Resources()
			if len(rs) != 1 {
				t.Fatalf("Resources() = %+v, want one", rs)
			}
			r := rs[0]
			if r.Type != m.Type || r.Count != 2 || r.Name != m.Name || r.RAM != m.RAM || r.PeakFlops != m.PeakFlops {
				t.Errorf("resource %+v, want type %s, 2 of %q, RAM %g, peak %g", r, m.Type, m.Name, m.RAM, m.PeakFlops)
			}
			if r.ReqSecs != 123.5 || r.ReqInstances != 1 || r.EstimatedDelay != 7.25 {
				t.Errorf("request %+v, want 123.5 s, 1 instance, delay 7.25", r.CoprocRequest)
			}
			if r.OpenCL == nil || r.OpenCL.DeviceVersion != m.OpenCLVersion || r.OpenCL.DriverVersion != m.OpenCLDriver ||
				r.OpenCL.GlobalMemSize != uint64(m.RAM) {
				t.Errorf("OpenCL %+v, want device %q driver %q", r.OpenCL, m.OpenCLVersion, m.OpenCLDriver)
			}
			switch m.Type {
			case protocol.ResourceNVIDIA:
				if !r.HaveCUDA || r.CUDAVersion != m.CUDAVersion || r.DriverVersion != m.DriverVersion ||
					r.ComputeCapability != m.Major*100+m.Minor {
					t.Errorf("NVIDIA %+v, want CUDA %d driver %d cc %d.%d", r, m.CUDAVersion, m.DriverVersion, m.Major, m.Minor)
				}
			case protocol.ResourceAMD:
				if r.HaveCAL != (m.CALVersion != "") || (m.CALVersion != "" && r.DriverVersion == 0) {
					t.Errorf("AMD %+v, want CAL %q", r, m.CALVersion)
				}
			}
		})
	}
}

// gpuOptions is testOptions for hosts with a GPU each.
func gpuOptions(f *fakeProject) Options {
	o := testOptions(f)
	o.GPUFrac, o.NCPUs, o.Hosts = 1, 2, 2
	return o
}

// coprocAsks returns, for each request, the seconds it asked of its GPUs.
func coprocAsks(reqs []fakeRequest) []float64 {
	out := make([]float64, len(reqs))
	for i, r := range reqs {
		for _, c := range r.req.Coprocs.Resources() {
			out[i] += c.ReqSecs
		}
	}
	return out
}

// A GPU host asks for GPU work in <coprocs> and for CPU work beside it;
// the GPU tasks run on the GPU (the version's <coproc>), the CPU tasks on
// the CPUs, and both stay busy.
func TestGPUHostKeepsGPUAndCPUsBusy(t *testing.T) {
	t.Parallel()
	f := newFakeProject(t)
	f.set(func(f *fakeProject) { f.jobs, f.maxPerRPC, f.gpuType, f.gpuCPUs = -1, 8, "any", 0.2 })
	opts := gpuOptions(f)
	opts.ComputeTime = 600 * time.Millisecond
	// 8 s, not 4: the busy fractions count from the start, before the
	// first reply, and CI under -race failed at 0.54 and 0.59 over 4 s.
	s, _ := runFor(t, opts, 8*time.Second)
	hw := s.Hardware
	t.Logf("hardware %+v, %d rpcs", hw, s.RPCs)
	if hw.GPUHosts != 2 || hw.GPUs < 2 {
		t.Fatalf("hardware %+v: want 2 GPU hosts", hw)
	}
	if hw.GPUTasks == 0 || hw.NoDevice != 0 {
		t.Errorf("GPU tasks %d, no-device %d: want GPU work done and none misplaced", hw.GPUTasks, hw.NoDevice)
	}
	// Loose enough for a loaded machine under -race; unloaded runs reach
	// 0.96 and more, and a GPU left without work stays near 0.
	if hw.GPUBusyFrac < 0.5 || hw.GPUHostCPUBusyFrac < 0.5 {
		t.Errorf("GPU busy %.2f, CPU busy on GPU hosts %.2f: want both above 0.5", hw.GPUBusyFrac, hw.GPUHostCPUBusyFrac)
	}
	reqs := f.snapshotRequests()
	asked := 0
	for i, r := range reqs {
		if r.req.Coprocs == nil || len(r.req.Coprocs.Resources()) == 0 {
			t.Fatalf("request %d has no <coprocs>", i)
		}
		if coprocAsks(reqs)[i] > 0 {
			asked++
		}
	}
	if asked == 0 {
		t.Errorf("no request asked for GPU work")
	}
	var gpuV, cpuV bool
	for _, v := range s.Versions {
		gpuV = gpuV || (v.Version == 200 && v.PlanClass == "gpu" && v.Tasks > 0)
		cpuV = cpuV || (v.Version == 100 && v.Tasks > 0)
	}
	if !gpuV || !cpuV {
		t.Errorf("versions %+v: want tasks of the GPU version 200 and the CPU version 100", s.Versions)
	}
}

// A project without a GPU app: the GPU's requests get nothing and back off
// alone, while the CPU keeps getting work; once the project says
// <no_rsc_apps> for the GPU the host stops asking for it.
func TestGPUResourceBacksOffAloneAndNoRscAppsStopsIt(t *testing.T) {
	t.Parallel()
	for _, noRsc := range []bool{false, true} {
		t.Run(fmt.Sprint("no_rsc_apps=", noRsc), func(t *testing.T) {
			t.Parallel()
			f := newFakeProject(t)
			f.set(func(f *fakeProject) {
				f.jobs, f.maxPerRPC = -1, 4
				if noRsc {
					f.noRsc = []string{protocol.ResourceNVIDIA, protocol.ResourceAMD}
				}
			})
			opts := gpuOptions(f)
			opts.Hosts = 1
			s, _ := runFor(t, opts, 1500*time.Millisecond)
			reqs := f.snapshotRequests()
			asks := coprocAsks(reqs)
			var gpuAsks, cpuAsks int
			var lastGPU time.Time
			for i, r := range reqs {
				if asks[i] > 0 {
					gpuAsks++
					// The no-work back-off (10 min scaled 1/3000, jitter
					// 0.5 to 1.5) spaces the GPU's asks by 100 ms at least.
					if !noRsc && !lastGPU.IsZero() && r.at.Sub(lastGPU) < 100*time.Millisecond {
						t.Errorf("request %d asked the GPU again %v after the last: want it backed off", i, r.at.Sub(lastGPU))
					}
					lastGPU = r.at
					if noRsc && i > 0 {
						t.Errorf("request %d asked the GPU for %g s after <no_rsc_apps>", i, asks[i])
					}
				}
				if r.req.WorkReqSeconds > 0 {
					cpuAsks++
				}
			}
			t.Logf("%d requests: %d asked GPU work, %d CPU work; acked %d", len(reqs), gpuAsks, cpuAsks, s.ResultsAcked)
			if s.ResultsAcked == 0 || cpuAsks < 3 {
				t.Errorf("CPU work: %d acked, %d requests for it; want it going on", s.ResultsAcked, cpuAsks)
			}
			if !noRsc && (gpuAsks == 0 || gpuAsks > 10) {
				t.Errorf("GPU asked %d times in 1.5 s, CPU %d: want a few, backed off on its own", gpuAsks, cpuAsks)
			}
		})
	}
}

// A multi-threaded version's task occupies its avg_ncpus CPUs and reports
// that many CPU seconds per second.
func TestMultiThreadedTasksUseTheirCPUs(t *testing.T) {
	t.Parallel()
	f := newFakeProject(t)
	f.set(func(f *fakeProject) { f.jobs, f.maxPerRPC, f.mtNCPUs = -1, 4, 4 })
	opts := testOptions(f)
	opts.MTFrac, opts.MTCPUs, opts.ComputeTime = 1, 4, 200*time.Millisecond
	s, _ := runFor(t, opts, 1500*time.Millisecond)
	t.Logf("hardware %+v", s.Hardware)
	if s.Hardware.MTHosts != 1 || s.Hardware.MTTasks == 0 || s.Hardware.CPUBusyFrac < 0.5 {
		t.Errorf("hardware %+v: want the multi-core host running mt tasks on busy CPUs", s.Hardware)
	}
	n := 0
	for _, r := range f.snapshotRequests() {
		if !strings.Contains(r.req.HostInfo.PFeatures, "avx2") || r.req.HostInfo.PNCPUs != 4 {
			t.Fatalf("host_info p_ncpus %d p_features %q: want 4 CPUs with avx2", r.req.HostInfo.PNCPUs, r.req.HostInfo.PFeatures)
		}
		for _, res := range r.req.Results {
			if res.PlanClass == "mt" && res.ExitStatus == 0 {
				n++
				if math.Abs(res.FinalCPUTime-4*res.FinalElapsedTime) > 1e-6 {
					t.Errorf("%s: cpu %g, elapsed %g; want 4 CPUs' worth", res.Name, res.FinalCPUTime, res.FinalElapsedTime)
				}
			}
		}
	}
	if n == 0 {
		t.Error("no mt task reported")
	}
}

// The on fraction a host reports is the one it measures: it follows the
// host's on/off record (from a history before the run), not the
// configured OnFrac.
func TestReportedOnFractionIsMeasured(t *testing.T) {
	t.Parallel()
	f := newFakeProject(t)
	f.set(func(f *fakeProject) { f.jobs, f.maxPerRPC = -1, 2 })
	opts := testOptions(f)
	opts.OnFrac, opts.OnPeriod, opts.Hosts = 0.5, 60*time.Millisecond, 3
	runFor(t, opts, 2*time.Second)
	var fracs []float64
	for _, r := range f.snapshotRequests() {
		fracs = append(fracs, r.req.TimeStats.OnFrac)
	}
	distinct := slices.Compact(slices.Sorted(slices.Values(fracs)))
	if len(distinct) < 5 {
		t.Fatalf("on_frac values %v: want the measured, changing fraction", distinct)
	}
	mean := 0.0
	for _, f := range fracs {
		mean += f / float64(len(fracs))
	}
	if slices.Max(fracs) > 1 || slices.Min(fracs) <= 0 || math.Abs(mean-0.5) > 0.25 {
		t.Errorf("on_frac from %g to %g, mean %g: want in (0, 1] and near 0.5 for hosts on half the time",
			slices.Min(fracs), slices.Max(fracs), mean)
	}
}

// After every task crashes the host's RPCs back off exponentially: the
// gaps between its requests grow (seed 002), where they were a fixed 1-2
// minutes before.
func TestCrashesBackOffExponentially(t *testing.T) {
	t.Parallel()
	f := newFakeProject(t)
	f.set(func(f *fakeProject) { f.jobs = -1 })
	opts := testOptions(f)
	opts.FailFrac = 1
	opts.BackoffMax = 2 * time.Second
	stop := startRun(t, opts)
	f.waitFor(t, "8 requests", func(f *fakeProject) bool { return len(f.requests) >= 8 })
	s := stop()
	reqs := f.snapshotRequests()
	var gaps []time.Duration
	for i := 2; i < 8; i++ { // from the first report on
		gaps = append(gaps, reqs[i].at.Sub(reqs[i-1].at))
	}
	t.Logf("gaps %v, %d error back-offs", gaps, s.ErrorBackoffs)
	if s.ErrorBackoffs == 0 {
		t.Fatal("no error back-off counted")
	}
	early := gaps[0] + gaps[1]
	late := gaps[4] + gaps[5]
	if late < 4*early {
		t.Errorf("gaps %v: want them growing exponentially (the last two at least 4 times the first two)", gaps)
	}
}

// A project with two schedulers, one down: every host gets through,
// switching to the other within the RPC, so no RPC fails.
func TestSchedulerURLFailover(t *testing.T) {
	t.Parallel()
	down, up := newFakeProject(t), newFakeProject(t)
	down.set(func(f *fakeProject) { f.down = true })
	up.set(func(f *fakeProject) { f.jobs, f.maxPerRPC = -1, 2 })
	opts := testOptions(up)
	opts.Hosts = 6
	opts.SchedulerURL = ""
	opts.Projects = []Project{{Name: "p", SchedulerURL: down.srv.URL + "/scheduler",
		SchedulerURLs: []string{up.srv.URL + "/scheduler"}, Authenticators: []string{"k"}}}
	s, _ := runFor(t, opts, time.Second)
	t.Logf("rpcs %d, errors %d, failovers %d, acked %d; down saw %d", s.RPCs, s.RPCErrors, s.SchedulerFailovers,
		s.ResultsAcked, len(down.snapshotRequests()))
	if s.RPCErrors != 0 || s.ResultsAcked == 0 {
		t.Errorf("%d RPC errors, %d acked: want every RPC through the second scheduler", s.RPCErrors, s.ResultsAcked)
	}
	if s.SchedulerFailovers == 0 || len(down.snapshotRequests()) == 0 {
		t.Errorf("failovers %d: want hosts starting at the down scheduler to move on", s.SchedulerFailovers)
	}
}

// masterPage serves a master page listing the schedulers it is set to.
type masterPage struct {
	srv   *httptest.Server
	mu    sync.Mutex
	urls  []string
	reads int
}

func newMasterPage(t *testing.T, urls ...string) *masterPage {
	m := &masterPage{urls: urls}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.reads++
		io.WriteString(w, "<html><head>\n")
		for i, u := range m.urls {
			if i%2 == 0 {
				fmt.Fprintf(w, "<link rel=\"boinc_scheduler\" href=\"%s\">\n", u)
			} else {
				fmt.Fprintf(w, "<!-- <scheduler>%s</scheduler> -->\n", u)
			}
		}
		io.WriteString(w, "</head><body>a project</body></html>\n")
	}))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *masterPage) set(urls ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.urls = urls
}

func (m *masterPage) readCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reads
}

func TestParseMaster(t *testing.T) {
	page := `<link rel="boinc_scheduler" href=" http://a/cgi ">` + "\n<!-- <scheduler>http://b/cgi</scheduler> --><scheduler>http://a/cgi</scheduler>"
	if got := parseMaster(page); !slices.Equal(got, []string{"http://b/cgi", "http://a/cgi"}) && !slices.Equal(got, []string{"http://a/cgi", "http://b/cgi"}) {
		t.Errorf("parseMaster = %q, want a and b once each", got)
	}
	if got := parseMaster("<html>nothing</html>"); len(got) != 0 {
		t.Errorf("parseMaster of a page without schedulers = %q", got)
	}
}

// A host reads the master page first, and again: periodically (the
// schedulers moved while the old one still works), and after ten failed
// RPCs in a row (the old one is gone), each time following the page to
// the scheduler it lists now.
func TestMasterPageReread(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		reread   time.Duration
		downOldB bool
	}{{"periodic", 300 * time.Millisecond, false}, {"after failures", time.Hour, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, b := newFakeProject(t), newFakeProject(t)
			a.set(func(f *fakeProject) { f.jobs, f.maxPerRPC = -1, 2 })
			b.set(func(f *fakeProject) { f.jobs, f.maxPerRPC = -1, 2 })
			m := newMasterPage(t, a.srv.URL+"/scheduler")
			opts := testOptions(a)
			opts.SchedulerURL = ""
			opts.BackoffMax = 40 * time.Millisecond
			opts.MasterReread = tc.reread
			opts.Projects = []Project{{Name: "p", MasterURL: m.srv.URL, Authenticators: []string{"k"}}}
			stop := startRun(t, opts)
			a.waitFor(t, "requests at the first scheduler", func(f *fakeProject) bool { return len(f.requests) >= 3 })
			m.set(b.srv.URL + "/scheduler")
			if tc.downOldB {
				a.set(func(f *fakeProject) { f.down = true })
			}
			b.waitFor(t, "requests at the scheduler the page lists now", func(f *fakeProject) bool { return len(f.requests) >= 3 })
			s := stop()
			t.Logf("master reads %d (stats %d, errors %d), rpc errors %d", m.readCount(), s.MasterFetches, s.MasterErrors, s.RPCErrors)
			if m.readCount() < 2 {
				t.Errorf("master page read %d times, want at least twice", m.readCount())
			}
			if tc.downOldB && s.RPCErrors < masterFetchPeriod {
				t.Errorf("%d RPC errors before the re-read, want the real client's %d", s.RPCErrors, masterFetchPeriod)
			}
		})
	}
}

// An overloaded reply is not a "no work" reply: the host asks again after
// request_delay, without the work-fetch back-off a project with no work
// gets.
func TestOverloadedIsNotNoWork(t *testing.T) {
	t.Parallel()
	counts := map[bool]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, overloaded := range []bool{false, true} {
		wg.Go(func() {
			f := newFakeProject(t)
			f.set(func(f *fakeProject) { f.overloaded, f.jobs, f.requestDelay = overloaded, 0, 0.03 })
			s, _ := runFor(t, testOptions(f), 1500*time.Millisecond)
			n := 0
			for _, r := range f.snapshotRequests() {
				if r.req.WorkReqSeconds > 0 {
					n++
				}
			}
			mu.Lock()
			counts[overloaded] = n
			mu.Unlock()
			if overloaded && s.Overloaded == 0 {
				t.Errorf("no overloaded reply counted")
			}
		})
	}
	wg.Wait()
	t.Logf("work requests in 1.5 s: overloaded %d, no work %d", counts[true], counts[false])
	if counts[true] < 3*counts[false] {
		t.Errorf("work requests: overloaded %d, no work %d; want the overloaded project asked far more often (request_delay only)",
			counts[true], counts[false])
	}
}

func TestDrawHardware(t *testing.T) {
	o := Options{GPUFrac: 0.5, MTFrac: 0.25, GPUTypes: []string{protocol.ResourceAMD}}.withDefaults()
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "no authenticators") {
		t.Fatalf("validate: %v", err) // only the project is missing
	}
	rng := newTestRand()
	var gpuHosts, mtHosts int
	for range 1000 {
		ncpus, gpus := drawHardware(o, rng)
		if ncpus == o.MTCPUs {
			mtHosts++
		}
		for _, g := range gpus {
			gpuHosts++
			if g.model.Type != protocol.ResourceAMD || g.count < 1 || g.count > 2 || g.speed != g.model.PeakFlops*o.GPUEfficiency {
				t.Fatalf("gpu %+v: want 1-2 AMD GPUs at peak × efficiency", g)
			}
		}
	}
	if math.Abs(float64(gpuHosts)/1000-0.5) > 0.06 || math.Abs(float64(mtHosts)/1000-0.25) > 0.05 {
		t.Errorf("%d GPU hosts, %d multi-core of 1000: want about 500 and 250", gpuHosts, mtHosts)
	}
	bad := Options{GPUTypes: []string{"Voodoo"}}.withDefaults()
	if err := bad.validate(); err == nil || !strings.Contains(err.Error(), "gpu-types") {
		t.Errorf("validate with an unknown GPU type: %v", err)
	}
}

func TestParseProjectSchedulersAndMaster(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte("k1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := ParseProject("http://a/cgi http://b/cgi,2," + keys)
	if err != nil || p.SchedulerURL != "http://a/cgi" || !slices.Equal(p.SchedulerURLs, []string{"http://b/cgi"}) || p.Share != 2 {
		t.Errorf("two schedulers: %+v, %v", p, err)
	}
	p, err = ParseProject("master:http://a/,1," + keys)
	if err != nil || p.MasterURL != "http://a/" || p.SchedulerURL != "" {
		t.Errorf("master page: %+v, %v", p, err)
	}
}
