// Package jobs creates jobs: it stages a job's input file in the download
// directory and inserts its workunit row with the job's parameters, so that
// the transitioner creates its instances. The work generator and the
// operator tool's "job submit" both create jobs through it, so a job looks
// the same whichever made it.
//
// Order and crash safety: every input file is written to a temporary name,
// synced and renamed into place, and its directory synced, before the
// workunit rows are inserted (one transaction per batch). A crash in between
// leaves input files no row refers to; their names are never reused by the
// work generator (they carry random bits), so they are harmless litter, and
// a later submit of the same name by hand replaces them. A row never refers
// to a file that is not on disk.
package jobs
