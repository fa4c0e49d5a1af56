package projectrun

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/planclass"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// The demo app's one platform and version, the ones simulated hosts claim.
const (
	DemoPlatform   = "x86_64-pc-linux-gnu"
	DemoVersionNum = 100
)

// SeedDemoApp adds the demo app with its one platform and app version and
// returns the app's id. The app keeps the built-in templates (one input
// "in", one output "out"), so a job submitted by hand with one input
// (taskctl job submit --input IN, the submission API's "input") runs as
// before; the work generator's jobs carry the demo templates themselves
// (demoapp.InputTemplate, OutputTemplate: three inputs, two outputs).
func SeedDemoApp(ctx context.Context, st *store.Store) (int64, error) {
	now := time.Now().Unix()
	pid, err := st.PlatformInsert(ctx, row.Platform{CreateTime: now, Name: DemoPlatform, UserFriendlyName: "Linux on x86-64"})
	if err != nil {
		return 0, err
	}
	aid, err := st.AppInsert(ctx, row.App{CreateTime: now, Name: demoapp.AppName, UserFriendlyName: "Demo: iterated SHA-256", Weight: 1})
	if err != nil {
		return 0, err
	}
	if _, err := st.AppVersionInsert(ctx, row.AppVersion{CreateTime: now, AppID: aid, VersionNum: DemoVersionNum, PlatformID: pid}); err != nil {
		return 0, err
	}
	return aid, nil
}

// SeedUsers adds n volunteer accounts, named prefix0, prefix1, … with
// addresses at example.org, and returns their authenticators in order.
func SeedUsers(ctx context.Context, st *store.Store, n int, prefix string) ([]string, error) {
	now := time.Now().Unix()
	auths := make([]string, 0, n)
	for i := range n {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("make authenticator: %w", err)
		}
		auth := hex.EncodeToString(b[:])
		name := fmt.Sprintf("%s%d", prefix, i)
		if _, err := st.UserInsert(ctx, row.User{CreateTime: now, EmailAddr: name + "@example.org", Name: name, Authenticator: auth}); err != nil {
			return nil, err
		}
		auths = append(auths, auth)
	}
	return auths, nil
}

// PlanClassSpec is the plan_class_spec.xml of the local, chaos and
// benchmark projects: a multi-threaded CPU class, an NVIDIA CUDA class and an AMD OpenCL class,
// in BOINC's format.
const PlanClassSpec = `<plan_classes>
  <!-- Multi-threaded: up to 4 of the host's CPUs, at least 2; the app is told how many. -->
  <plan_class>
    <name>mt</name>
    <min_ncpus>2</min_ncpus>
    <max_threads>4</max_threads>
    <nthreads_cmdline/>
  </plan_class>
  <!-- NVIDIA GPU with CUDA 11 or later and 1 GB of memory; a task keeps a tenth of a CPU busy. -->
  <plan_class>
    <name>cuda</name>
    <gpu_type>nvidia</gpu_type>
    <cuda/>
    <min_cuda_version>11000</min_cuda_version>
    <min_gpu_ram_mb>1024</min_gpu_ram_mb>
    <cpu_frac>0.1</cpu_frac>
  </plan_class>
  <!-- AMD GPU with OpenCL 1.2 and 1 GB of memory; two tasks share a GPU. -->
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

// HardwarePlanClasses are the plan classes of PlanClassSpec, each the plan
// class of one of the demo app's versions SeedHardwareVersions adds.
var HardwarePlanClasses = []string{"mt", "cuda", "opencl_amd"}

// WritePlanClassSpec writes PlanClassSpec as the project's
// plan_class_spec.xml in dir, where the scheduler and taskctl read it,
// unless the file exists (an operator's edits are kept).
func WritePlanClassSpec(dir string) error {
	path := filepath.Join(dir, planclass.DefaultFile)
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.WriteFile(path, []byte(PlanClassSpec), 0o644); err != nil {
		return fmt.Errorf("write plan classes: %w", err)
	}
	return nil
}

// SeedHardwareVersions adds to the demo app (appID, on DemoPlatform) a
// version of each of HardwarePlanClasses, without files (the simulated
// client runs the science in-process): multi-core and GPU hosts then get
// multi-threaded and GPU work, each host the version fastest on it.
func SeedHardwareVersions(ctx context.Context, st *store.Store, appID int64) error {
	ps, err := st.PlatformList(ctx)
	if err != nil {
		return err
	}
	var pid int64
	for _, p := range ps {
		if p.Name == DemoPlatform {
			pid = p.ID
		}
	}
	if pid == 0 {
		return fmt.Errorf("seed hardware versions: no platform %s", DemoPlatform)
	}
	now := time.Now().Unix()
	for _, pc := range HardwarePlanClasses {
		if _, err := st.AppVersionInsert(ctx, row.AppVersion{CreateTime: now, AppID: appID, VersionNum: DemoVersionNum,
			PlatformID: pid, PlanClass: pc}); err != nil {
			return err
		}
	}
	return nil
}
