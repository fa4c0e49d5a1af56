package simclient

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/taskserver/taskserver/internal/protocol"
)

// gpuModel is a GPU a simulated host may have, with the figures the real
// client reports for it (lib/coproc.cpp, lib/opencl_boinc.cpp).
type gpuModel struct {
	// Type is the resource: protocol.ResourceNVIDIA or protocol.ResourceAMD.
	Type      string
	Name      string
	RAM       float64 // bytes
	PeakFlops float64
	// NVIDIA: CUDA version (12020 is 12.2), display driver version (53554
	// is 535.54), compute capability.
	CUDAVersion, DriverVersion, Major, Minor int
	// AMD: the CAL version ("" for an OpenCL-only card) and the CAL
	// target.
	CALVersion string
	Target     int
	// OpenCLVersion is the device version string, OpenCLDriver the
	// driver's.
	OpenCLVersion, OpenCLDriver string
}

// gpuModels are the GPUs of the simulated population: two NVIDIA and two
// AMD cards of different generations, so plan classes with a minimum
// compute capability, driver, CAL or OpenCL version, or GPU RAM find
// hosts on both sides of their limits.
var gpuModels = []gpuModel{
	{Type: protocol.ResourceNVIDIA, Name: "NVIDIA GeForce RTX 3080", RAM: 10 << 30, PeakFlops: 29.8e12,
		CUDAVersion: 12020, DriverVersion: 53554, Major: 8, Minor: 6,
		OpenCLVersion: "OpenCL 3.0 CUDA", OpenCLDriver: "535.54.03"},
	{Type: protocol.ResourceNVIDIA, Name: "NVIDIA GeForce GTX 1060 6GB", RAM: 6 << 30, PeakFlops: 4.4e12,
		CUDAVersion: 11040, DriverVersion: 47014, Major: 6, Minor: 1,
		OpenCLVersion: "OpenCL 1.2 CUDA", OpenCLDriver: "470.141.03"},
	{Type: protocol.ResourceAMD, Name: "AMD Radeon RX 6800 XT", RAM: 16 << 30, PeakFlops: 20.7e12,
		Target: 0, OpenCLVersion: "OpenCL 2.0 AMD-APP (3513.0)", OpenCLDriver: "3513.0 (HSA1.1,LC)"},
	{Type: protocol.ResourceAMD, Name: "AMD Radeon RX 580 Series", RAM: 8 << 30, PeakFlops: 6.2e12,
		CALVersion: "1.4.1848", Target: 20, OpenCLVersion: "OpenCL 2.0 AMD-APP (3224.4)", OpenCLDriver: "3224.4"},
}

// gpu is one kind of GPU a host has, with its own client state: a
// resource the host fetches work for and schedules separately, as the
// real client does (client/work_fetch.cpp, RSC_WORK_FETCH).
type gpu struct {
	model gpuModel
	count int
	// speed is the FLOPS one task on a whole instance gets: peak FLOPS ×
	// Options.GPUEfficiency.
	speed float64
}

// drawHardware gives a host its CPUs and GPUs: MTFrac of the hosts have
// MTCPUs cores, GPUFrac have one or two GPUs of one model (of
// Options.GPUTypes, every model as likely).
func drawHardware(o Options, rng *rand.Rand) (ncpus int, gpus []gpu) {
	ncpus = o.NCPUs
	if o.MTFrac > 0 && rng.Float64() < o.MTFrac {
		ncpus = o.MTCPUs
	}
	if o.GPUFrac > 0 && rng.Float64() < o.GPUFrac {
		models := gpuModels
		if len(o.GPUTypes) > 0 {
			models = slices.DeleteFunc(slices.Clone(gpuModels), func(m gpuModel) bool { return !slices.Contains(o.GPUTypes, m.Type) })
		}
		m := models[rng.IntN(len(models))]
		gpus = append(gpus, gpu{model: m, count: 1 + rng.IntN(2), speed: m.PeakFlops * o.GPUEfficiency})
	}
	return ncpus, gpus
}

