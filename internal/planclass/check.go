package planclass

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/taskserver/taskserver/internal/protocol"
)

// ErrRefused is wrapped by every refusal of a host by a class; the error
// is a *Refusal.
var ErrRefused = errors.New("plan class refuses host")

// ErrUnknown is wrapped by the error for a class the file does not define.
var ErrUnknown = errors.New("unknown plan class")

// Refusal says which rule of which class turned a host away.
type Refusal struct {
	Class string
	// Rule is the plan_class_spec.xml element that refused, e.g.
	// "min_gpu_ram_mb" or "gpu_type".
	Rule string
	// Detail is for humans: what the host has against what the class wants.
	Detail string
}

// Error names the class, the rule and the detail, for logs and operators.
func (r *Refusal) Error() string {
	return fmt.Sprintf("plan class %q refuses host: <%s>: %s", r.Class, r.Rule, r.Detail)
}

// Unwrap makes errors.Is(err, ErrRefused) true.
func (r *Refusal) Unwrap() error { return ErrRefused }

// Host is what a plan-class check needs of a host and its request.
type Host struct {
	OSName, OSVersion string
	PVendor, PModel   string
	PFeatures         string // space-separated CPU features (host.p_features)
	// NCPUs is the CPUs the project may use (BOINC's effective_ncpus:
	// after the volunteer's max_ncpus_pct and the project's limits).
	NCPUs  int
	PFpops float64 // per-CPU benchmark FLOPS
	// MemBytes is the memory a task may use (BOINC's usable_ram); 0 is
	// unknown, and then no memory limit applies.
	MemBytes      float64
	ClientVersion int // major*10000 + minor*100 + release
	Coprocs       []protocol.Coproc
	// UserID is the host's owner, for classes limited to one user.
	UserID int64
}

// Usage is what one task of an app version uses on a host (BOINC's HOST_USAGE).
type Usage struct {
	AvgNCPUs, MaxNCPUs float64
	Resource           string  // protocol.ResourceCPU, or the coprocessor type the task uses
	GPUUsage           float64 // instances of Resource per task (0 for a CPU version)
	GPURAM             float64 // bytes of GPU memory a task needs (0 unknown)
	ProjectedFlops     float64 // FLOPS a task is projected to get on this host (BOINC's projected_flops)
	PeakFlops          float64 // peak FLOPS of what the task uses
	Cmdline            string  // e.g. "--nthreads 4" for nthreads_cmdline
	// MemBytes is the memory a task uses when the class says
	// (mem_usage_base_mb, mem_usage_per_cpu_mb); it overrides the job's
	// rsc_memory_bound. 0: the job's bound.
	MemBytes float64
}

// defaultFlops is BOINC's stand-in for a host with no benchmark.
const defaultFlops = 1e9

// CPUUsage is the usage of a version with no plan class: one CPU, at the
// host's benchmark speed (1e9 FLOPS when it has none).
func CPUUsage(h Host) Usage {
	f := cpuFlops(h)
	return Usage{AvgNCPUs: 1, MaxNCPUs: 1, Resource: protocol.ResourceCPU, ProjectedFlops: f, PeakFlops: f}
}

func cpuFlops(h Host) float64 {
	if !(h.PFpops > 0) {
		return defaultFlops
	}
	return h.PFpops
}

// Check decides whether a version of class name may be sent to h and, if
// so, what a task of it uses there. A refusal wraps ErrRefused and is a
// *Refusal; a class the file does not define wraps ErrUnknown.
func (s *Specs) Check(name string, h Host) (Usage, error) {
	c, err := s.lookup(name)
	if err != nil {
		return Usage{}, err
	}
	return c.check(h)
}

