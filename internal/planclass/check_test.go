package planclass

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/protocol"
)

const gib = 1 << 30

// cpuHost is an 8-CPU Linux host with AVX2 and no GPU.
func cpuHost() Host {
	return Host{
		OSName:        "Linux Ubuntu",
		OSVersion:     "Ubuntu 22.04.3 LTS [6.5.0-14-generic|libc 2.35 (Ubuntu GLIBC 2.35-0ubuntu3.4)]",
		PVendor:       "GenuineIntel",
		PModel:        "Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz [Family 6 Model 158 Stepping 10]",
		PFeatures:     "fpu vme sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma",
		NCPUs:         8,
		PFpops:        4e9,
		MemBytes:      16 * gib,
		ClientVersion: 72002,
		UserID:        7,
	}
}

// gpuHost is cpuHost with an NVIDIA, an AMD and a cc_config coprocessor.
func gpuHost() Host {
	h := cpuHost()
	h.Coprocs = []protocol.Coproc{
		{Type: protocol.ResourceNVIDIA, Count: 1, Name: "RTX 3070", PeakFlops: 1e13, RAM: 7.5 * gib, DriverVersion: 53518,
			CUDAVersion: 12020, ComputeCapability: 806, HaveCUDA: true,
			OpenCL: &protocol.OpenCLProp{DeviceVersion: "OpenCL 3.0 CUDA", GlobalMemSize: 8 * gib, DoubleFPConfig: 63}},
		{Type: protocol.ResourceAMD, Count: 2, Name: "Radeon RX 580", PeakFlops: 5e12, RAM: 4 * gib, DriverVersion: 10041848,
			HaveCAL: true, AMDLibs: true, CALTarget: 20,
			OpenCL: &protocol.OpenCLProp{DeviceVersion: "OpenCL 2.0 AMD-APP (3224.4)", GlobalMemSize: 4 * gib}},
		{Type: protocol.ResourceIntel, Count: 1, PeakFlops: 4e11, RAM: 1 * gib},
		{Type: "miner_asic", Count: 1, PeakFlops: 1e11},
	}
	return h
}

