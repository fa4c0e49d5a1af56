package projectrun

import (
	"slices"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/planclass"
	"github.com/taskserver/taskserver/internal/protocol"
)

// The local, chaos and benchmark projects' plan classes parse, the scheduler can evaluate
// every one, and each goes to the hardware it names.
func TestPlanClassSpec(t *testing.T) {
	t.Parallel()
	s, err := planclass.Parse(strings.NewReader(PlanClassSpec))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Names(); !slices.Equal(got, HardwarePlanClasses) {
		t.Fatalf("Names = %v", got)
	}
	host := planclass.Host{NCPUs: 8, PFpops: 3e9, ClientVersion: 72002, Coprocs: []protocol.Coproc{
		{Type: protocol.ResourceNVIDIA, Count: 1, PeakFlops: 1e13, RAM: 4 << 30, CUDAVersion: 12020, HaveCUDA: true},
		{Type: protocol.ResourceAMD, Count: 1, PeakFlops: 5e12, RAM: 4 << 30,
			OpenCL: &protocol.OpenCLProp{DeviceVersion: "OpenCL 2.0 AMD-APP (3224.4)", GlobalMemSize: 4 << 30}},
	}}
	for name, resource := range map[string]string{"mt": protocol.ResourceCPU, "cuda": protocol.ResourceNVIDIA, "opencl_amd": protocol.ResourceAMD} {
		if err := s.Supported(name); err != nil {
			t.Errorf("Supported(%s) = %v", name, err)
		}
		u, err := s.Check(name, host)
		if err != nil || u.Resource != resource {
			t.Errorf("Check(%s) = %+v, %v; want resource %s", name, u, err, resource)
		}
	}
	if u, _ := s.Check("mt", host); u.AvgNCPUs != 4 || u.Cmdline != "--nthreads 4" {
		t.Errorf("mt usage = %+v, want 4 CPUs and --nthreads 4", u)
	}
}
