// Package planclass reads BOINC's plan_class_spec.xml and decides, for one
// host, whether an app version of a plan class may run there and what one
// of its tasks uses and is projected to do: CPUs, the GPU kind and share,
// GPU memory, FLOPS and extra command-line arguments (BOINC's HOST_USAGE).
//
// It follows BOINC's sched/plan_class_spec.cpp element by element, so an
// existing project's file keeps its meaning, with these differences:
//
//   - an element the file format does not have is a parse error naming it
//     and its class: a typo must not silently widen a class;
//   - elements this server cannot evaluate (VirtualBox, WSL and Docker,
//     project-preference tags, job-id and batch ranges, infeasible_random)
//     are read, but a class using one is refused to every host, with that
//     element as the rule; Specs.Supported says so before a version is
//     added;
//   - regular expressions are POSIX extended ones, as BOINC's regcomp, and
//     one that does not compile is a parse error;
//   - cpu_feature and gpu_type are compared case-insensitively, and gpu_type
//     may also be the resource name ("NVIDIA", "ATI", "intel_gpu",
//     "apple_gpu");
//   - <cuda/> and <cal/> require a GPU on which the client found the CUDA or
//     CAL runtime (BOINC reads them only to gate min_cuda_version);
//   - a negative ngpus packs as many tasks on a GPU as fit in its memory
//     (gpu_usage = 1/n), where BOINC's formula gives one task per GPU.
//
// The package is pure: no SQL, no clock, no randomness.
package planclass
