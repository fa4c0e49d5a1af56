// Package assimilator is the daemon that hands finished jobs to the project
// (seed 003 §3.1), and the framework science code builds its own
// assimilator with. For a job with a canonical instance a Handler gets the
// instance and its output files; for a job that failed for good it gets the
// job alone (its error mask says why). Either way the job is then marked
// assimilated. A handler sees every output file of the canonical instance
// under its logical name (open name); an optional output the instance does
// not have is left out, a required one missing (or an upload not finished)
// holds the job back for a retry. Built-in handlers: FileHandler
// (--handler copy, the default) hands the canonical outputs to a results
// directory, as <results>/<job>/<open name> (a hard link to the uploaded
// file where it can, else a copy); CommandHandler (--handler command) runs
// a program per job, the outputs as arguments, their names in
// TASKSERVER_OUTPUT_NAMES. A project with a Go handler
// writes its own main around the public package assimilator at the module
// root, which adapts it to Program (see examples/assimilator).
//
// Reads: workunit (appid, assimilate_state = READY, id hashing to
// mod_index as store.Partition says, paged by id) ⋈ its canonical result, one query per page; the canonical
// output files in the upload directory.
//
// Writes: workunit assimilate_state (READY → DONE), transition_time (the
// trigger) and mod_time, for the jobs of a page whose handler succeeded, in
// one statement, each row only if still READY (a job marked meanwhile is a
// conflict, the others are marked); whatever the handler writes
// (FileHandler: files in the results directory, each whole under its name,
// linked or renamed into place).
//
// The handler runs before the row is updated and must be idempotent, so a
// crash between the two only means the job is handled once more. A handler
// that is a Flusher makes a page's work durable in one Flush, called after
// the page's handlers and before the page is marked: FileHandler makes a
// page's files durable with concurrent syncs of its files and one sync of
// the results directory, not a commit per job. A failed Flush leaves the page's handled jobs READY. A
// handler that fails leaves the job READY: it is retried with a per-job
// exponential back-off held in memory (RetryMin doubling to RetryMax,
// jittered), and the scan pages past jobs that are backing off, so a broken
// job never holds up the others and is never dropped. Known-answer jobs
// (known_answer_id <> 0) only test hosts: they are marked done without the
// handler.
package assimilator
