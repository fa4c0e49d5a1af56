// Package statuspage is the project's status at a glance: the daemons and
// their health, the queues, the results in progress and recent throughput.
// One Status value is collected from the database and the daemons'
// /healthz and /metrics, and shown three ways: an HTML page and the same
// data as JSON (the handler New returns, mounted by `taskctl status serve`
// and the supervisor), and a text report (`taskctl status`).
//
// Reads: result (counts by state, by app in progress, received_time and
// mod_time for throughput), workunit (queues, oldest due transition_time,
// assimilated by mod_time), app (names). Writes nothing.
package statuspage
