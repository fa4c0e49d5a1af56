package e2e

import (
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/hostav"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/simclient"
	"github.com/taskserver/taskserver/internal/simreport"
	"github.com/taskserver/taskserver/internal/state"
)

// hwFixture is a run that keeps every promise: a CPU-only host (1), a
// multi-core host (2) that measures both CPU versions and then sends only
// mt, an NVIDIA host (3) and an AMD host (4), each with estimates right
// once measured. Versions: 1 plain, 2 mt, 3 cuda, 4 opencl_amd.
func hwFixture() hwData {
	d := hwData{
		Hosts: map[int64]hwHost{
			1: {ID: 1, NCPUs: 2, PFpops: 1e10, GPUs: map[string]int{}},
			2: {ID: 2, NCPUs: 8, PFpops: 1e10, GPUs: map[string]int{}},
			3: {ID: 3, NCPUs: 2, PFpops: 1e10, GPUs: map[string]int{protocol.ResourceNVIDIA: 1}},
			4: {ID: 4, NCPUs: 2, PFpops: 1e10, GPUs: map[string]int{protocol.ResourceAMD: 2}},
		},
		PlanClass: map[int64]string{1: "", 2: "mt", 3: "cuda", 4: "opencl_amd"},
	}
	id := int64(0)
	add := func(host, av int64, sent int64, elapsed, flopsEst float64) {
		id++
		d.Results = append(d.Results, hwResult{ID: id, HostID: host, AVID: av, Sent: sent, Received: sent + int64(elapsed) + 1,
			Outcome: state.OutcomeSuccess, Validate: state.ValidateValid, Elapsed: elapsed, FlopsEst: flopsEst, FpopsEst: 2e10})
	}
	for i := range int64(30) {
		add(1, 1, 100+i*2, 2, 1e10)
		add(3, 3, 100+i, 0.5, 4e10)
		add(4, 4, 100+i, 4, 5e9)
	}
	// Host 2: mt first (projected 4e10), plain explored, then mt only.
	for i := range int64(hostav.MinSamples) {
		add(2, 2, 100+i, 0.5, 4e10)
		add(2, 1, 110+i, 2, 1e10)
	}
	for i := range int64(40) {
		add(2, 2, 200+i, 0.5, 4e10)
	}
	return d
}

func goodReport() simclient.HardwareStats {
	return simclient.HardwareStats{Hardware: simreport.Hardware{GPUBusyFrac: 0.9, GPUHostCPUBusyFrac: 0.9}}
}

// TestHardwareMixChecks: the checks pass a run that keeps the promises and
// name each broken one.
func TestHardwareMixChecks(t *testing.T) {
	t.Parallel()
	s := hwFixture().check()
	s.Report = goodReport()
	if b := s.Broken(); len(b) > 0 {
		t.Fatalf("a good run: %s\nbroken: %q", s, b)
	}
	if s.Compared != 1 || s.Later != 40 || s.OnBest != 40 {
		t.Errorf("a good run: compared %d, %d of %d later sends on the best; want 1, 40 of 40", s.Compared, s.OnBest, s.Later)
	}

	tests := []struct {
		name  string
		spoil func(*hwData, *simclient.HardwareStats)
		want  string
	}{
		{"cuda on a CPU-only host", func(d *hwData, _ *simclient.HardwareStats) { d.Results[0].AVID = 3 }, "misplaced"},
		{"mt on a 2-CPU host", func(d *hwData, _ *simclient.HardwareStats) { d.Results[0].AVID = 2 }, "misplaced"},
		{"opencl_amd on an NVIDIA host", func(d *hwData, _ *simclient.HardwareStats) { d.Results[1].AVID = 4 }, "misplaced"},
		{"a task for a missing device", func(_ *hwData, r *simclient.HardwareStats) { r.NoDevice = 1 }, "coprocessor they lack"},
		{"idle GPUs", func(_ *hwData, r *simclient.HardwareStats) { r.GPUBusyFrac = 0.3 }, "GPUs busy"},
		{"idle CPUs of GPU hosts", func(_ *hwData, r *simclient.HardwareStats) { r.GPUHostCPUBusyFrac = 0.3 }, "GPU hosts' CPUs busy"},
		{"slower version kept", func(d *hwData, _ *simclient.HardwareStats) {
			for i := range d.Results {
				if r := &d.Results[i]; r.HostID == 2 && r.Sent >= 200 && r.Sent%4 != 0 {
					r.AVID, r.Elapsed = 1, 2
				}
			}
		}, "used the host's fastest"},
		{"estimates not learnt", func(d *hwData, _ *simclient.HardwareStats) {
			for i := range d.Results {
				d.Results[i].FlopsEst = d.Hosts[d.Results[i].HostID].PFpops
			}
		}, "median estimate error"},
		{"GPU estimates not learnt", func(d *hwData, _ *simclient.HardwareStats) {
			for i := range d.Results {
				if d.Results[i].AVID == 3 {
					d.Results[i].FlopsEst = 1e11 // the plan class's projection, 5 times the GPU's speed
				}
			}
		}, `median estimate error of the "cuda" version`},
		{"no AMD host", func(d *hwData, _ *simclient.HardwareStats) {
			d.Hosts[4] = hwHost{ID: 4, NCPUs: 2, PFpops: 1e10}
			for i := range d.Results {
				if d.Results[i].HostID == 4 {
					d.Results[i].AVID = 1
				}
			}
		}, "no ATI host"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := hwFixture()
			rep := goodReport()
			tc.spoil(&d, &rep)
			s := d.check()
			s.Report = rep
			b := strings.Join(s.Broken(), "\n")
			if !strings.Contains(b, tc.want) {
				t.Errorf("broken = %q, want one about %q", b, tc.want)
			}
		})
	}
}
