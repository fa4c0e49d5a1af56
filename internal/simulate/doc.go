// Package simulate runs a population of simulated volunteer hosts against
// in-process models of project servers, in simulated time, and reports what
// the client policies of seeds 000, 001, 002 and 004 achieved: the share of
// CPU each project got against its resource share, deadlines missed, RPC
// counts and the RPC rate after outages.
//
// A run is described by a Scenario (a YAML file: the host population, the
// projects with their resource shares, jobs and server behaviour, and the
// client's policy settings). Every host is a clientpolicy.Host; the package
// supplies what the policy leaves to its caller: a clock, task progress,
// on/off periods, and the servers that answer RPCs.
//
// Hosts may have GPUs (population gpu_frac): a GPU host has a second
// clientpolicy.Host for its GPUs, with its own queue, scheduler and, per
// project, work-fetch back-off, so each resource fetches for itself as in
// the real client; a project's gpu_job answers GPU requests, a project
// without one answers <no_rsc_apps> and is not asked again. A job with
// ncpus > 1 is multi-threaded and occupies that many CPUs (at most the
// host's). Each host's work fetch uses the active fraction it measures
// (clientpolicy.Activity over activity_window, from a history of its own
// on/off process before the run), not its configured on fraction.
//
// A server may be overloaded for a while (server.overloaded windows): it
// sends no work and says so, and its hosts ask again after request_delay
// without backing off or freezing its debt, unlike a no_work window.
//
// A project's server model decides with the real scheduler's decision
// function (scheduler.DecideSends): the project keeps one reply's worth of
// unsent jobs per app as the feeder's cache would (each one sent is
// replaced), its apps and versions as the feeder's tables (a CPU version,
// of plan class "mt" when its jobs are multi-threaded, and an NVIDIA
// "cuda" version for gpu_job), and each request is the host's row (CPUs,
// speed, measured active fraction), its <coprocs>, the resource's
// seconds asked and the project's tasks it holds. So a job that would
// miss its deadline on a slow or seldom-on host is not sent, a host at
// the in-progress limit (server.max_in_progress_per_cpu, default 4 as the
// scheduler's flag) gets nothing, and a reply holds at most max_tasks.
// What only the database can refuse (a job's other instance went to the
// same volunteer, homogeneous redundancy) does not arise: every job is
// sent once.
//
// Time is float64 seconds since the start of the run. One event heap holds
// the next wake-up of every host: the earliest of its next task completion,
// the end of its scheduling period, the policy's NextRPCTime and its next
// on/off change. A wake-up brings the host's running tasks up to the
// present (one CPU second per second while the host is on), marks finished
// ones, runs the CPU scheduler, and makes the RPCs the policy asks for; an
// RPC is answered at once (latency is 0 in simulated time). So a run of
// 1,000 hosts over two simulated days takes seconds, and it is a pure
// function of its scenario: the same seed gives the same report, apart from
// the wall time it took. Each host draws from its own random stream, so
// what one host does never depends on the order hosts are processed in.
//
// A deadline counts as missed when its task is reported after it, or when
// the run ends with the task unreported past it (unfinished, or finished
// but certain to be reported late).
//
// Reads: the scenario file (LoadScenario). Writes: nothing; the caller writes
// the simreport.Report that Run returns.
package simulate
