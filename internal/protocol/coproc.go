package protocol

import (
	"fmt"
	"strings"
)

// Resource names as the BOINC client and scheduler spell them
// (lib/common_defs.h, proc_type_name_xml): in <no_rsc_apps>, in an app
// version's <coproc><type>, and as Coproc.Type. An "other" coprocessor a
// volunteer declares in cc_config.xml has the <type> they gave it.
const (
	ResourceCPU    = "CPU"
	ResourceNVIDIA = "NVIDIA"
	ResourceAMD    = "ATI"
	ResourceIntel  = "intel_gpu"
	ResourceApple  = "apple_gpu"
)

// Coprocs is a request's <coprocs>: the client's description of each kind
// of coprocessor it has, with, in a scheduler request, how much work it
// asks for each (lib/coproc.cpp, COPROCS::write_xml). The vendor elements
// carry many device properties; only those a plan class or an operator
// needs are read. Resources gives them in one form.
type Coprocs struct {
	NVIDIA *CoprocNVIDIA `xml:"coproc_cuda"`
	AMD    *CoprocAMD    `xml:"coproc_ati"`
	Intel  *CoprocIntel  `xml:"coproc_intel_gpu"`
	Apple  *CoprocApple  `xml:"coproc_apple_gpu"`
	// Other are coprocessors declared in cc_config.xml (<coproc> with a
	// <type>), and any a newer client sends in the generic form.
	Other []CoprocOther `xml:"coproc"`
}

// CoprocRequest is the work a client asks for one resource (and, for the
// CPU, at the top of the request): seconds of work to fill its queue, idle
// instances to keep busy, and how long until an instance is free
// (EstimatedDelay).
type CoprocRequest struct {
	ReqSecs, ReqInstances, EstimatedDelay float64
}

// OpenCLProp is a device's <coproc_opencl> (lib/opencl_boinc.cpp).
type OpenCLProp struct {
	Name   string `xml:"name"`
	Vendor string `xml:"vendor"`
	// DoubleFPConfig is non-zero when the device does double precision.
	DoubleFPConfig uint64 `xml:"double_fp_config"`
	GlobalMemSize  uint64 `xml:"global_mem_size"`
	// DeviceVersion is e.g. "OpenCL 1.2 CUDA".
	DeviceVersion string `xml:"opencl_device_version"`
	// DriverVersion is e.g. "535.54.03" or "3224.4".
	DriverVersion string  `xml:"opencl_driver_version"`
	PeakFlops     float64 `xml:"peak_flops"`
}

// CoprocNVIDIA is <coproc_cuda>.
type CoprocNVIDIA struct {
	Count          int     `xml:"count"`
	Name           string  `xml:"name"`
	AvailableRAM   float64 `xml:"available_ram"`
	HaveCUDA       int     `xml:"have_cuda"`
	HaveOpenCL     int     `xml:"have_opencl"`
	ReqSecs        float64 `xml:"req_secs"`
	ReqInstances   float64 `xml:"req_instances"`
	EstimatedDelay float64 `xml:"estimated_delay"`
	PeakFlops      float64 `xml:"peak_flops"`
	// CUDAVersion is e.g. 12020 for CUDA 12.2.
	CUDAVersion int `xml:"cudaVersion"`
	// DrvVersion is the display driver version, e.g. 53518 for 535.18.
	DrvVersion     int         `xml:"drvVersion"`
	TotalGlobalMem float64     `xml:"totalGlobalMem"`
	Major          int         `xml:"major"`
	Minor          int         `xml:"minor"`
	OpenCL         *OpenCLProp `xml:"coproc_opencl"`
}

