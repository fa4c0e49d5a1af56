// Package workgenerator keeps an app supplied with work: each pass it counts
// the app's unsent backlog and, while that is below a target, creates jobs
// in batches through package jobs. Their input files are the demo app's
// unless the program brings its own (Program.Input, which a project plugs
// in through the public package workgenerator at the module root).
//
// Reads: result (server_state, via workunit.appid), workunit (appid,
// transition_time, target_nresults, name), app (by name; its policies on every
// batch, through package jobs, so a change applies without a restart),
// known_answer (when the app mixes in known-answer jobs).
// Writes: new workunit rows with transition_time = now (and their
// workunit_shared_file and job_template rows, through package jobs); input
// files in the download directory; shared_file rows and files (StageShared); the counter file <project-dir>/work_generator.<app>.count.
//
// The backlog is counted in instances: results of the app that are UNSENT,
// plus target_nresults for every job of the app that has no instances yet
// (still awaiting the transitioner). Without the second term the generator
// would overshoot between creating jobs and the transitioner giving them
// instances. Both counts come from one statement, so one snapshot. The count
// reads the whole backlog, so while filling a large shortfall it is not
// repeated: for up to 10 s, the last count plus the most instances the jobs
// created since can bring stands in for it as long as that bound leaves room
// for a whole batch (when a count would make a whole batch too).
//
// # The --total-jobs limit across restarts
//
// Jobs created so far are counted in the counter file, not in the database,
// because db_purge deletes finished jobs and a count of rows would go down.
// The file is JSON, replaced atomically (temporary file, fsync, rename, fsync
// of the directory), and written twice per batch:
//
//  1. before the batch's transaction: {"created": N, "pending": {"jobs": k,
//     "first_name": name of the batch's first job}};
//  2. after it commits: {"created": N+k}.
//
// A batch is one transaction, so its first job is in the database exactly
// when all of it is. On start (and after any failed pass) a pending batch is
// resolved by looking its first job up by name: found means it committed and
// counts. So a crash, or a commit whose answer was lost, never lets a restart
// create more than --total-jobs. The one window left: the pending batch got
// in, then the generator stayed down until every job of that batch finished
// and was purged; then its jobs count as never made and up to one batch more
// is created. db_purge's --min-age makes this as unlikely as wanted.
//
// As a floor, the count is also never less than the number of the app's jobs
// in the database whose name starts with "<job-prefix>_", which covers a lost
// counter file as long as nothing was purged yet.
//
// Run one work generator per app: it does not shard with --mod, and two for
// one app would each fill the same backlog.
package workgenerator