// check follows BOINC's PLAN_CLASS_SPEC::check, rule by rule, in its
// order.
func (c *class) check(h Host) (Usage, error) {
	refuse := func(rule, format string, args ...any) (Usage, error) {
		return Usage{}, &Refusal{Class: c.name, Rule: rule, Detail: fmt.Sprintf(format, args...)}
	}
	if c.unsupported != "" {
		return refuse(c.unsupported, "%s", c.unsupportedWhy)
	}
	if c.userID != 0 && h.UserID != c.userID {
		return refuse("user_id", "only for user %d", c.userID)
	}
	u := CPUUsage(h)
	cpu := cpuFlops(h)

	// CPU features: older clients list them in p_model, in brackets.
	if len(c.cpuFeatures) > 0 {
		have := " " + h.PFeatures + " "
		if i := strings.LastIndexByte(h.PModel, '['); i >= 0 {
			f := h.PModel[i+1:]
			if j := strings.IndexByte(f, ']'); j >= 0 {
				f = f[:j]
			}
			have += " " + f + " "
		}
		have = strings.ToLower(strings.Join(strings.Fields(have), " "))
		have = " " + have + " "
		for _, f := range c.cpuFeatures {
			if !strings.Contains(have, " "+f+" ") {
				return refuse("cpu_feature", "CPU lacks %q", f)
			}
		}
	}
	if c.minNCPUs > 0 && float64(h.NCPUs) < c.minNCPUs {
		return refuse("min_ncpus", "%d usable CPUs, want %g", h.NCPUs, c.minNCPUs)
	}
	if c.osRegex != nil && !c.osRegex.MatchString(h.OSVersion) {
		return refuse("os_regex", "OS version %q does not match", h.OSVersion)
	}
	if c.minOSVersion != 0 || c.maxOSVersion != 0 {
		v := osVersionNum(h.OSName, h.OSVersion)
		switch {
		case v == 0:
			rule := "min_os_version"
			if c.minOSVersion == 0 {
				rule = "max_os_version"
			}
			return refuse(rule, "cannot read a version number from OS %q version %q", h.OSName, h.OSVersion)
		case c.minOSVersion != 0 && v < c.minOSVersion:
			return refuse("min_os_version", "OS version %.0f, want at least %.0f", v, c.minOSVersion)
		case c.maxOSVersion != 0 && v > c.maxOSVersion:
			return refuse("max_os_version", "OS version %.0f, want at most %.0f", v, c.maxOSVersion)
		}
	}
	if c.minAndroidVersion != 0 || c.maxAndroidVersion != 0 {
		if !strings.EqualFold(h.OSName, "android") {
			return refuse("min_android_version", "OS %q is not Android", h.OSName)
		}
		v := androidVersion(h.OSVersion)
		switch {
		case c.minAndroidVersion > 0 && v < c.minAndroidVersion:
			return refuse("min_android_version", "Android version %d, want at least %d", v, c.minAndroidVersion)
		case c.maxAndroidVersion != 0 && v > c.maxAndroidVersion:
			return refuse("max_android_version", "Android version %d, want at most %d", v, c.maxAndroidVersion)
		}
	}
	if c.minLibcVersion != 0 {
		if v := libcVersion(h.OSVersion); v < c.minLibcVersion {
			return refuse("min_libc_version", "libc version %d, want at least %d", v, c.minLibcVersion)
		}
	}
	if c.cpuVendorRegex != nil && !c.cpuVendorRegex.MatchString(h.PVendor) {
		return refuse("cpu_vendor_regex", "CPU vendor %q does not match", h.PVendor)
	}
	if c.cpuModelRegex != nil && !c.cpuModelRegex.MatchString(h.PModel) {
		return refuse("cpu_model_regex", "CPU model %q does not match", h.PModel)
	}
	if c.minClient != 0 && h.ClientVersion < c.minClient {
		return refuse("min_core_client_version", "client version %d, want at least %d", h.ClientVersion, c.minClient)
	}
	if c.maxClient != 0 && h.ClientVersion > c.maxClient {
		return refuse("max_core_client_version", "client version %d, want at most %d", h.ClientVersion, c.maxClient)
	}

	gpu, rule, why := c.findGPU(h)
	if rule != "" {
		return refuse(rule, "%s", why)
	}
	if c.opencl && gpu == nil {
		return refuse("opencl", "OpenCL CPU versions are not supported: this server does not read the client's OpenCL CPU platforms")
	}
	if gpu == nil {
		return c.cpuUsage(h, u, cpu)
	}

	// The device's memory: its total as OpenCL reports it, as BOINC reads
	// it, else what the client reports of the device (available memory,
	// or the total when it reports none).
	gpuRAM := gpu.RAM
	if gpu.OpenCL != nil && gpu.OpenCL.GlobalMemSize > 0 {
		gpuRAM = float64(gpu.OpenCL.GlobalMemSize)
	}
	if c.opencl {
		if gpu.OpenCL == nil {
			return refuse("opencl", "the %s GPU does not do OpenCL", gpu.Type)
		}
		if r, why := c.openCLCheck(gpu.OpenCL); r != "" {
			return refuse(r, "%s", why)
		}
	}
	if c.minGPURAMMB > 0 && c.minGPURAMMB*mega > gpuRAM {
		return refuse("min_gpu_ram_mb", "GPU has %.0f MB, want %g MB", gpuRAM/mega, c.minGPURAMMB)
	}
	if drv := gpu.DriverVersion; drv != 0 {
		if c.minDriver != 0 && drv < c.minDriver {
			return refuse("min_driver_version", "driver version %d, want at least %d", drv, c.minDriver)
		}
		if c.maxDriver != 0 && drv > c.maxDriver {
			return refuse("max_driver_version", "driver version %d, want at most %d", drv, c.maxDriver)
		}
	}

	u.GPURAM = c.gpuRAMUsedMB * mega
	if u.GPURAM == 0 {
		u.GPURAM = c.minGPURAMMB * mega
	}
	gpuUsage := 1.0
	switch {
	case c.ngpus < 0:
		n := 0.0
		if gpuRAM > 0 {
			n = math.Floor(gpuRAM / u.GPURAM)
		}
		if n < 1 {
			return refuse("ngpus", "a task needs %.0f MB of GPU memory; the GPU has %.0f MB", u.GPURAM/mega, gpuRAM/mega)
		}
		gpuUsage = 1 / n
	case c.ngpus > 0:
		gpuUsage = c.ngpus
	}
	u.Resource = gpu.Type
	u.GPUUsage = gpuUsage
	if !(gpu.PeakFlops > 0) {
		// Speed unknown: estimated as a CPU version would be.
		u.AvgNCPUs = c.cpuFrac
	} else {
		if c.minGPUPeakFlops > 0 && gpu.PeakFlops < c.minGPUPeakFlops {
			return refuse("min_gpu_peak_flops", "GPU peak %.3g FLOPS, want at least %.3g", gpu.PeakFlops, c.minGPUPeakFlops)
		}
		if c.maxGPUPeakFlops > 0 && gpu.PeakFlops > c.maxGPUPeakFlops {
			return refuse("max_gpu_peak_flops", "GPU peak %.3g FLOPS, want at most %.3g", gpu.PeakFlops, c.maxGPUPeakFlops)
		}
		gpuFlops := c.gpuPeakFlopsScale * gpuUsage * gpu.PeakFlops
		// The task alternates between the CPU (cpu_frac of its work) and
		// the GPU: its speed, and the share of a CPU it keeps busy.
		y := c.cpuFrac*gpuFlops + (1-c.cpuFrac)*cpu
		u.ProjectedFlops = cpu * gpuFlops / y * c.projectedFlopsScale
		u.AvgNCPUs = c.cpuFrac * gpuFlops / y
		if c.avgNCPUs > 0 {
			u.AvgNCPUs = c.avgNCPUs
		}
		u.PeakFlops = gpuFlops + u.AvgNCPUs*cpu
	}
	u.MaxNCPUs = u.AvgNCPUs
	return u, nil
}