// CoprocAMD is <coproc_ati>.
type CoprocAMD struct {
	Count          int     `xml:"count"`
	Name           string  `xml:"name"`
	AvailableRAM   float64 `xml:"available_ram"`
	HaveCAL        int     `xml:"have_cal"`
	HaveOpenCL     int     `xml:"have_opencl"`
	ReqSecs        float64 `xml:"req_secs"`
	ReqInstances   float64 `xml:"req_instances"`
	EstimatedDelay float64 `xml:"estimated_delay"`
	PeakFlops      float64 `xml:"peak_flops"`
	// CALVersion is the driver's CAL version, e.g. "1.4.1848".
	CALVersion string `xml:"CALVersion"`
	Target     int    `xml:"target"`
	// LocalRAM is the device's memory in MB.
	LocalRAM        float64     `xml:"localRAM"`
	DoublePrecision int         `xml:"doublePrecision"`
	ATIRTDetected   *Empty      `xml:"atirt_detected"`
	AMDRTDetected   *Empty      `xml:"amdrt_detected"`
	OpenCL          *OpenCLProp `xml:"coproc_opencl"`
}

// CoprocIntel is <coproc_intel_gpu>.
type CoprocIntel struct {
	Count          int         `xml:"count"`
	Name           string      `xml:"name"`
	AvailableRAM   float64     `xml:"available_ram"`
	HaveOpenCL     int         `xml:"have_opencl"`
	ReqSecs        float64     `xml:"req_secs"`
	ReqInstances   float64     `xml:"req_instances"`
	EstimatedDelay float64     `xml:"estimated_delay"`
	PeakFlops      float64     `xml:"peak_flops"`
	OpenCL         *OpenCLProp `xml:"coproc_opencl"`
}

// CoprocApple is <coproc_apple_gpu>.
type CoprocApple struct {
	Count          int         `xml:"count"`
	Model          string      `xml:"model"`
	AvailableRAM   float64     `xml:"available_ram"`
	HaveMetal      int         `xml:"have_metal"`
	HaveOpenCL     int         `xml:"have_opencl"`
	NCores         int         `xml:"ncores"`
	MetalSupport   int         `xml:"metal_support"`
	ReqSecs        float64     `xml:"req_secs"`
	ReqInstances   float64     `xml:"req_instances"`
	EstimatedDelay float64     `xml:"estimated_delay"`
	PeakFlops      float64     `xml:"peak_flops"`
	OpenCL         *OpenCLProp `xml:"coproc_opencl"`
}

// CoprocOther is a generic <coproc>.
type CoprocOther struct {
	Type           string      `xml:"type"`
	Count          int         `xml:"count"`
	PeakFlops      float64     `xml:"peak_flops"`
	ReqSecs        float64     `xml:"req_secs"`
	ReqInstances   float64     `xml:"req_instances"`
	EstimatedDelay float64     `xml:"estimated_delay"`
	OpenCL         *OpenCLProp `xml:"coproc_opencl"`
}

// Coproc is one kind of coprocessor of a host, in the form the scheduler
// decides with, whatever its vendor element.
type Coproc struct {
	// Type is the resource name (ResourceNVIDIA, ..., or an other
	// coprocessor's type).
	Type  string
	Count int
	// Name is the device model, e.g. "NVIDIA GeForce RTX 3080".
	Name      string
	PeakFlops float64
	// RAM is the device memory in bytes: the available RAM when reported,
	// else the total.
	RAM float64
	// DriverVersion is NVIDIA's drvVersion (e.g. 53518), or AMD's CAL
	// version as BOINC's ati_version_int counts it, major*10000000 +
	// minor*10000 + build (1.4.1848 is 10041848), so plan classes'
	// min_driver_version values carry over; 0 if unknown.
	DriverVersion int
	// CUDAVersion is NVIDIA's (e.g. 12020), ComputeCapability NVIDIA's as
	// major*100 + minor (e.g. 806), 0 if unknown.
	CUDAVersion       int
	ComputeCapability int
	HaveCUDA, HaveCAL bool
	// ATILibs and AMDLibs say an AMD GPU's client found the runtime
	// libraries with ATI or AMD names (plan classes' need_ati_libs,
	// need_amd_libs); CALTarget is its CAL target (min_cal_target).
	ATILibs, AMDLibs bool `json:",omitempty"`
	CALTarget        int  `json:",omitempty"`
	// MetalSupport is an Apple GPU's Metal support level (min_metal_support).
	MetalSupport int `json:",omitempty"`
	// OpenCL is set when the device does OpenCL.
	OpenCL *OpenCLProp
	// CoprocRequest is this request's, never stored (EncodeCoprocs).
	CoprocRequest `json:"-"`
}

