// Package filedeleter deletes the files of finished jobs: the input files of
// workunits and the output files of results whose file_delete_state the
// transitioner set to READY.
//
// Reads: workunit (file_delete_state = READY; xml_doc for the input file
// names), result (file_delete_state = READY; xml_doc_in for the output file
// names). Files are found with package fanout under the download directory
// (inputs) and the upload directory (outputs).
// Writes: workunit.file_delete_state and result.file_delete_state, READY →
// DONE, or READY → ERROR when a file could not be deleted for a reason other
// than being absent already (or the row's XML is unreadable); mod_time.
//
// Files are deleted before the row is marked, each mark a conditional
// update. A crash between the two leaves the row READY with its files gone;
// the next pass finds them missing, which is not an error, and marks it
// DONE. A row in ERROR stays until an operator fixes the cause and sets it
// back to READY.
package filedeleter