// findGPU returns the coprocessor the class uses, or nil for a CPU class,
// or the rule that refuses the host.
func (c *class) findGPU(h Host) (gpu *protocol.Coproc, rule, why string) {
	lookup := func(typ string) *protocol.Coproc {
		for i := range h.Coprocs {
			if h.Coprocs[i].Type == typ && h.Coprocs[i].Count > 0 {
				return &h.Coprocs[i]
			}
		}
		return nil
	}
	vendor := vendorOf(c.gpuType)
	switch {
	case vendor != "":
		gpu = lookup(vendor)
		if gpu == nil {
			return nil, "gpu_type", "no " + vendor + " GPU"
		}
	case c.gpuTypeRegex != nil:
		for i := range h.Coprocs {
			if h.Coprocs[i].Count > 0 && c.gpuTypeRegex.MatchString(h.Coprocs[i].Type) {
				gpu = &h.Coprocs[i]
				break
			}
		}
		if gpu == nil {
			return nil, "gpu_type_regex", "no coprocessor type matches"
		}
		return gpu, "", ""
	case c.gpuType != "":
		if gpu = lookup(c.gpuType); gpu == nil {
			return nil, "gpu_type", "no " + c.gpuType + " coprocessor"
		}
		return gpu, "", ""
	default:
		return nil, "", ""
	}
	switch vendor {
	case protocol.ResourceAMD:
		if c.needATILibs && !gpu.ATILibs {
			return nil, "need_ati_libs", "the client found no ATI runtime libraries"
		}
		if !c.needATILibs && c.needAMDLibs && !gpu.AMDLibs {
			return nil, "need_amd_libs", "the client found no AMD runtime libraries"
		}
		if c.withoutOpenCL && gpu.OpenCL != nil {
			return nil, "without_opencl", "the GPU does OpenCL; the class is for CAL-only GPUs"
		}
		if c.minCALTarget != 0 && gpu.CALTarget < c.minCALTarget {
			return nil, "min_cal_target", fmt.Sprintf("CAL target %d, want at least %d", gpu.CALTarget, c.minCALTarget)
		}
		if c.maxCALTarget != 0 && gpu.CALTarget > c.maxCALTarget {
			return nil, "max_cal_target", fmt.Sprintf("CAL target %d, want at most %d", gpu.CALTarget, c.maxCALTarget)
		}
		if c.cal && !gpu.HaveCAL {
			return nil, "cal", "the client found no CAL runtime"
		}
	case protocol.ResourceNVIDIA:
		cc := gpu.ComputeCapability
		if c.minCompcap != 0 && cc < c.minCompcap {
			return nil, "min_nvidia_compcap", fmt.Sprintf("compute capability %d, want at least %d", cc, c.minCompcap)
		}
		if c.maxCompcap != 0 && cc > c.maxCompcap {
			return nil, "max_nvidia_compcap", fmt.Sprintf("compute capability %d, want at most %d", cc, c.maxCompcap)
		}
		if c.cuda {
			if !gpu.HaveCUDA {
				return nil, "cuda", "the client found no CUDA runtime"
			}
			if c.minCUDA != 0 && gpu.CUDAVersion < c.minCUDA {
				return nil, "min_cuda_version", fmt.Sprintf("CUDA version %d, want at least %d", gpu.CUDAVersion, c.minCUDA)
			}
			if c.maxCUDA != 0 && gpu.CUDAVersion > c.maxCUDA {
				return nil, "max_cuda_version", fmt.Sprintf("CUDA version %d, want at most %d", gpu.CUDAVersion, c.maxCUDA)
			}
		}
	case protocol.ResourceApple:
		if c.minMetalSupport != 0 && gpu.MetalSupport < c.minMetalSupport {
			return nil, "min_metal_support", fmt.Sprintf("Metal support %d, want at least %d", gpu.MetalSupport, c.minMetalSupport)
		}
	}
	return gpu, "", ""
}

