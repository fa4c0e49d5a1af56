// Package scalebench measures how the server's costs grow with the size of
// its tables (issue 22, make bench-scale). For each size it starts a private
// MariaDB, fills it through the store's bulk loads (store.ScaleFill*) with
// users, hosts, jobs and instances in a real project's proportions, and
// then measures, each with only its own programs running as processes:
// the feeder's enumeration and its cache's fill ratio; dispatch (feeder and
// scheduler under a load generator of CPU and GPU hosts) at the highest
// rate with p99 under 100 ms; the transitioner, validator, assimilator,
// file deleter and db_purge on their own work sets among the big tables;
// the status page, `taskctl status` and `taskctl host explain`; and the
// buffer pool each phase touched. With a buffer-pool sweep (Options.Pools)
// it fills each size once, keeps the stopped server's data directory, and
// measures every phase again under each pool on a copy of it, to find each
// phase's working set: the smallest pool that keeps its database CPU per
// unit within 10% of the best. It writes report.json, a text table and an
// SVG plot of CPU per instance against table size.
package scalebench
