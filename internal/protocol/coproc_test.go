package protocol

import (
	"strings"
	"testing"
)

// A request with one device of each kind, as the 7.x client writes them
// (lib/coproc.cpp), comes out as one Coproc per kind with its request.
func TestCoprocsResources(t *testing.T) {
	body := `<scheduler_request>
<platform_name>x86_64-pc-linux-gnu</platform_name>
<coprocs>
<coproc_cuda>
   <count>2</count>
   <name>NVIDIA GeForce RTX 3080</name>
   <available_ram>10485760000.000000</available_ram>
   <have_cuda>1</have_cuda>
   <have_opencl>1</have_opencl>
   <req_secs>3600.000000</req_secs>
   <req_instances>2.000000</req_instances>
   <estimated_delay>10.000000</estimated_delay>
   <peak_flops>29000000000000.000000</peak_flops>
   <cudaVersion>12020</cudaVersion>
   <drvVersion>53518</drvVersion>
   <totalGlobalMem>10737418240.000000</totalGlobalMem>
   <major>8</major>
   <minor>6</minor>
   <coproc_opencl>
      <name>NVIDIA GeForce RTX 3080</name>
      <opencl_device_version>OpenCL 3.0 CUDA</opencl_device_version>
      <opencl_driver_version>535.183.01</opencl_driver_version>
   </coproc_opencl>
</coproc_cuda>
<coproc_ati>
   <count>1</count>
   <name>Radeon</name>
   <available_ram>0</available_ram>
   <have_cal>1</have_cal>
   <have_opencl>0</have_opencl>
   <req_secs>0.000000</req_secs>
   <req_instances>0.000000</req_instances>
   <estimated_delay>0.000000</estimated_delay>
   <peak_flops>5000000000000.000000</peak_flops>
   <CALVersion>1.4.1848</CALVersion>
   <localRAM>2048</localRAM>
   <target>20</target>
   <atirt_detected/>
</coproc_ati>
<coproc>
   <type>miner_asic</type>
   <count>1</count>
   <peak_flops>100000000000.000000</peak_flops>
   <req_secs>60.000000</req_secs>
   <req_instances>1.000000</req_instances>
   <estimated_delay>0.000000</estimated_delay>
</coproc>
</coprocs>
</scheduler_request>`
	req, err := ParseSchedulerRequest(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	rs := req.Coprocs.Resources()
	if len(rs) != 3 {
		t.Fatalf("got %d resources, want 3: %+v", len(rs), rs)
	}
	nv, amd, other := rs[0], rs[1], rs[2]
	if nv.Type != ResourceNVIDIA || nv.Count != 2 || nv.ReqSecs != 3600 || nv.ReqInstances != 2 || nv.EstimatedDelay != 10 ||
		nv.DriverVersion != 53518 || nv.CUDAVersion != 12020 || nv.ComputeCapability != 806 || nv.RAM != 10485760000 ||
		nv.OpenCL == nil || nv.OpenCL.DeviceVersion != "OpenCL 3.0 CUDA" || !nv.HaveCUDA {
		t.Errorf("NVIDIA = %+v", nv)
	}
	if amd.Type != ResourceAMD || amd.RAM != 2048<<20 || amd.DriverVersion != 10041848 || amd.OpenCL != nil || !amd.HaveCAL ||
		!amd.ATILibs || amd.AMDLibs || amd.CALTarget != 20 {
		t.Errorf("AMD = %+v", amd)
	}
	if other.Type != "miner_asic" || other.ReqSecs != 60 || other.ReqInstances != 1 {
		t.Errorf("other = %+v", other)
	}
	if (*Coprocs)(nil).Resources() != nil {
		t.Error("no <coprocs>: want no resources")
	}
}
