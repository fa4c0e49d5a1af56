package simulate

import (
	"testing"
)

// A population with GPU hosts and a multi-threaded project: the GPUs get
// the GPU jobs of the project that has them and stay busy, the CPUs of
// the GPU hosts too; the project without GPU jobs is asked for GPU work
// once per host and never again (<no_rsc_apps>); multi-threaded tasks run
// on their CPUs without overbooking the host.
func TestGPUAndMultiThreadedHosts(t *testing.T) {
	t.Parallel()
	sc := threeProjects(300, 5, "edf")
	sc.Population.GPUFrac = 0.5
	sc.Population.OnFrac = Range{Min: 1, Max: 1}
	sc.Projects[0].GPUJob = &Job{FpopsEst: 5e14, RuntimeSpread: 0.2, DelayBound: 72 * hour}
	sc.Projects[2].Job.NCPUs = 4
	s, rep := simulate(t, sc, runOptions{})
	hw := rep.Hardware
	if hw == nil {
		t.Fatal("report without its hardware section")
	}
	t.Logf("hardware %+v", *hw)
	if hw.GPUHosts < 100 || hw.GPUTasks == 0 || hw.MTTasks == 0 {
		t.Errorf("hardware %+v: want about 150 GPU hosts, GPU tasks and mt tasks done", *hw)
	}
	if hw.GPUBusyFrac < 0.8 || hw.GPUHostCPUBusyFrac < 0.8 {
		t.Errorf("GPUs %.2f busy, CPUs of GPU hosts %.2f: want both kept busy", hw.GPUBusyFrac, hw.GPUHostCPUBusyFrac)
	}
	for _, h := range s.hosts {
		if h.gpu == nil {
			continue
		}
		for k, j := range h.projects {
			if j != 0 && len(h.gpu.Projects) > k && h.gpu.Projects[k].NoApps == false && s.servers[j].project.GPUJob == nil &&
				h.policy.Projects[k].MinRPC > 0 {
				t.Fatalf("host %d: project %s has no GPU jobs and is still asked for GPU work", h.index, sc.Projects[j].Name)
			}
		}
		for _, tk := range h.gpu.Tasks {
			if j := h.projects[h.local(tk.Project)]; s.servers[j].project.GPUJob == nil {
				t.Fatalf("host %d holds a GPU task of %s, which has no GPU jobs", h.index, sc.Projects[j].Name)
			}
		}
	}
}
