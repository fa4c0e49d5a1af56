// Package scheduler answers the BOINC scheduler RPC: a volunteer host posts a
// <scheduler_request> and gets a <scheduler_reply> (PROTOCOL.md §3, §4, §9).
//
// For each request it authenticates the account key, creates or updates the
// host row, records the results the host reports, tells the host to abort
// listed tasks the project no longer needs (result_abort, or
// result_abort_if_not_started when only the job is done), resends results
// the host should have but no longer lists, and sends new work claimed from the
// feeder's shared-memory cache, subject to the host's platform, memory, disk,
// deadline feasibility (a fair-share queue prediction) and in-progress limit.
//
// Reads: user (by authenticator), host, result and workunit rows of the
// requesting host, the result rows (joined to their workunit) the host lists
// in <other_results>, the shared-memory cache (slots and static tables).
// Writes, each state change in its own short transaction:
//   - host: a new row, or the host_info columns, rpc_seqno and rpc_time;
//   - result: UNSENT → IN_PROGRESS on send (hostid, userid, sent_time,
//     report_deadline, app_version_id, app_version_num), conditional on
//     UNSENT; IN_PROGRESS → OVER on report (outcome, client_state,
//     exit_status, cpu_time, elapsed_time, received_time, stderr_out,
//     xml_doc_out, validate_state), conditional on IN_PROGRESS and hostid;
//   - workunit.transition_time: moved to now on report, and no later than
//     the deadline on send, so the transitioner looks at the job again;
//   - workunit_user: one row per (job, user) sent, whose primary key keeps
//     two instances of one job from ever reaching one user.
//
// Nothing a client reports is dropped: a result is acknowledged only once
// its report is recorded (or it needs no recording), and a request that
// cannot reach the database gets HTTP 503, which clients retry with back-off.
package scheduler
