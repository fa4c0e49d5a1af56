// Package simreport records what a run of simulated volunteer hosts did and
// writes it out as a report: JSON for tools and tests, a text table for
// people, and an SVG plot of each project's share of the computing over time.
//
// The simulator (simulated time) and the live simulated client (real time)
// both feed one Recorder with events — CPU seconds computed, scheduler RPCs,
// work fetched, tasks completed and reported, deadlines missed — stamped with
// seconds since the run began on their own clock. Report turns the events into
// per-project figures, totals and a time series; WriteDir writes report.json,
// report.txt and shares.svg.
//
// The question the report answers is the one the client policies of the seeds
// are judged by: did each project get the fraction of the hosts' CPU time its
// resource share asks for (achieved_share against resource_share), without
// missing deadlines, leaving CPUs idle or flooding the schedulers with RPCs.
//
// Reads and writes nothing but the report directory it is given.
package simreport