// pFeatures is the host's <p_features> as the Linux client reports them
// (the flags of /proc/cpuinfo, space-separated); a multi-core host has
// AVX2 and FMA, the others SSE4.2 at most.
func pFeatures(multiCore bool) string {
	f := "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall nx lm constant_tsc pni ssse3 cx16 sse4_1 sse4_2 popcnt"
	if multiCore {
		f += " aes avx f16c fma avx2 bmi1 bmi2"
	}
	return f
}

// gpuRequest is what the host asks of one GPU resource in a request.
type gpuRequest struct {
	reqSecs, reqInstances, estimatedDelay float64
}

// writeCoprocs writes the host's <coprocs> as the 7.x client does in a
// scheduler request (COPROCS::write_xml(f, true)): one vendor element
// per GPU kind, each with the work asked of it. The reflective request
// writer knows only the fields the server reads, so the element is
// written here, whole, and spliced into the request.
func writeCoprocs(b *bytes.Buffer, gpus []gpu, reqs []gpuRequest) {
	b.WriteString("    <coprocs>\n")
	for i, g := range gpus {
		m, r := g.model, reqs[i]
		switch m.Type {
		case protocol.ResourceNVIDIA:
			fmt.Fprintf(b, "<coproc_cuda>\n   <count>%d</count>\n   <name>%s</name>\n   <available_ram>%f</available_ram>\n"+
				"   <have_cuda>1</have_cuda>\n   <have_opencl>1</have_opencl>\n", g.count, m.Name, m.RAM)
			writeRequest(b, r)
			fmt.Fprintf(b, "   <peak_flops>%f</peak_flops>\n   <cudaVersion>%d</cudaVersion>\n   <drvVersion>%d</drvVersion>\n"+
				"   <totalGlobalMem>%f</totalGlobalMem>\n   <sharedMemPerBlock>49152.000000</sharedMemPerBlock>\n"+
				"   <regsPerBlock>65536</regsPerBlock>\n   <warpSize>32</warpSize>\n   <memPitch>2147483647.000000</memPitch>\n"+
				"   <maxThreadsPerBlock>1024</maxThreadsPerBlock>\n   <maxThreadsDim>1024 1024 64</maxThreadsDim>\n"+
				"   <maxGridSize>2147483647 65535 65535</maxGridSize>\n   <clockRate>1710000</clockRate>\n"+
				"   <totalConstMem>65536.000000</totalConstMem>\n   <major>%d</major>\n   <minor>%d</minor>\n"+
				"   <textureAlignment>512.000000</textureAlignment>\n   <deviceOverlap>1</deviceOverlap>\n"+
				"   <multiProcessorCount>68</multiProcessorCount>\n",
				m.PeakFlops, m.CUDAVersion, m.DriverVersion, m.RAM, m.Major, m.Minor)
			writeOpenCL(b, m, "NVIDIA Corporation", 4318, m.Major, m.Minor)
			b.WriteString("</coproc_cuda>\n")
		case protocol.ResourceAMD:
			haveCAL := 0
			if m.CALVersion != "" {
				haveCAL = 1
			}
			fmt.Fprintf(b, "<coproc_ati>\n   <count>%d</count>\n   <name>%s</name>\n   <available_ram>%f</available_ram>\n"+
				"   <have_cal>%d</have_cal>\n   <have_opencl>1</have_opencl>\n", g.count, m.Name, m.RAM, haveCAL)
			writeRequest(b, r)
			fmt.Fprintf(b, "   <peak_flops>%f</peak_flops>\n   <CALVersion>%s</CALVersion>\n   <target>%d</target>\n"+
				"   <localRAM>%d</localRAM>\n   <uncachedRemoteRAM>0</uncachedRemoteRAM>\n   <cachedRemoteRAM>0</cachedRemoteRAM>\n"+
				"   <engineClock>1340</engineClock>\n   <memoryClock>2000</memoryClock>\n   <wavefrontSize>64</wavefrontSize>\n"+
				"   <numberOfSIMD>36</numberOfSIMD>\n   <doublePrecision>1</doublePrecision>\n   <pitch_alignment>256</pitch_alignment>\n"+
				"   <surface_alignment>256</surface_alignment>\n   <maxResource1DWidth>16384</maxResource1DWidth>\n"+
				"   <maxResource2DWidth>16384</maxResource2DWidth>\n   <maxResource2DHeight>16384</maxResource2DHeight>\n",
				m.PeakFlops, m.CALVersion, m.Target, int64(m.RAM)>>20)
			if haveCAL == 1 {
				b.WriteString("    <atirt_detected/>\n")
			}
			writeOpenCL(b, m, "Advanced Micro Devices, Inc.", 4098, 0, 0)
			b.WriteString("</coproc_ati>\n")
		}
	}
	b.WriteString("    </coprocs>\n")
}

