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
// Hosts have hardware (Options.GPUFrac, MTFrac): multi-core hosts with
// MTCPUs CPUs and AVX2 in p_features, and GPU hosts with one or two
// NVIDIA or AMD cards of several models (RAM, driver, CUDA version and
// compute capability or CAL version, OpenCL), described in the request's
// <coprocs> element exactly as the 7.x client writes it. Each resource
// (the CPUs, each GPU kind) has its own clientpolicy.Host: its own queue,
// work buffer, scheduler and, per project, work-fetch back-off and
// <no_rsc_apps> flag, as the real client's per-resource work fetch
// (client/work_fetch.cpp). A request asks each resource for its own
// req_secs, req_instances and estimated_delay; a task runs where its app
// version's <coproc> and avg_ncpus say: on a GPU at peak FLOPS ×
// GPUEfficiency (taking avg_ncpus of a CPU, which the CPU tasks then do
// without), or on avg_ncpus CPUs. Reports carry elapsed and CPU times per
// version, so the server's per-host statistics can learn.
//
// The gaps the seeds leave: the active fraction is measured
// (clientpolicy.Activity) and reported in <time_stats>, not taken from
// the options; after a task crash or a failed transfer a project's RPCs
// back off exponentially (seed 002); a project may have several scheduler
// URLs, tried in turn from a random one within one RPC, and a master page
// (Project.MasterURL) read before the first RPC, after ten failed RPCs in
// a row and periodically; and a reply marked <overloaded/> (the scheduler
// is busy) is told apart from one without work: it neither backs the work
// fetch off nor stops the project's debt.
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
// Reads: the projects' master pages and scheduler, download and upload URLs. Writes: nothing
// but the JSON statistics report, the log of acknowledged results
// (Options.AckLog) and the run report directory (Options.ReportDir), when
// the command asks for them.
package simclient
