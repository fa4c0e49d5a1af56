// Package trickle is the trickle handler daemon: it hands each trickle-up
// message (msg_from_host, stored by the scheduler) to a Handler once, and
// the framework science code builds its own trickle handler with (the
// public package trickle at the module root adapts a Go handler to
// Program). Built-in handler: CommandHandler (--handler-cmd) runs a program
// per message. Built-in options, after the handler (as BOINC's
// sched/trickle_deadline.cpp and sched/trickle_credit.cpp offer):
// --extend-deadline moves the report deadline of the message's task, still
// in progress on its host, to at least now plus the duration, so a task
// that keeps reporting progress does not time out; --credit-per-cpu-second
// grants the host and its user credit for the CPU time the message
// reports (<cpu_time> or <runtime>: the time since the task's previous
// trickle, BOINC's convention), at most --credit-max-cpu-seconds of it.
//
// Reads: msg_from_host (handled = 0, id hashing to mod_index as
// store.Partition says, the --variety only if set, paged by id).
//
// Writes, in one transaction per message after its handler succeeded:
// msg_from_host.handled 0 → 1, conditional (a message another replica
// marked meanwhile is a conflict and nothing else is written); the
// handler's replies as msg_to_host rows; result.report_deadline and
// mod_time (--extend-deadline); host and user total_credit, expavg_credit,
// expavg_time (--credit-per-cpu-second). So each message's effects happen
// exactly once, whatever the replicas, crashes and retries; the handler
// itself may run again after a crash before the mark, and must be
// idempotent. A handler that fails leaves the message unhandled: it is
// retried after a back-off (RetryMin doubling to RetryMax, in memory) while
// the others go on.
package trickle
