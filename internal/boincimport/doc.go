// Package boincimport moves a BOINC project's database into ours
// (`taskctl import boinc`): platforms, apps, app versions with their files
// and code signatures as they are, teams, users (ids, account keys,
// password hashes, credit, preferences), hosts (ids kept, so every attached
// client's host id, rpc_seqno and host_cpid still match) and the work in
// flight: every job with neither a canonical result nor an error that is
// not assimilated, with all its instances, deadlines and outputs, so tasks
// on volunteers' machines are reported, validated and credited here.
// Finished jobs are not imported.
//
// The BOINC database is only read: an operator can stop our daemons and
// start BOINC's on it again. Ids are kept, and every chunk of rows is
// checked against what our database holds at those ids before it is
// written, so running the import again after a crash adds only what is
// missing, and a row of ours at the same id that is not the imported one is
// a conflict that stops the import before anything of that chunk is
// written. Rows are read in id order, a chunk at a time, and written with
// multi-row inserts; a job goes in with its instances in one transaction.
package boincimport
