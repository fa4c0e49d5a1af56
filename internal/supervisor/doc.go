// Package supervisor runs a project's daemons as child processes: the
// equivalent of BOINC's start, stop and status scripts. It starts every
// replica the configuration file's daemons list names, restarts one that
// exits unexpectedly with exponential back-off, stops them all in reverse
// start order on SIGTERM/SIGINT, and keeps a pid file and a JSON state file
// under <project-dir>/run/ so that the start, stop and status commands,
// running as other processes, can find and describe it.
//
// Stop order: the reverse of the daemons list. The example configuration
// lists producers before consumers (feeder before scheduler, the back-end
// daemons after), so the scheduler stops first: it finishes the requests in
// hand and no client is served from a cache the feeder no longer fills, and
// the back-end daemons (transitioner, validator, assimilator, ...) stop
// last, after the rows the last replies changed have had a chance to be
// handled. Each daemon gets SIGTERM and a grace period to finish its pass,
// then SIGKILL (sent to its process group, so a handler script it ran goes
// too).
package supervisor
