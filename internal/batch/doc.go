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
// Reads: app, batch, workunit and result (counts), known_answer (through
// package jobs), the results directory the assimilator's file handler writes
// (<dir>/<job>/<open name>, <dir>/<job>.error). Writes: batch, workunit (creation;
// error_mask, hold and limits on cancel and requeue), input files in the
// download directory.
package batch
