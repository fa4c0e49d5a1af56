// Package simclient simulates many volunteer hosts attached to one project,
// each speaking the BOINC client's side of the protocol over HTTP: scheduler
// RPCs (register, fetch work, report results), input downloads and output
// uploads. The end-to-end tests and benchmarks drive the task server with it.
//
// A host is one goroutine that decides when to contact the scheduler, plus
// one goroutine per task it is working on (at most --ncpus at a time). It
// follows the client policies of the seeds: it asks for work when a CPU slot
// is idle, enough to fill a small buffer; it reports a result until the
// server acknowledges it; it honours request_delay and next_rpc_delay; it
// backs off exponentially with random jitter after failed RPCs, after work
// requests that brought nothing, and after failed transfers. All client
// delays are multiplied by Options.BackoffScale so tests can run the real
// policy in milliseconds.
//
// Hosts come in kinds: normal hosts compute the demo app's correct output;
// failing hosts report every task as a compute error; vanishing hosts take
// work and never contact the server again; cheating hosts upload an output
// of the right format with a wrong digest, different on every cheating host;
// late hosts go offline with their work and upload and report it only after
// its report deadline. A host's domain name says its kind
// (simhost<index>.<kind>), so tests can tell from the host table who cheated.
// Nothing is written to disk: the "computation" is demoapp.Compute plus a
// simulated run time.
//
// Reads: the project's scheduler, download and upload URLs. Writes: nothing
// but the JSON statistics report and the log of acknowledged results
// (Options.AckLog), when the command asks for them.
package simclient