// Resources returns the coprocessors c describes, NVIDIA, AMD, Intel, Apple
// and then the others, leaving out those with no instance.
func (c *Coprocs) Resources() []Coproc {
	if c == nil {
		return nil
	}
	var out []Coproc
	add := func(cp Coproc) {
		if cp.Count > 0 && cp.Type != "" {
			out = append(out, cp)
		}
	}
	if g := c.NVIDIA; g != nil {
		ram := g.AvailableRAM
		if !(ram > 0) {
			ram = g.TotalGlobalMem
		}
		add(Coproc{Type: ResourceNVIDIA, Count: g.Count, Name: g.Name, PeakFlops: g.PeakFlops, RAM: ram,
			DriverVersion: g.DrvVersion, CUDAVersion: g.CUDAVersion, ComputeCapability: g.Major*100 + g.Minor,
			HaveCUDA: g.HaveCUDA != 0, OpenCL: openCL(g.HaveOpenCL, g.OpenCL), CoprocRequest: CoprocRequest{g.ReqSecs, g.ReqInstances, g.EstimatedDelay}})
	}
	if g := c.AMD; g != nil {
		ram := g.AvailableRAM
		if !(ram > 0) {
			ram = g.LocalRAM * (1 << 20)
		}
		add(Coproc{Type: ResourceAMD, Count: g.Count, Name: g.Name, PeakFlops: g.PeakFlops, RAM: ram,
			DriverVersion: calVersion(g.CALVersion), HaveCAL: g.HaveCAL != 0, OpenCL: openCL(g.HaveOpenCL, g.OpenCL),
			ATILibs: g.ATIRTDetected != nil, AMDLibs: g.AMDRTDetected != nil, CALTarget: g.Target,
			CoprocRequest: CoprocRequest{g.ReqSecs, g.ReqInstances, g.EstimatedDelay}})
	}
	if g := c.Intel; g != nil {
		add(Coproc{Type: ResourceIntel, Count: g.Count, Name: g.Name, PeakFlops: g.PeakFlops, RAM: g.AvailableRAM,
			OpenCL: openCL(g.HaveOpenCL, g.OpenCL), CoprocRequest: CoprocRequest{g.ReqSecs, g.ReqInstances, g.EstimatedDelay}})
	}
	if g := c.Apple; g != nil {
		add(Coproc{Type: ResourceApple, Count: g.Count, Name: g.Model, PeakFlops: g.PeakFlops, RAM: g.AvailableRAM,
			MetalSupport: g.MetalSupport, OpenCL: openCL(g.HaveOpenCL, g.OpenCL), CoprocRequest: CoprocRequest{g.ReqSecs, g.ReqInstances, g.EstimatedDelay}})
	}
	for _, g := range c.Other {
		add(Coproc{Type: strings.TrimSpace(g.Type), Count: g.Count, PeakFlops: g.PeakFlops,
			OpenCL: openCL(1, g.OpenCL), CoprocRequest: CoprocRequest{g.ReqSecs, g.ReqInstances, g.EstimatedDelay}})
	}
	return out
}

func openCL(have int, p *OpenCLProp) *OpenCLProp {
	if have == 0 {
		return nil
	}
	return p
}

// calVersion reads AMD's "major.minor.build" as BOINC's ati_version_int:
// major*10000000 + minor*10000 + build; 0 if it does not parse.
func calVersion(s string) int {
	var major, minor, build int
	if n, err := fmt.Sscanf(strings.TrimSpace(s), "%d.%d.%d", &major, &minor, &build); n != 3 || err != nil ||
		major < 0 || minor < 0 || build < 0 || major > 200 || minor > 999 || build > 9999 {
		return 0
	}
	return major*10000000 + minor*10000 + build
}
