package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/planclass"
	"github.com/taskserver/taskserver/internal/projectrun"
	"github.com/taskserver/taskserver/internal/simclient"
)

// Settings of the hardware-mix run.
const (
	// hwSeed draws a population with every kind of host (4 CPU-only, 4
	// multi-core, 5 with GPUs only, 7 multi-core with GPUs; NVIDIA and
	// AMD, one and two GPUs): a random one lacks a kind now and then, and
	// with few multi-core hosts, exploration (a tenth of the requests)
	// may measure the plain version on none of them in the time, leaving
	// convergence unjudged.
	hwSeed  = 1848382304
	hwHosts = 20
	// hwRun is how long the hosts compute; the work generator keeps work
	// unsent the whole time, so the busy fractions measure the scheduler
	// and the hosts' work fetch, not the end of the work.
	hwRun = 80 * time.Second
	// hwComputeTime is a plain CPU task on a host of p_fpops hwFlops; the
	// job's rsc_fpops_est is exactly that work, so the naive estimate
	// rsc_fpops_est / p_fpops is right for plain CPU versions and wrong
	// only where the hardware differs from the benchmark.
	hwComputeTime = 2 * time.Second
	hwFlops       = 1e10
	hwFpopsEst    = 2e10
	// hwGPUEfficiency makes the simulated GPUs' tasks take from a third of
	// a plain CPU task (RTX 3080) to three times one (RX 580 on half a GPU).
	hwGPUEfficiency = 0.001
	hwMTCPUs        = 8
	hwMTMinCPUs     = 4 // the mt class's min_ncpus
	// hwSettle is how long after the hosts stop the test waits for the
	// results they reported to be validated.
	hwSettle = 30 * time.Second
	// hwMargin is how long after a host-version's MinSamples-th valid
	// result was reported its rate is surely in the host_app_version row
	// (the validator's pass), in seconds.
	hwMargin = 3
	// Thresholds that hold on a loaded 2-core machine.
	hwMinGPUBusy        = 0.65
	hwMinGPUHostCPUBusy = 0.6
	hwMinOnBest         = 0.85
	// hwMaxEstErr bounds the median relative error of the estimates once
	// measured, over all results and per version.
	hwMaxEstErr = 0.25
)

// hwPlanClasses are the run's plan classes: multi-threaded on 4 of at least
// 4 CPUs, CUDA on NVIDIA, OpenCL on AMD with two tasks per GPU.
const hwPlanClasses = `<plan_classes>
  <plan_class>
    <name>mt</name>
    <min_ncpus>4</min_ncpus>
    <max_threads>4</max_threads>
  </plan_class>
  <plan_class>
    <name>cuda</name>
    <gpu_type>nvidia</gpu_type>
    <cuda/>
    <min_cuda_version>11000</min_cuda_version>
    <min_gpu_ram_mb>1024</min_gpu_ram_mb>
    <cpu_frac>0.1</cpu_frac>
  </plan_class>
  <plan_class>
    <name>opencl_amd</name>
    <gpu_type>amd</gpu_type>
    <opencl/>
    <min_opencl_version>102</min_opencl_version>
    <min_gpu_ram_mb>1024</min_gpu_ram_mb>
    <ngpus>0.5</ngpus>
    <cpu_frac>0.2</cpu_frac>
  </plan_class>
</plan_classes>
`

