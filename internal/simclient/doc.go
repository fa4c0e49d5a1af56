// Package simclient simulates many volunteer hosts, each attached to one or
// more projects, speaking the BOINC client's side of the protocol over
// HTTP: scheduler RPCs (register, fetch work, report results), input
// downloads and output uploads. The end-to-end tests and benchmarks drive
// the task server with it; its run report measures the client policies
// against live schedulers.
//
// Every host is a clientpolicy.Host run as an event loop on the wall clock
// (seconds since the run began): it sleeps until a running task finishes,
// the scheduling period ends, an RPC falls due, the host switches on or
// off, or a download or upload reports back; then it brings its tasks' CPU
// time up to date, reschedules the CPUs, and contacts the project the
// policy chooses. The policies are those of the seeds: work fetch by
// connection period and min_results with the project chosen by long-term
// debt (000, 001), CPU scheduling by debt, EDF or the seed-004 strategies
// with preemption at the scheduling period (a task progresses only while
// it holds a CPU), and RPC timing by request_delay, next_rpc_delay,
// randomised exponential back-off and report-result sessions (002). Per
// project a host keeps its own host id, rpc_seqno, cross-project id, app
// versions and duration correction factor (how long tasks really take
// against rsc_fpops_est / p_fpops, learnt from completed tasks).
//
// A task joins the CPU scheduler once its inputs are downloaded; when its
// computation ends its CPU is free for the next task, and once its output
// is uploaded it is reported, in every RPC to its project until
// acknowledged. While a project's downloads
// are under way the host does not ask it for more work. All client delays
// are multiplied by Options.BackoffScale so tests can run the real policy
// in milliseconds; the connection and scheduling periods default to a few
// task lengths for the same reason.
//
// Hosts come in kinds: normal hosts compute the demo app's correct output;
// failing hosts report every task as a compute error; vanishing hosts take
// work and never contact the server again; cheating hosts upload an output
// of the right format with a wrong digest, different on every cheating host;
// late hosts go offline with their work and upload and report it only after
// its report deadline. A host's domain name says its kind
// (simhost<index>.<kind>), so tests can tell from the host table who cheated.
// Nothing is written to disk: the "computation" is the demo app's (demoapp.Out
// and demoapp.Log of every input, in the workunit's order, with --rounds from
// the command line) plus simulated CPU time. A host downloads every input
// (a gzip'd one from its gzipped_url, gunzipped and checked), keeps sticky
// inputs per project between tasks (downloaded once, listed as held in every
// request, so the scheduler may leave them out of a reply; forgotten on
// <delete_file_info>), and uploads every output: "log" gets the log, any other
// output the "out".
//
// Reads: the projects' scheduler, download and upload URLs. Writes: nothing
// but the JSON statistics report, the log of acknowledged results
// (Options.AckLog) and the run report directory (Options.ReportDir), when
// the command asks for them.
package simclient
