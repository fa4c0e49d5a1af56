// Package dbpurge keeps the job tables a working set: it archives finished
// jobs and their instances to compressed XML files and then deletes the
// rows.
//
// Reads: workunit (file_delete_state = DONE, mod_time, and all columns to
// archive), result (every instance of those jobs).
// Writes: archive files in the archive directory; deletes workunit, result,
// workunit_user and workunit_shared_file rows (a purged job's references to
// shared files, which the file deleter's shared-file pass no longer needs:
// a job is purged only once its files are deleted), and the status page's
// per-minute throughput rows older than two days (not archived: they are
// counts, not rows a project keeps).
//
// # Which jobs are purged
//
// A job whose input files are deleted (file_delete_state = DONE) and whose
// mod_time (set by the file deleter when it marked the job DONE) is at least
// --min-age old, provided every one of its instances is OVER and has
// file_delete_state DONE or INIT. The transitioner marks every instance
// READY in the same step as the job, so INIT here is an instance the job
// never needed; READY (files not yet deleted) and ERROR (files the file
// deleter could not delete) keep the job, so no file is left on disk with
// no row to say it exists. Fix the cause of an ERROR and set the row back
// to READY (the file deleter retries) or to DONE to let it be purged.
//
// Each pass lists up to --batch such jobs by id from a cursor, wrapping to
// the start when the list reaches the end of the table, so that no pass
// steps again over the jobs earlier passes deleted or passed over.
//
// # Archive format
//
// Like BOINC's db_purge: one record per row, the table name as the element
// and the column names as child elements, e.g.
//
//	<workunit>
//	    <id>12</id>
//	    <name>demo_1700000000_1f2e3d4c5b6a7988</name>
//	    ...
//	</workunit>
//
// Text values are XML-escaped (xml_doc too), so every record parses back to
// the stored value; characters XML cannot carry become U+FFFD. Workunits go
// to wu_archive_<unix>_<seq>.xml.gz, results to result_archive_<unix>_<seq>.xml.gz.
// Each batch is appended to the current file as complete gzip members, its
// instances 100 jobs' worth at a time so that memory follows that chunk and
// not --batch (gzip readers, Go's and zcat, read concatenated members as one
// stream); a file is closed after --max-archive-rows rows and a new one started, and
// every process start begins new files.
//
// # Crash safety
//
// A batch is archived first: its members are written to both files, both are
// fsynced (and the directory, when a file was created). Only then are the
// rows deleted, in one short transaction that deletes exactly the archived
// rows or, if they changed, nothing. A crash before the delete commits
// leaves the rows in place, and the next pass archives them again: a row can
// be in the archive twice, never in neither. A crash while a member is being
// written can leave a torn last member in that file; its rows were not
// deleted, so they are archived again in the next file, and a reader sees
// every complete record followed by an unexpected-EOF error.
package dbpurge
