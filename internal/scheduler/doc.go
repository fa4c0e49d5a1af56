// Package scheduler answers the BOINC scheduler RPC: a volunteer host posts a
// <scheduler_request> and gets a <scheduler_reply> (PROTOCOL.md §3, §4, §9).
//
// For each request it authenticates the account key, creates or updates the
// host row, records the results the host reports, tells the host to abort
// listed tasks the project no longer needs (result_abort, or
// result_abort_if_not_started when only the job is done), resends results
// the host should have but no longer lists, and sends new work claimed from the
// feeder's shared-memory cache, subject to the host's platform, memory, disk,
// deadline feasibility (a fair-share queue prediction) and in-progress
// limits (per CPU, per GPU, per app: package limits), and to the
// volunteer's project preferences (package projectprefs: the apps they
// selected first, other apps only when those had no work and they accept
// them, beta apps and versions only for volunteers who opted in, no work for
// a processor type they opted out of, their own <max_jobs>). Every reply
// carries the stored <project_preferences>, from which the client learns
// its opt-outs.
//
// Real hardware (choice.go, policy.go): the request's resources are the
// CPU and each coprocessor type of its <coprocs>, each asked for work
// separately (cpu_req_secs/instances, each coprocessor's req_secs and
// req_instances; an old client's work_req_seconds is CPU work). Once per
// request every version of an app on the host's platforms that its plan
// class accepts (package planclass; no plan class: one CPU) is rated on the
// host (package hostav: the host's own rate once it has enough valid
// results, else the plan class's projection, else the benchmark), and per
// app and resource the fastest is chosen, now and then an unmeasured one so
// that every version gets measured. Each resource has its own fair-share
// queue (its instances; a task occupies avg_ncpus CPUs or gpu_usage GPUs
// for rsc_fpops_est / rate seconds). A job goes to the resource, among
// those still needing work, with the least of its request covered; the
// reply describes the version as the client expects (plan_class,
// avg_ncpus, max_ncpus, <coproc>, flops: the rate, so that the client's
// estimates agree), a resend keeps the version it was sent with, and
// <no_rsc_apps> names the host's resources no version serves. The daily
// quota (host_app_version) bounds each version's jobs a day.
//
// Policies applied when sending:
//   - homogeneous redundancy: a job of an app with homogeneous_redundancy
//     goes only to hosts of one class (OS family × CPU vendor, × CPU model
//     family in fine mode), the class of the first host it was sent to;
//   - adaptive replication: a job of such an app (min_quorum 1,
//     replication_quorum q) is sent alone to a trusted host (enough valid
//     results in a row, no error since), except for random spot checks
//     whose chance falls as the host proves itself; to any other host it is
//     replicated: its quorum is raised to q in the commit that sends it;
//   - quarantine: a host whose error streak reached --quarantine-streak
//     gets one task at a time and is never trusted;
//   - reliable-only instances (result.send_flags, tail copies of a batch's
//     last jobs) go only to trusted hosts that report within a quarter of
//     the job's delay bound;
//   - a job whose description cannot be sent at all gets its instance set
//     OVER/COULDNT_SEND.
//
// A work request that gets less than it asked for counts one reason in
// send_shortfall_total (the walk's stop: a limit, or the reason most
// candidates were turned down for). The send decision is one walk over the
// candidates (decide.go) with a dry mode, no claims and no writes, which
// Explain runs for one host: taskctl host explain.
//
// The rules live apart from the I/O: package decide decides every report
// and send of a commit on the rows the store locked (store.SchedulerCommit
// reads, calls decide.Batch, writes), and this package's rules of a request
// (the walk's check and shortfall, which instance a report names and what
// it amounts to, what becomes of the tasks a host holds, what a refused
// send means for its cache slot) are pure functions with table tests.
//
// Reports are recorded while the instance is in progress, and also after it
// timed out or was marked detached (late results are never dropped); a
// success for a job already failed or assimilated is TOO_LATE. A client
// that attached anew (same cpid, no host id or another user's) has its old
// host's tasks in progress marked CLIENT_DETACHED.
//
// Reads: user (by authenticator, with its project_prefs), host, result and workunit rows of the
// requesting host, the result rows (joined to their workunit) the host lists
// in <other_results>, the shared-memory cache (slots and static tables).
// Writes: concurrent requests share one transaction (the committer's group
// commit, store.SchedulerCommit), written with a few multi-row statements;
// each row's change is still conditional on the state the batch read, and
// one that may not happen fails alone. The changes:
//   - host: a new row, or the host_info columns, rpc_seqno and rpc_time;
//   - host: also error_streak and consecutive_valid on a reported client
//     error, avg_turnaround on a reported success (relative updates, in
//     the same commit);
//   - result: UNSENT → IN_PROGRESS on send (hostid, userid, sent_time,
//     report_deadline, app_version_id, app_version_num), conditional on
//     UNSENT; UNSENT → OVER/COULDNT_SEND; IN_PROGRESS (or OVER/NO_REPLY,
//     OVER/CLIENT_DETACHED) → OVER on report (outcome, client_state,
//     exit_status, cpu_time, elapsed_time, received_time, stderr_out,
//     xml_doc_out, validate_state, claimed_credit), conditional on the
//     state read and hostid; IN_PROGRESS → OVER/CLIENT_DETACHED;
//   - workunit.transition_time: moved to now on report, detach and
//     COULDNT_SEND, and no later than the deadline on send, so the
//     transitioner looks at the job again;
//   - workunit.hr_class (0 → the host's class, conditional) and, under
//     adaptive replication, min_quorum and target_nresults (raised to
//     replication_quorum), in the commit that sends it;
//   - workunit_user: one row per (job, user) sent, whose primary key keeps
//     two instances of one job from ever reaching one user.
//   - msg_from_host: the request's trickle-up messages, all in one
//     statement after the commit, each (host, md5 of the message) once;
//     the reply acks them (<message_ack/>) only once they are stored;
//   - msg_to_host.handled: the host's queued trickle-down messages are
//     marked delivered as they are put in the reply (--trickle-down).
//
// Nothing a client reports is dropped: a result is acknowledged only once
// its report is recorded (or it needs no recording), and a request that
// cannot reach the database gets HTTP 503, which clients retry with back-off.
package scheduler
