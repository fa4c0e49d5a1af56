// Package validator is the daemon that checks the outputs of a job's
// instances against each other (seed 003 §2.1, §3.1): it finds a quorum of
// bitwise-equal outputs and picks the canonical instance, compares instances
// reported later with the canonical one, and grants credit for valid
// instances.
//
// Reads: workunit (appid, need_validate = 1, id % mod = mod_index) ⋈ result;
// the instances' output files in the upload directory.
//
// Writes, in one transaction per job, the job row first: workunit
// need_validate (to 0), canonical_resultid, canonical_credit,
// assimilate_state (to READY when a canonical instance is found),
// target_nresults (raised when outputs disagree), transition_time (the
// trigger) and mod_time; result validate_state, outcome (VALIDATE_ERROR when
// the output cannot be read) and granted_credit; user.total_credit and
// host.total_credit, added relatively.
package validator