// vendorOf maps a gpu_type to the resource it names, "" for another
// coprocessor type.
func vendorOf(gpuType string) string {
	t := strings.ToLower(gpuType)
	switch {
	case t == "nvidia":
		return protocol.ResourceNVIDIA
	case t == "amd" || t == "ati":
		return protocol.ResourceAMD
	case strings.HasPrefix(t, "intel"):
		return protocol.ResourceIntel
	case t == "apple" || t == "apple_gpu":
		return protocol.ResourceApple
	}
	return ""
}

// openCLCheck is BOINC's opencl_check: the device's OpenCL version and
// driver revision, compared only when the device reports a version.
func (c *class) openCLCheck(p *protocol.OpenCLProp) (rule, why string) {
	v := openCLVersion(p.DeviceVersion)
	if v != 0 {
		if c.minOpenCL != 0 && v < c.minOpenCL {
			return "min_opencl_version", fmt.Sprintf("OpenCL version %d, want at least %d", v, c.minOpenCL)
		}
		if c.maxOpenCL != 0 && v > c.maxOpenCL {
			return "max_opencl_version", fmt.Sprintf("OpenCL version %d, want at most %d", v, c.maxOpenCL)
		}
		rev := openCLDriverRevision(p.DeviceVersion)
		if c.minOpenCLDriverRev != 0 && rev < c.minOpenCLDriverRev {
			return "min_opencl_driver_revision", fmt.Sprintf("OpenCL driver revision %d, want at least %d", rev, c.minOpenCLDriverRev)
		}
		if c.maxOpenCLDriverRev != 0 && rev > c.maxOpenCLDriverRev {
			return "max_opencl_driver_revision", fmt.Sprintf("OpenCL driver revision %d, want at most %d", rev, c.maxOpenCLDriverRev)
		}
	}
	if c.doublePrecisionFP && p.DoubleFPConfig == 0 {
		return "double_precision_fp", "the device does not do double precision"
	}
	return "", ""
}

