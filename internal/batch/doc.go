// Package batch is what scientists do with jobs, shared by the operator tool
// (taskctl batch ...) and the submission API: submit a batch of jobs, follow
// it, cancel it or one of its jobs, requeue jobs the project put on hold, and
// collect the batch's outputs.
//
// Submit creates the batch row and all its jobs in one transaction (through
// package jobs), so a batch is never seen half made. A submission that names
// an idempotency key already used by the same submitter creates nothing and
// returns the earlier batch: a client that lost the answer can safely retry.
//
// Cancel and requeue follow the shared lifecycle: a cancel sets the job's
// CANCELLED error bit and triggers the transitioner, which retires the
// unsent instances and hands the job to the assimilator; the scheduler aborts
// instances in progress. A requeue lifts a hold and gives the job its limits
// again. Large batches are changed in short chunks of jobs, never in one long
// statement; an interrupted cancel is finished by cancelling again.
//
// A job is described as BOINC's create_work describes one: its files (each
// given by content, as a shared file, or as a remote URL), its command line,
// and the batch's input and output templates (default: the app's). Package
// jobs checks all of it before staging anything; its ErrInvalid becomes
// ErrInvalid here. JobOutputs names a job's outputs by their logical names,
// the open names of the job's output template.
//
// Reads: app, batch, workunit and result (counts), job_template,
// known_answer and shared_file (through package jobs), the results
// directory the assimilator's file handler writes (<dir>/<job>/<open name>,
// <dir>/<job>.error). Writes: batch, workunit (creation; error_mask, hold
// and limits on cancel and requeue), input files and shared files in the
// download directory (through package jobs).
package batch
