// Package taskctl is the operator tool: it creates and upgrades the schema,
// adds platforms, apps, app versions and users, submits jobs, shows the
// queues, and generates the project's key pairs. It reads the same project
// configuration file, environment variables and flags as the daemons.
//
// Writes: schema (DDL), platform, app, app_version, user rows; workunit rows
// and input files (job submit, through package jobs, as the work generator
// does); key files. Reads: counts over workunit and result (status).
//
// Secrets: a new user's authenticator is printed once on standard output and
// nowhere else; private keys go only to their 0600 files.
package taskctl
