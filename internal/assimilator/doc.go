// Package assimilator is the daemon that hands finished jobs to the project
// (seed 003 §3.1): for a job with a canonical instance it stores the
// canonical output in the results directory; for a job that failed for good
// it records why. Either way it then marks the job assimilated.
//
// Reads: workunit (appid, assimilate_state = READY, id % mod = mod_index);
// the canonical result row; its output files in the upload directory.
//
// Writes: files in the results directory (each written whole, atomically);
// workunit assimilate_state (READY → DONE), transition_time (the trigger)
// and mod_time.
//
// The file is written before the row is updated, and writing it again gives
// the same bytes, so a crash between the two only means the job is handled
// once more: its output exists exactly once either way.
package assimilator