func writeRequest(b *bytes.Buffer, r gpuRequest) {
	fmt.Fprintf(b, "   <req_secs>%f</req_secs>\n   <req_instances>%f</req_instances>\n   <estimated_delay>%f</estimated_delay>\n",
		r.reqSecs, r.reqInstances, r.estimatedDelay)
}

// writeOpenCL is the device's <coproc_opencl> (OPENCL_DEVICE_PROP::write_xml).
func writeOpenCL(b *bytes.Buffer, m gpuModel, vendor string, vendorID, ccMajor, ccMinor int) {
	fmt.Fprintf(b, "   <coproc_opencl>\n      <name>%s</name>\n      <vendor>%s</vendor>\n      <vendor_id>%d</vendor_id>\n"+
		"      <available>1</available>\n      <half_fp_config>0</half_fp_config>\n      <single_fp_config>191</single_fp_config>\n"+
		"      <double_fp_config>63</double_fp_config>\n      <endian_little>1</endian_little>\n"+
		"      <execution_capabilities>1</execution_capabilities>\n      <extensions>cl_khr_fp64 cl_khr_global_int32_base_atomics</extensions>\n"+
		"      <global_mem_size>%d</global_mem_size>\n      <local_mem_size>49152</local_mem_size>\n"+
		"      <max_clock_frequency>1710</max_clock_frequency>\n      <max_compute_units>68</max_compute_units>\n"+
		"      <nv_compute_capability_major>%d</nv_compute_capability_major>\n      <nv_compute_capability_minor>%d</nv_compute_capability_minor>\n"+
		"      <amd_simd_per_compute_unit>0</amd_simd_per_compute_unit>\n      <amd_simd_width>0</amd_simd_width>\n"+
		"      <amd_simd_instruction_width>0</amd_simd_instruction_width>\n      <opencl_platform_version>%s</opencl_platform_version>\n"+
		"      <opencl_device_version>%s</opencl_device_version>\n      <opencl_driver_version>%s</opencl_driver_version>\n   </coproc_opencl>\n",
		m.Name, vendor, vendorID, int64(m.RAM), ccMajor, ccMinor, openCLPlatform(m.OpenCLVersion), m.OpenCLVersion, m.OpenCLDriver)
}

// openCLPlatform is the platform version of a device version: "OpenCL
// 3.0 CUDA" runs on "OpenCL 3.0 CUDA 12.2.79"-like platforms; the device's
// own string is close enough for a scheduler.
func openCLPlatform(device string) string { return strings.TrimSpace(device) }

// spliceCoprocs puts the <coprocs> element into an encoded request, where
// the real client writes it: after <disk_usage>, before the results.
func spliceCoprocs(body []byte, coprocs []byte) []byte {
	at := bytes.Index(body, []byte("</disk_usage>"))
	if at < 0 {
		at = bytes.LastIndex(body, []byte("</scheduler_request>"))
		if at < 0 {
			return body
		}
	} else {
		at += len("</disk_usage>")
		if at < len(body) && body[at] == '\n' {
			at++
		}
	}
	out := make([]byte, 0, len(body)+len(coprocs))
	out = append(out, body[:at]...)
	out = append(out, coprocs...)
	return append(out, body[at:]...)
}
