// Package transitioner is the daemon that moves jobs through their states
// (seed 003 §3.1): it reads every job whose transition_time has come, with
// all of its instances, in one joined stream, lets the state machine of
// package transition decide, and writes the decision in one short
// transaction per job.
//
// Reads: workunit (transition_time <= now, id % mod = mod_index) ⋈ result.
//
// Writes: new result rows (UNSENT); result server_state, outcome and
// file_delete_state (timeouts, DIDNT_NEED, deletion); workunit need_validate,
// error_mask, assimilate_state (to READY), file_delete_state (to READY),
// transition_time and mod_time.
//
// A job's write is guarded by the transition_time it was read with. Every
// program that changes something the transitioner looks at sets
// transition_time = LEAST(transition_time - 1, now), so a job triggered while
// it was being decided loses its write and is decided again on the next pass.
package transitioner
