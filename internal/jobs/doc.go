// Package jobs creates jobs as BOINC's create_work does: from the job's
// input template (its own, the app's, or the built-in one: one file opened
// as "in") it stages the files given to the job in the download directory
// (with a gzip'd copy beside a file the template marks <gzip/>), refers to
// shared files staged once for many jobs (StageShared; content-addressed,
// recorded in workunit_shared_file with the job so the file deleter keeps
// them while a job needs them) and to files on other servers, and inserts
// the workunit row with the document the template makes, the template's
// parameters where the submitter left the defaults, and the job's output
// template, from which the transitioner makes each instance's output
// files. The work generator, the operator
// tool's "job submit" and "batch submit", and the submission API all create
// jobs through it, so a job looks the same whichever made it.
//
// The app's policies shape the rows: under adaptive replication a job asking
// for a quorum q >= 2 is stored with min_quorum 1, target_nresults 1 and
// replication_quorum q; and for every job created, with probability
// app.known_answer_fraction, one known-answer job is added: a copy of a random
// known_answer row of the app (one instance, no batch), whose results the
// validator checks against the known output. It is named like a job created
// with it (see knownAnswerName) and its input file like theirs: only
// workunit.known_answer_id, which no host is sent, marks it. Jobs of a batch
// are inserted in the transaction that inserts the batch row.
//
// Order and crash safety: every input file is written to a temporary name
// and renamed into place, and then all of a batch's files and directories are
// made durable at once (synced many at a time, sharing journal commits),
// before the workunit rows are inserted (one
// transaction per batch). A crash in between
// leaves input files no row refers to; their names are never reused by the
// work generator (they carry random bits), so they are harmless litter, and
// a later submit of the same name by hand replaces them. A row never refers
// to a file that is not on disk.
package jobs