func one(t *testing.T, body string) *Specs {
	t.Helper()
	s, err := Parse(strings.NewReader("<plan_classes><plan_class><name>x</name>" + body + "</plan_class></plan_classes>"))
	if err != nil {
		t.Fatalf("Parse(%s): %v", body, err)
	}
	return s
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

// Every rule refuses the host that breaks it, naming itself, and accepts
// the one that keeps it.
func TestCheckRules(t *testing.T) {
	t.Parallel()
	nv := func(f func(*protocol.Coproc)) func(*Host) { return func(h *Host) { f(&h.Coprocs[0]) } }
	amd := func(f func(*protocol.Coproc)) func(*Host) { return func(h *Host) { f(&h.Coprocs[1]) } }
	tests := []struct {
		name string
		body string
		cpu  bool // cpuHost, else gpuHost
		host func(*Host)
		rule string // "" accepted
	}{
		{"cpu feature present", "<cpu_feature>avx2</cpu_feature><cpu_feature>SSE4_1</cpu_feature>", true, nil, ""},
		{"cpu feature missing", "<cpu_feature>avx2</cpu_feature><cpu_feature>avx512f</cpu_feature>", true, nil, "cpu_feature"},
		{"cpu feature is a whole word", "<cpu_feature>avx5</cpu_feature>", true, nil, "cpu_feature"},
		{"cpu feature in an old client's p_model", "<cpu_feature>sse3</cpu_feature>", true,
			func(h *Host) { h.PFeatures, h.PModel = "", "Pentium 4 [fpu sse sse2 sse3]" }, ""},
		{"min_ncpus met", "<min_ncpus>8</min_ncpus><max_threads>8</max_threads>", true, nil, ""},
		{"min_ncpus not met", "<min_ncpus>8</min_ncpus><max_threads>8</max_threads>", true, func(h *Host) { h.NCPUs = 4 }, "min_ncpus"},
		{"os_regex matches os_version", "<os_regex>Ubuntu 2[0-9]</os_regex>", true, nil, ""},
		{"os_regex does not match", "<os_regex>^CentOS</os_regex>", true, nil, "os_regex"},
		{"min_os_version met (kernel 6.5.0)", "<min_os_version>60500</min_os_version>", true, nil, ""},
		{"min_os_version not met", "<min_os_version>60600</min_os_version>", true, nil, "min_os_version"},
		{"max_os_version not met", "<max_os_version>50000</max_os_version>", true, nil, "max_os_version"},
		{"os version unreadable", "<min_os_version>1</min_os_version>", true, func(h *Host) { h.OSVersion = "unknown" }, "min_os_version"},
		{"windows os version", "<min_os_version>1000000000</min_os_version>", true,
			func(h *Host) { h.OSName, h.OSVersion = "Microsoft Windows 10", "Core x64 Edition, (10.00.19045.00)" }, ""},
		{"min_libc_version met", "<min_libc_version>231</min_libc_version>", true, nil, ""},
		{"min_libc_version not met", "<min_libc_version>236</min_libc_version>", true, nil, "min_libc_version"},
		{"android version on linux", "<min_android_version>40000</min_android_version>", true, nil, "min_android_version"},
		{"android version met", "<min_android_version>40000</min_android_version>", true,
			func(h *Host) { h.OSName, h.OSVersion = "Android", "3.4.0 (Android 4.3.1)" }, ""},
		{"max_android_version not met", "<max_android_version>40000</max_android_version>", true,
			func(h *Host) { h.OSName, h.OSVersion = "Android", "3.4.0 (Android 4.3.1)" }, "max_android_version"},
		{"cpu_vendor_regex matches", "<cpu_vendor_regex>Intel$</cpu_vendor_regex>", true, nil, ""},
		{"cpu_vendor_regex does not match", "<cpu_vendor_regex>AMD</cpu_vendor_regex>", true, nil, "cpu_vendor_regex"},
		{"cpu_model_regex does not match", "<cpu_model_regex>Ryzen</cpu_model_regex>", true, nil, "cpu_model_regex"},
		{"min_core_client_version met", "<min_core_client_version>71600</min_core_client_version>", true, nil, ""},
		{"min_core_client_version not met", "<min_core_client_version>80000</min_core_client_version>", true, nil, "min_core_client_version"},
		{"max_core_client_version not met", "<max_core_client_version>71600</max_core_client_version>", true, nil, "max_core_client_version"},
		{"user_id of the owner", "<user_id>7</user_id>", true, nil, ""},
		{"user_id of someone else", "<user_id>8</user_id>", true, nil, "user_id"},
		{"virtualbox is refused", "<virtualbox/><is64bit/>", true, nil, "virtualbox"},
		{"docker is refused", "<docker/>", true, nil, "docker"},
		{"job ranges are refused", "<min_wu_id>10</min_wu_id>", true, nil, "min_wu_id"},
		{"opencl CPU version is refused", "<opencl/>", true, nil, "opencl"},
		{"mem per cpu: too little memory", "<max_threads>8</max_threads><mem_usage_base_mb>1000</mem_usage_base_mb><mem_usage_per_cpu_mb>1000</mem_usage_per_cpu_mb>",
			true, func(h *Host) { h.MemBytes = 1500 * mega }, "mem_usage_per_cpu_mb"},

		{"nvidia present", "<gpu_type>nvidia</gpu_type>", false, nil, ""},
		{"nvidia absent", "<gpu_type>nvidia</gpu_type>", true, nil, "gpu_type"},
		{"nvidia by resource name", "<gpu_type>NVIDIA</gpu_type><min_nvidia_compcap>900</min_nvidia_compcap>", false, nil, "min_nvidia_compcap"},
		{"amd present as ati", "<gpu_type>ati</gpu_type>", false, nil, ""},
		{"amd absent", "<gpu_type>amd</gpu_type>", true, nil, "gpu_type"},
		{"intel present", "<gpu_type>intel_gpu</gpu_type>", false, nil, ""},
		{"apple absent", "<gpu_type>apple</gpu_type>", false, nil, "gpu_type"},
		{"apple metal too old", "<gpu_type>apple_gpu</gpu_type><min_metal_support>3</min_metal_support>", false,
			func(h *Host) {
				h.Coprocs = append(h.Coprocs, protocol.Coproc{Type: protocol.ResourceApple, Count: 1, MetalSupport: 2})
			}, "min_metal_support"},
		{"cc_config coprocessor present", "<gpu_type>miner_asic</gpu_type>", false, nil, ""},
		{"cc_config coprocessor absent", "<gpu_type>fpga</gpu_type>", false, nil, "gpu_type"},
		{"gpu_type_regex matches", "<gpu_type_regex>^miner</gpu_type_regex>", false, nil, ""},
		{"gpu_type_regex matches nothing", "<gpu_type_regex>^fpga</gpu_type_regex>", false, nil, "gpu_type_regex"},
		{"cuda present", "<gpu_type>nvidia</gpu_type><cuda/>", false, nil, ""},
		{"cuda runtime missing", "<gpu_type>nvidia</gpu_type><cuda/>", false, nv(func(c *protocol.Coproc) { c.HaveCUDA = false }), "cuda"},
		{"min_cuda_version met", "<gpu_type>nvidia</gpu_type><cuda/><min_cuda_version>11000</min_cuda_version>", false, nil, ""},
		{"min_cuda_version not met", "<gpu_type>nvidia</gpu_type><cuda/><min_cuda_version>12030</min_cuda_version>", false, nil, "min_cuda_version"},
		{"max_cuda_version not met", "<gpu_type>nvidia</gpu_type><cuda/><max_cuda_version>11000</max_cuda_version>", false, nil, "max_cuda_version"},
		{"cuda version ignored without cuda", "<gpu_type>nvidia</gpu_type><min_cuda_version>12030</min_cuda_version>", false, nil, ""},
		{"min_nvidia_compcap met", "<gpu_type>nvidia</gpu_type><min_nvidia_compcap>500</min_nvidia_compcap>", false, nil, ""},
		{"max_nvidia_compcap not met", "<gpu_type>nvidia</gpu_type><max_nvidia_compcap>750</max_nvidia_compcap>", false, nil, "max_nvidia_compcap"},
		{"min_gpu_ram_mb met from OpenCL total", "<gpu_type>nvidia</gpu_type><min_gpu_ram_mb>8192</min_gpu_ram_mb>", false, nil, ""},
		{"min_gpu_ram_mb not met", "<gpu_type>nvidia</gpu_type><min_gpu_ram_mb>8193</min_gpu_ram_mb>", false, nil, "min_gpu_ram_mb"},
		{"min_gpu_ram_mb from available RAM without OpenCL", "<gpu_type>intel</gpu_type><min_gpu_ram_mb>2048</min_gpu_ram_mb>", false, nil, "min_gpu_ram_mb"},
		{"min_driver_version met", "<gpu_type>nvidia</gpu_type><min_driver_version>47000</min_driver_version>", false, nil, ""},
		{"min_driver_version not met", "<gpu_type>nvidia</gpu_type><min_driver_version>54000</min_driver_version>", false, nil, "min_driver_version"},
		{"max_driver_version not met", "<gpu_type>amd</gpu_type><max_driver_version>10001000</max_driver_version>", false, nil, "max_driver_version"},
		{"driver version unknown passes", "<gpu_type>nvidia</gpu_type><min_driver_version>54000</min_driver_version>", false,
			nv(func(c *protocol.Coproc) { c.DriverVersion = 0 }), ""},
		{"opencl present", "<gpu_type>amd</gpu_type><opencl/>", false, nil, ""},
		{"opencl missing", "<gpu_type>amd</gpu_type><opencl/>", false, amd(func(c *protocol.Coproc) { c.OpenCL = nil }), "opencl"},
		{"min_opencl_version met", "<gpu_type>nvidia</gpu_type><opencl/><min_opencl_version>120</min_opencl_version>", false, nil, ""},
		{"min_opencl_version not met", "<gpu_type>amd</gpu_type><opencl/><min_opencl_version>210</min_opencl_version>", false, nil, "min_opencl_version"},
		{"max_opencl_version not met", "<gpu_type>nvidia</gpu_type><opencl/><max_opencl_version>200</max_opencl_version>", false, nil, "max_opencl_version"},
		{"min_opencl_driver_revision not met", "<gpu_type>amd</gpu_type><opencl/><min_opencl_driver_revision>322441</min_opencl_driver_revision>", false, nil, "min_opencl_driver_revision"},
		{"max_opencl_driver_revision met", "<gpu_type>amd</gpu_type><opencl/><max_opencl_driver_revision>322440</max_opencl_driver_revision>", false, nil, ""},
		{"double precision present", "<gpu_type>nvidia</gpu_type><opencl/><double_precision_fp/>", false, nil, ""},
		{"double precision missing", "<gpu_type>amd</gpu_type><opencl/><double_precision_fp/>", false, nil, "double_precision_fp"},
		{"need_amd_libs present", "<gpu_type>amd</gpu_type><need_amd_libs/>", false, nil, ""},
		{"need_ati_libs missing", "<gpu_type>amd</gpu_type><need_ati_libs/>", false, nil, "need_ati_libs"},
		{"without_opencl on an OpenCL GPU", "<gpu_type>amd</gpu_type><without_opencl/>", false, nil, "without_opencl"},
		{"min_cal_target not met", "<gpu_type>amd</gpu_type><min_cal_target>21</min_cal_target>", false, nil, "min_cal_target"},
		{"cal runtime missing", "<gpu_type>amd</gpu_type><cal/>", false, amd(func(c *protocol.Coproc) { c.HaveCAL = false }), "cal"},
		{"min_gpu_peak_flops not met", "<gpu_type>nvidia</gpu_type><min_gpu_peak_flops>2e13</min_gpu_peak_flops>", false, nil, "min_gpu_peak_flops"},
		{"max_gpu_peak_flops not met", "<gpu_type>nvidia</gpu_type><max_gpu_peak_flops>1e12</max_gpu_peak_flops>", false, nil, "max_gpu_peak_flops"},
		{"ngpus<0: a task larger than the GPU", "<gpu_type>nvidia</gpu_type><ngpus>-1</ngpus><gpu_ram_used_mb>9000</gpu_ram_used_mb>", false, nil, "ngpus"},
		{"GPU with no instance is absent", "<gpu_type>nvidia</gpu_type>", false, nv(func(c *protocol.Coproc) { c.Count = 0 }), "gpu_type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := gpuHost()
			if tc.cpu {
				h = cpuHost()
			}
			if tc.host != nil {
				tc.host(&h)
			}
			u, err := one(t, tc.body).Check("x", h)
			if tc.rule == "" {
				if err != nil {
					t.Fatalf("Check = %v, want accepted", err)
				}
				return
			}
			var r *Refusal
			if !errors.As(err, &r) || !errors.Is(err, ErrRefused) {
				t.Fatalf("Check = %+v, %v; want a refusal by <%s>", u, err, tc.rule)
			}
			if r.Rule != tc.rule || r.Class != "x" || r.Detail == "" {
				t.Errorf("refusal = %+v, want rule %s of class x with a detail", r, tc.rule)
			}
		})
	}
}

