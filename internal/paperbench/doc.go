// Package paperbench runs the paper's benchmark (issue 6) against the real
// programs: it sets up a fresh project, then runs the six phases of a job's
// life — creation, dispatch, validation, assimilation, file deletion, purge —
// each with only its own programs running, started from the bin directory as
// processes and driven only through their command lines. Around each phase it
// reads every program's and the database server's CPU time and I/O from /proc,
// samples their memory once a second, and in the end prints the paper's table
// and writes the same as JSON.
//
// The dispatch phase's load comes from a generator inside the benchmark
// process (64 keep-alive HTTP connections of simulated hosts, each request
// reporting the host's previous instance as a success and asking for one new
// one). Its CPU is reported on its own and not counted in the totals, as the
// paper does not count its clients.
//
// Completion is watched cheaply so the watching does not distort the database
// figures: the daemons' /metrics counters are read every half second, and a
// confirming database query (index-only counts) runs only when the counters
// stood still since the last look, or at most every five seconds while they
// move.
//
// By default the database is a private MariaDB the benchmark installs into a
// temporary directory and starts on a free loopback port, so the database CPU
// measured is only the benchmark's; it is stopped and removed at the end, also
// on error and on SIGINT.
package paperbench
