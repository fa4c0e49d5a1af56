// Package submitapi is the HTTP JSON API through which scientists submit and
// follow batches of jobs. The scheduler mounts it under /api/v1/ when started
// with --submit-api.
//
// Authentication: every request carries "Authorization: Bearer <API key>"
// of a user with submit_allowed = 1. The API key is the submitter's own
// (taskctl user apikey prints a new one, once), not the account key, which
// every attached client holds and lookup_account hands out for a password.
// The database keeps only its SHA-256 (user.api_key_hash), through which it
// is looked up. A user sees and cancels only the batches (and their jobs)
// it submitted; others' look missing (404).
//
// Endpoints (request and response bodies are JSON; file contents are base64,
// as encoding/json writes []byte):
//
//	POST /api/v1/batches                  submit; Idempotency-Key header or "idempotency_key"
//	POST /api/v1/files?name=N[&gzip=1]    stage the body as shared file N; answers its physical name
//	GET  /api/v1/batches                  the caller's batches (?after=ID&limit=N&state=in_progress|done|cancelled)
//	GET  /api/v1/batches/{id}             one batch with its counts
//	POST /api/v1/batches/{id}/cancel      cancel the batch
//	GET  /api/v1/batches/{id}/outputs     the assimilated outputs as a tar.gz
//	POST /api/v1/jobs/{name}/cancel       cancel one job of the caller's batches
//	GET  /api/v1/jobs/{name}/outputs      the job's outputs by logical name (or its error)
//	GET  /api/v1/jobs/{name}/outputs/{f}  one output's content
//
// A submission describes each job as BOINC's create_work does: its files in
// the input template's order ("inputs": each {"data": base64}, {"shared":
// name} or {"url", "md5", "nbytes"}), its "command_line", and for the batch
// "input_template" and "output_template" (BOINC's XML; default: the app's).
// A job's "input" is short for one file given by content. Everything is
// checked before anything is staged: a wrong file count for the template,
// a shared file not staged, an output without <max_nbytes>, a bad name
// answer 400 and leave no file and no row.
//
// A submission answers 201 with the batch; repeated with the same
// idempotency key it answers 200 with the same batch and creates nothing.
// Errors answer {"error": "..."} with 400 (bad request), 401 (no or unknown
// key), 403 (not allowed to submit), 404, 405, 409 (name taken, or not
// cancellable), 413 (body or inputs too large), 422 (idempotency key used for
// another batch) or 500.
//
// Reads: user (by api_key_hash). Everything else goes through package batch
// (shared files through package jobs).
package submitapi
