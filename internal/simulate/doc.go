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
// on/off periods, and the servers that answer RPCs. One event heap holds the
// next wake-up time of every host, so a run of 1,000 hosts over two simulated
// days takes seconds. A run is a pure function of its scenario: the same
// seed gives the same report, apart from the wall time it took.
//
// Reads: the scenario file (LoadScenario). Writes: nothing; the caller writes
// the simreport.Report that Run returns.
package simulate
