// Package taskctl is the operator tool: it creates and upgrades the schema,
// adds platforms, apps (with their lifecycle policies and default job
// templates), app versions, users and known-answer inputs, stages shared
// input files, submits jobs and batches (with create_work's options: several
// inputs, remote files, command lines, templates), cancels and requeues
// them, collects a batch's outputs, shows the queues, writes the statistics
// dump (stats export, package statsexport), and generates the project's key
// pairs. It reads the same project configuration file,
// environment variables and flags as the daemons.
//
// Writes: schema (DDL), platform, app, app_version, user, known_answer,
// job_template rows; workunit rows and input files (job submit, batch
// submit), shared_file rows and files (file stage), all through package
// jobs, as the work generator does; batch rows; workunit error_mask, hold
// and limits on cancel and requeue (through package batch); key files.
// Reads: counts over workunit and result (status, batch status), the results
// directory (batch outputs); user, team, host and app for the statistics
// dump, which it writes as files, not rows.
//
// Secrets: a new user's authenticator, and a submitter's API key (user
// apikey, stored only as its SHA-256), are printed once on standard output
// and nowhere else; a password given with --password or --password-stdin is
// stored only as bcrypt of the client's md5 (package passwd); private keys
// go only to their 0600 files.
package taskctl
