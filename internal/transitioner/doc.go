// Package transitioner is the daemon that moves jobs through their states
// (seed 003 §3.1): it reads every job whose transition_time has come, with
// all of its instances, in one joined stream, lets the state machine of
// package transition decide under the policy of the job's app, and writes
// the pass's decisions in one transaction: the jobs are locked in id order
// and their guards compared, then one multi-row statement each inserts the
// new instances, updates the jobs and updates the instances of the jobs
// that did not change. A job that changed is left alone (still due); one the
// server refuses makes the pass fall back to one transaction per job, so it
// fails alone. The replica with mod index
// 0 also runs the batch pass every --tail-interval: batch completion and
// tail acceleration.
//
// Reads: workunit (transition_time <= now, id hashing to mod_index as
// store.Partition says, oldest due first) ⋈ result, only the columns the state machine decides on;
// app (hold_failed_jobs, cached for 30 s); batch (state in progress) with
// its jobs' counts (workunit by wu_batch).
//
// Writes: new result rows (UNSENT; send_flags and raised priority for the
// instances of a tail-accelerated job); result server_state, outcome and
// file_delete_state (timeouts, DIDNT_NEED, deletion); workunit
// need_validate, error_mask, hold_reason, hold_time, assimilate_state (to
// READY), file_delete_state (to READY), transition_time and mod_time. The
// batch pass writes workunit target_nresults and tail_copies (one more
// instance, with a trigger) and batch state and completion_time (done).
//
// A job's write is guarded by the transition_time it was read with. Every
// program that changes something the transitioner looks at sets
// transition_time = LEAST(transition_time - 1, now), so a job triggered while
// it was being decided loses its write and is decided again on the next pass.
// A hold is set, kept or cleared only through that guarded write; the
// operator's requeue and cancel clear it themselves and trigger the job.
package transitioner