// The usage of an accepted host is BOINC's: CPUs, GPU share and memory,
// projected and peak FLOPS, command line.
func TestCheckUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		cpu  bool
		host func(*Host)
		want Usage
	}{
		{"sequential CPU class", "<cpu_feature>avx</cpu_feature>", true, nil,
			Usage{AvgNCPUs: 1, MaxNCPUs: 1, Resource: "CPU", ProjectedFlops: 4e9, PeakFlops: 4e9}},
		{"projected_flops_scale", "<projected_flops_scale>1.5</projected_flops_scale>", true, nil,
			Usage{AvgNCPUs: 1, MaxNCPUs: 1, Resource: "CPU", ProjectedFlops: 6e9, PeakFlops: 4e9}},
		{"mt capped by the host's CPUs", "<max_threads>16</max_threads><nthreads_cmdline/>", true, nil,
			Usage{AvgNCPUs: 8, MaxNCPUs: 8, Resource: "CPU", ProjectedFlops: 32e9, PeakFlops: 32e9, Cmdline: "--nthreads 8"}},
		{"mt capped by max_threads", "<max_threads>4</max_threads><nthreads_cmdline>1</nthreads_cmdline>", true, nil,
			Usage{AvgNCPUs: 4, MaxNCPUs: 4, Resource: "CPU", ProjectedFlops: 16e9, PeakFlops: 16e9, Cmdline: "--nthreads 4"}},
		{"mt capped by memory per CPU", "<max_threads>8</max_threads><mem_usage_base_mb>1024</mem_usage_base_mb><mem_usage_per_cpu_mb>1024</mem_usage_per_cpu_mb><nthreads_cmdline/>",
			true, func(h *Host) { h.MemBytes = 4 * gib },
			Usage{AvgNCPUs: 3, MaxNCPUs: 3, Resource: "CPU", ProjectedFlops: 12e9, PeakFlops: 12e9, MemBytes: 4 * gib,
				Cmdline: "--memory_size_mb 4096 --nthreads 3"}},
		{"avg_ncpus fixed", "<avg_ncpus>2</avg_ncpus><max_threads>8</max_threads>", true, nil,
			Usage{AvgNCPUs: 2, MaxNCPUs: 2, Resource: "CPU", ProjectedFlops: 8e9, PeakFlops: 8e9}},
		{"no benchmark: 1e9 FLOPS", "<max_threads>2</max_threads>", true, func(h *Host) { h.PFpops = 0 },
			Usage{AvgNCPUs: 2, MaxNCPUs: 2, Resource: "CPU", ProjectedFlops: 2e9, PeakFlops: 2e9}},
		// cpu_frac 0.1 of the work on a 4e9 CPU, the rest on a 1e13 GPU:
		// y = 0.1*1e13 + 0.9*4e9 = 1.0036e12; speed = 4e9*1e13/y.
		{"nvidia defaults", "<gpu_type>nvidia</gpu_type>", false, nil,
			Usage{AvgNCPUs: 1e12 / 1.0036e12, MaxNCPUs: 1e12 / 1.0036e12, Resource: "NVIDIA", GPUUsage: 1,
				ProjectedFlops: 4e22 / 1.0036e12, PeakFlops: 1e13 + 1e12/1.0036e12*4e9}},
		{"amd half a GPU, avg_ncpus and scales", "<gpu_type>amd</gpu_type><ngpus>0.5</ngpus><cpu_frac>0.5</cpu_frac><avg_ncpus>1</avg_ncpus>" +
			"<gpu_peak_flops_scale>0.4</gpu_peak_flops_scale><projected_flops_scale>2</projected_flops_scale><gpu_ram_used_mb>1000</gpu_ram_used_mb>", false, nil,
			// GPU part 0.4*0.5*5e12 = 1e12; y = 0.5e12 + 2e9.
			Usage{AvgNCPUs: 1, MaxNCPUs: 1, Resource: "ATI", GPUUsage: 0.5, GPURAM: 1000 * mega,
				ProjectedFlops: 2 * 4e9 * 1e12 / 0.502e12, PeakFlops: 1e12 + 4e9}},
		{"ngpus<0 packs tasks by memory", "<gpu_type>nvidia</gpu_type><ngpus>-1</ngpus><gpu_ram_used_mb>3000</gpu_ram_used_mb><cpu_frac>0</cpu_frac>", false, nil,
			Usage{AvgNCPUs: 0, MaxNCPUs: 0, Resource: "NVIDIA", GPUUsage: 0.5, GPURAM: 3000 * mega, ProjectedFlops: 5e12, PeakFlops: 5e12}},
		{"min_gpu_ram_mb is the task's GPU memory", "<gpu_type>nvidia</gpu_type><min_gpu_ram_mb>2048</min_gpu_ram_mb><cpu_frac>0</cpu_frac>", false, nil,
			Usage{Resource: "NVIDIA", GPUUsage: 1, GPURAM: 2 * gib, ProjectedFlops: 1e13, PeakFlops: 1e13}},
		{"GPU with unknown speed is estimated as a CPU", "<gpu_type>miner_asic</gpu_type><cpu_frac>0.2</cpu_frac>", false,
			func(h *Host) { h.Coprocs[3].PeakFlops = 0 },
			Usage{AvgNCPUs: 0.2, MaxNCPUs: 0.2, Resource: "miner_asic", GPUUsage: 1, ProjectedFlops: 4e9, PeakFlops: 4e9}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := gpuHost()
			if tc.cpu {
				h = cpuHost()
			}
			if tc.host != nil {
				tc.host(&h)
			}
			got, err := one(t, tc.body).Check("x", h)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			w := tc.want
			if got.Resource != w.Resource || got.Cmdline != w.Cmdline || !near(got.AvgNCPUs, w.AvgNCPUs) || !near(got.MaxNCPUs, w.MaxNCPUs) ||
				!near(got.GPUUsage, w.GPUUsage) || !near(got.GPURAM, w.GPURAM) || !near(got.ProjectedFlops, w.ProjectedFlops) ||
				!near(got.PeakFlops, w.PeakFlops) || !near(got.MemBytes, w.MemBytes) {
				t.Errorf("Check =\n %+v\nwant\n %+v", got, w)
			}
		})
	}
}

func TestCPUUsage(t *testing.T) {
	t.Parallel()
	if u := CPUUsage(cpuHost()); u != (Usage{AvgNCPUs: 1, MaxNCPUs: 1, Resource: "CPU", ProjectedFlops: 4e9, PeakFlops: 4e9}) {
		t.Errorf("CPUUsage = %+v", u)
	}
	if u := CPUUsage(Host{}); u.ProjectedFlops != 1e9 || u.PeakFlops != 1e9 {
		t.Errorf("CPUUsage of a host with no benchmark = %+v, want 1e9 FLOPS", u)
	}
}

func TestCheckUnknownClass(t *testing.T) {
	t.Parallel()
	s := one(t, "")
	if _, err := s.Check("y", cpuHost()); !errors.Is(err, ErrUnknown) || errors.Is(err, ErrRefused) {
		t.Errorf("Check(unknown) = %v, want ErrUnknown", err)
	}
	var none *Specs
	if _, err := none.Check("x", cpuHost()); !errors.Is(err, ErrUnknown) {
		t.Errorf("nil Specs: Check = %v, want ErrUnknown", err)
	}
	if none.Has("x") || none.Names() != nil {
		t.Error("nil Specs has classes")
	}
}