// cpuUsage is the usage of a CPU class: multi-threaded up to max_threads
// of the usable CPUs, fewer if memory per CPU allows fewer.
func (c *class) cpuUsage(h Host, u Usage, cpu float64) (Usage, error) {
	var args []string
	if c.avgNCPUs > 0 {
		u.AvgNCPUs = c.avgNCPUs
	} else {
		u.AvgNCPUs = float64(min(c.maxThreads, max(h.NCPUs, 1)))
		if c.memPerCPU > 0 {
			minN := c.minNCPUs
			if minN == 0 {
				minN = 1
			}
			if h.MemBytes > 0 {
				if need := c.memBase + minN*c.memPerCPU; need > h.MemBytes {
					return Usage{}, &Refusal{Class: c.name, Rule: "mem_usage_per_cpu_mb",
						Detail: fmt.Sprintf("%.0f MB usable, a task needs at least %.0f MB", h.MemBytes/mega, need/mega)}
				}
				if n := math.Floor((h.MemBytes - c.memBase) / c.memPerCPU); n < u.AvgNCPUs {
					u.AvgNCPUs = n
				}
			}
			u.MemBytes = c.memBase + u.AvgNCPUs*c.memPerCPU
			args = append(args, fmt.Sprintf("--memory_size_mb %.0f", u.MemBytes/mega))
		}
	}
	if c.nthreadsCmdline {
		args = append(args, fmt.Sprintf("--nthreads %d", int(u.AvgNCPUs)))
	}
	u.Cmdline = strings.Join(args, " ")
	u.MaxNCPUs = math.Max(u.AvgNCPUs, 1)
	u.PeakFlops = cpu * u.AvgNCPUs
	u.ProjectedFlops = cpu * u.AvgNCPUs * c.projectedFlopsScale
	return u, nil
}
