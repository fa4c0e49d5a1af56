// Package filedeleter deletes the files of finished jobs: the input files of
// workunits and the output files of results whose file_delete_state the
// transitioner set to READY.
//
// Reads: workunit (file_delete_state = READY; xml_doc for the input file
// names), result (file_delete_state = READY; xml_doc_in for the output file
// names, report_deadline for when its upload certificates expire);
// shared_file (state, last_ref_time, name, gzipped_nbytes) with
// workunit_shared_file ⋈ workunit (file_delete_state). Files are found with
// package fanout under the download directory (inputs) and the upload
// directory (outputs).
// Writes: workunit.file_delete_state and result.file_delete_state, READY →
// DONE, or READY → ERROR when a file could not be deleted for a reason other
// than being absent already (or the row's XML is unreadable); mod_time;
// shared_file.state, 0 (live) → 1 (being deleted) → 2 (deleted).
//
// A job's input files are deleted with it, each with its gzip'd copy
// (NAME.gz, in NAME's fan-out directory) when it has one, except those
// marked <no_delete/> (shared files among them) and those on another
// server (<url>). Every output file of a result is deleted.
//
// Shared input files (shared.go) are deleted by a pass of their own: a
// shared file goes from live to being deleted, in one conditional statement,
// when no job whose files are still needed (file_delete_state not DONE)
// refers to it and none referred to it for SharedFileGrace; then the file
// and its gzip'd copy are deleted, then the row is marked deleted. A job
// submitted at the same moment either refers to the file first (its update
// raises last_ref_time, and the pass's statement, waiting for the row,
// leaves it) or is refused (its update requires the state live), so no
// file is deleted under a job.
//
// Each pass reads up to --batch READY workunits and --batch READY results
// (id and file list only), deletes all their files with a few workers, and
// then marks the rows in one conditional update per table and outcome
// (UPDATE ... WHERE id IN (...) AND file_delete_state = READY): a row another
// replica or an operator moved on meanwhile is skipped without holding up
// the rest. Files are deleted before their rows are marked. A crash between
// the two leaves the rows READY with their files gone; the next pass finds
// them missing, which is not an error, and marks them DONE. A row in ERROR
// stays until an operator fixes the cause and sets it back to READY.
//
// A result's upload certificates authorise uploads until its report
// deadline plus the scheduler's upload grace (UploadGrace), and the data
// server cannot ask whether the result is over. So an output whose
// certificate is still good is not just deleted, which would let the
// certificate create it again unseen: it is replaced by a tombstone, an
// empty closed file (which the data server writes nothing to) whose mtime
// is the expiry rounded up to outputfile.TombstoneStep, also where no file
// was. Tombstones are hard links to one file per step in the upload
// directory's .tombstones (outputfile.Tombstoner): a link costs a fiftieth
// of a file's creation on the development machine. The orphan
// sweep judges age by mtime, so it keeps a tombstone until OrphanAge past
// the expiry, and then deletes it once no row names its result.
//
// With OrphanAge set, a pass also runs a step of the orphan sweep
// (orphans.go): at most once per OrphanEvery, a round walks the upload
// directory and deletes the files, unchanged for OrphanAge, that no result
// row names (reads result.name only, by the unique key). These are
// uploads that came after their result's row was purged, which the data
// server, never reading the database, stores like any other.
//
// File lists are read with a scanner for the plain XML jobxml writes, and
// with jobxml itself for anything else (names.go).
package filedeleter
