// Package clientpolicy is the decision logic of one volunteer host: which
// tasks run on its CPUs, when it contacts which project's scheduler, how much
// work it asks for, and how it backs off. It implements the client policies
// of the seeds: version-4 debt scheduling and the work-fetch policy (seed
// 000), EDF for tasks at risk with short- and long-term debt (seed 001), RPC
// timing with request_delay, randomised exponential back-off and
// report-result sessions (seed 002), and the worker-choice strategies of
// seed 004 (fair share, weighted and interleaved weighted round robin).
//
// Two rules go beyond the seeds' text, each for a goal the seeds state. The
// EDF scheduler has a feasibility guard: when the queue can be finished in
// time, it forces earliest-deadline tasks onto CPUs if its choice would
// otherwise lose that before the next scheduling decision (seed 001's
// round-robin test alone misses deadlines that are at risk only because
// the scheduler does not look again for a period). And the work fetch
// does not ask an overworked project (long-term debt below -SchedPeriod x
// NCPUs) for work while every CPU has a task, so that EDF's departures
// from the resource shares are paid back over the long term.
//
// The package has no clock, no I/O and no goroutines. Time is a float64 of
// seconds on the caller's clock, so the same Host runs against live
// schedulers in wall time (internal/simclient) and against an in-process
// server model in simulated time (internal/simulate). The caller owns the
// task lifecycle: it advances Task.CPU while a task runs, calls
// Host.TaskFinished when the computation ends and Host.Schedule when a CPU is
// free, work arrives or the scheduling period ends; it asks Host.NextRPC
// whether to contact a scheduler and tells the host how the RPC went.
package clientpolicy
