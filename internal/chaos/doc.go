// Package chaos runs a complete project under faults and checks that
// nothing was lost (issue 8, `make chaos`). It starts a private MariaDB, every
// daemon as its own process (two transitioner replicas with --mod 2) and
// simulated volunteers running a fixed number of jobs; meanwhile it kills
// daemons with SIGKILL at seeded random moments and restarts them, kills
// and restarts the database server once, fills the upload directory's disk
// for a while and floods the scheduler with a burst of extra hosts. When
// every job is finished and purged it joins the database, db_purge's
// archives, the assimilation handler's record, the hosts' acknowledgement
// logs and the project's folders, and counts what broke a promise.
//
// The assimilator runs this program's `record` command as its handler
// (--handler command): each call appends one line to a log, so the check
// sees every delivery, not only the last one.
package chaos
