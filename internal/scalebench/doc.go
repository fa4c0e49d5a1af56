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
// buffer pool each phase touched. It writes report.json, a text table and
// an SVG plot of CPU per instance against table size.
package scalebench