// TestHardwareMixEndToEnd runs one app with four versions (plain CPU,
// multi-threaded, CUDA, AMD OpenCL; version files are not needed, the
// simulated client runs the science in-process) on simulated hosts of
// every kind: CPU-only, multi-core, NVIDIA and AMD GPU hosts. Every daemon
// is a process, the versions are added with the taskctl binary (which
// refuses an undefined plan class). It checks, from the database and the
// simulated client's report, that every task went to a host that can run
// its version, that GPU hosts keep their GPUs and their CPUs busy, that
// each host converges to its fastest version, and that runtime estimates
// (rsc_fpops_est / result.flops_estimate) converge to the observed
// runtimes, clearly better than rsc_fpops_est / p_fpops. HWMIX_SEED
// draws another host population.
func TestHardwareMixEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	seed := uint64(envInt(t, "HWMIX_SEED", hwSeed))
	t.Logf("hardware mix: %d hosts for %s, seed %d (HWMIX_SEED for another population)", hwHosts, hwRun, seed)
	bin := buildPrograms(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lp := newLCProject(t, bin, lcParams{Users: hwHosts})
	start := time.Now()
	if err := os.WriteFile(filepath.Join(lp.dir, planclass.DefaultFile), []byte(hwPlanClasses), 0o644); err != nil {
		t.Fatal(err)
	}
	lp.writeConfig()
	t.Cleanup(func() { lp.stopAll() })
	hwAddVersions(ctx, t, lp)
	hwStart(ctx, t, lp, seed)

	deadline := time.Now().Add(hwRun + 60*time.Second)
	lastLog := time.Now()
	for lp.sim.Running() {
		if err := lp.died(); err != nil {
			lp.dumpLogs()
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			lp.dumpLogs()
			t.Fatalf("simclient still running %s after its --duration", time.Since(start)-hwRun)
		}
		if time.Since(lastLog) >= 20*time.Second {
			lastLog = time.Now()
			g, _ := lp.progress(ctx)
			t.Logf("%5.0fs  %s", time.Since(start).Seconds(), g)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err := lp.stopSim(); err != nil {
		t.Errorf("simclient: %v", err)
	}
	if err := hwSettleValidation(ctx, lp); err != nil {
		t.Errorf("after the hosts stopped: %v", err)
	}
	if err := lp.stopAll(); err != nil {
		t.Errorf("stopping the daemons: %v", err)
	}
	d, err := hwCollect(ctx, lp)
	if err != nil {
		t.Fatalf("reading the final state: %v", err)
	}
	rep, err := hwReadReport(filepath.Join(lp.dir, "simclient-report.json"))
	if err != nil {
		t.Fatal(err)
	}
	s := d.check()
	s.Report = rep.Hardware
	t.Logf("hardware mix (%.0fs): %s", time.Since(start).Seconds(), s)
	for _, line := range s.Details {
		t.Logf("  %s", line)
	}
	line := fmt.Sprintf("hardware mix: median estimate error after %d results: %.1f%% (rsc_fpops_est/p_fpops: %.1f%%)",
		s.EstN, 100*s.EstErr, 100*s.NaiveErr)
	t.Log(line)
	fmt.Println(line)
	for _, b := range s.Broken() {
		t.Errorf("%s", b)
	}
	if t.Failed() {
		lp.dumpLogs()
	}
}

// hwAddVersions adds the mt, cuda and opencl_amd versions of the demo app
// beside its plain one, with taskctl as an operator would, after checking
// that taskctl refuses a class the file does not define.
func hwAddVersions(ctx context.Context, t *testing.T, lp *lcProject) {
	t.Helper()
	r := &polRun{lcProject: lp}
	add := []string{"app-version", "add", "--app", demoapp.AppName, "--platform", projectrun.DemoPlatform,
		"--version-num", strconv.Itoa(projectrun.DemoVersionNum), "--plan-class"}
	out, err := r.taskctl(ctx, append(add, "opencl_nvidia")...)
	if err == nil || !strings.Contains(err.Error(), "opencl_amd") {
		t.Errorf("taskctl app-version add --plan-class opencl_nvidia (not defined) = %q, %v; want a refusal listing the defined classes", out, err)
	}
	for _, pc := range []string{"mt", "cuda", "opencl_amd"} {
		r.mustTaskctl(ctx, append(add, pc)...)
	}
}

// hwStart starts the daemons the run needs (no file deleter, purge or
// assimilator handler: nothing here checks them, and the machine is
// small) and the simulated hosts for hwRun.
func hwStart(ctx context.Context, t *testing.T, lp *lcProject, seed uint64) {
	t.Helper()
	steps := []struct {
		name, program string
		args          []string
	}{
		{"feeder", "feeder", []string{"--listen", anyPort, "--sleep", "200ms"}},
		{"scheduler", "scheduler", []string{"--addr", anyPort, "--listen", anyPort, "--url-base", "",
			"--upload-key", filepath.Join(lp.dir, "keys", "upload_private"), "--request-delay", "1s"}},
		{"transitioner", "transitioner", []string{"--listen", anyPort, "--sleep", "300ms"}},
		{"validator", "validator", []string{"--listen", anyPort, "--sleep", "300ms"}},
		{"work_generator", "work_generator", []string{"--listen", anyPort, "--sleep", "300ms",
			"--unsent-target", "150", "--delay-bound", "10m", "--min-quorum", "1", "--target-nresults", "1",
			"--rsc-fpops-est", strconv.FormatFloat(hwFpopsEst, 'g', -1, 64)}},
	}
	for _, s := range steps {
		pr := lp.startDaemon(ctx, s.name, s.program, s.args...)
		if s.name == "scheduler" {
			lp.schedulerListens(ctx, pr)
		}
	}
	// Wait for a backlog, so the first requests find work of every kind.
	for {
		g, err := lp.progress(ctx)
		if err == nil && g.Unsent >= 100 {
			break
		}
		if err := lp.died(); err != nil {
			lp.dumpLogs()
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	args := []string{"--url", lp.schedURL, "--authenticators", lp.authFile, "--hosts", strconv.Itoa(hwHosts),
		"--ncpus", "2", "--mt-frac", "0.3", "--mt-cpus", strconv.Itoa(hwMTCPUs), "--gpu-frac", "0.5",
		"--gpu-efficiency", ftoa(hwGPUEfficiency), "--flops", ftoa(hwFlops), "--compute-time", hwComputeTime.String(),
		"--duration", hwRun.String(), "--backoff-scale", "0.01", "--backoff-max", "5s", "--seed", strconv.FormatUint(seed, 10),
		"--report", filepath.Join(lp.dir, "simclient-report.json"), "--summary-every", "20s"}
	var err error
	lp.sim, err = projectrun.Start(projectrun.Spec{Name: "simclient", Bin: filepath.Join(lp.bin, "simclient"),
		LogDir: filepath.Join(lp.dir, "logs"), Args: args})
	if err != nil {
		t.Fatal(err)
	}
}

// hwSettleValidation waits until no result awaits validation, so that
// every result the hosts reported has its verdict.
func hwSettleValidation(ctx context.Context, lp *lcProject) error {
	end := time.Now().Add(hwSettle)
	for {
		g, err := lp.progress(ctx)
		if err == nil && g.NeedValidate == 0 {
			return nil
		}
		if err := lp.died(); err != nil {
			return err
		}
		if time.Now().After(end) {
			return fmt.Errorf("results still await validation after %s: %s", hwSettle, g)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// hwReadReport reads the simulated client's JSON report.
func hwReadReport(path string) (simclient.Stats, error) {
	var s simclient.Stats
	b, err := os.ReadFile(path)
	if err != nil {
		return s, fmt.Errorf("simclient report: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("simclient report %s: %w", path, err)
	}
	return s, nil
}
