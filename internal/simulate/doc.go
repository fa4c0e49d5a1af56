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
// The server model is not the real scheduler's decision function: it
// sends tasks until their estimates cover the request (at least one, at
// most max_tasks) and has no deadline, memory, disk, instance or
// in-progress limit checks; see the issue-19 report for the differences.
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
