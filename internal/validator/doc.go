// Package validator is the daemon that checks the outputs of a job's
// instances (seed 003 §2.1, §3.1) and the framework a project plugs its own
// output comparison into.
//
// A Checker reads one instance's output files (Init) and says whether two
// outputs agree (Compare). An instance's output is a set of files, each by
// its logical name (open name): the checker gets those the job's output
// template does not mark no_validate, and an optional output is in the set
// only where there is a finished upload of it. Two instances whose sets
// differ disagree without the checker; a required output missing makes the
// instance a validate error. The built-ins are Bitwise (equal files, the
// default), Numeric (numbers within a tolerance), Trust (every output that
// is there) and Command (programs of the project's own); a project's own
// Checker comes through the public package validator at the module root,
// which adapts it to Program (see examples/validator).
//
// For a job without a canonical instance the validator looks for a quorum
// (Quorum): the largest group of at least min_quorum agreeing outputs is
// valid and its first member canonical; outputs that disagree are invalid;
// without such a group the outputs are inconclusive and the job asks for
// one more instance. Instances reported later are compared with the
// canonical one (TOO_LATE once its files are deleted), and the instances of
// a known-answer job with the known answer's expected output. An output
// whose file is missing or that the Checker rejects (ErrInvalidOutput) is a
// validate error. Any other failure leaves the job for a later pass.
//
// Reads: app (credit_policy, every 30 s); workunit (appid, need_validate = 1,
// id hashing to mod_index as store.Partition says, by id) ⋈ result
// (reported successes and the canonical instance), one stream of at most --batch rows per pass, the
// columns validation uses (every instance column for a project's own
// Checker); known_answer (output, cached); under the median credit policy,
// for each job given a canonical instance, the valid hosts' newest 20
// credited instances (result ⋈ workunit: granted_credit, rsc_fpops_est),
// their record that bounds their claims (see ClaimBound); the instances'
// output files in the upload directory, read by Config.Workers goroutines.
//
// Writes, in one transaction per pass, each job only if it still needs
// validation and each of its instances still awaits a verdict (checked
// under row locks; a job that fails is left out, the others written):
// workunit need_validate (to 0), canonical_resultid, canonical_credit,
// assimilate_state (to READY when a canonical instance is found),
// target_nresults (raised when outputs disagree), transition_time (the
// trigger) and mod_time; result validate_state, outcome (VALIDATE_ERROR) and
// granted_credit; user and host total_credit, expavg_credit and expavg_time,
// relatively, summed per user and host; host consecutive_valid and
// error_streak. One multi-row statement per table. Credit is granted only
// with its verdict, so a crash and a rerun cannot grant it twice. Should
// the pass's transaction fail, its jobs are written one transaction each,
// so a job the batch cannot take holds up only itself.
package validator
