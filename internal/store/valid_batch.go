package store

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/state"
)

// WorkunitValidateBatchParams is the validation of many jobs, written
// together.
type WorkunitValidateBatchParams struct {
	// Now is the current time of every job's write (the trigger, mod_time,
	// expavg_time); the jobs' own Now is not used.
	Now int64
	// Jobs are the jobs' validations, each as WorkunitValidate takes it; a
	// job appears once.
	Jobs []WorkunitValidateParams
	// DailyResultQuota is as WorkunitValidateParams's, for every job.
	DailyResultQuota int
}

// validateChunk bounds the rows one multi-row statement names, which keeps
// each statement's text to some tens of kilobytes.
const validateChunk = 1000

const workunitLockValidate = `SELECT id, canonical_resultid FROM workunit
WHERE id IN (?) AND need_validate = 1 AND error_mask = 0 ORDER BY id FOR UPDATE`

const resultLockValidate = `SELECT id FROM result WHERE id IN (?) AND validate_state IN (?) ORDER BY id FOR UPDATE`

// WorkunitValidateBatch writes the validation of many jobs in one
// transaction, with the guarantees WorkunitValidate gives each job: a job
// is written only if it still needs validation, has not failed meanwhile,
// has no canonical instance yet when this one sets it, and every instance
// it judges still awaits a verdict; credit is granted only with the verdict
// it belongs to. Those conditions are checked per job under row locks (the
// jobs, then the instances, each in id order), a job that fails them is
// left out and returned among conflicts, and the others are written with
// one multi-row statement per table: the jobs, the instances, the users'
// credit, the hosts' credit and reliability counts, and the credit of the
// users' teams (relative updates, summed per user, host and team over the
// batch, rows in id order). A rerun after
// a crash finds the written jobs no longer needing validation.
func (s *Store) WorkunitValidateBatch(ctx context.Context, p WorkunitValidateBatchParams) (conflicts []int64, err error) {
	if len(p.Jobs) == 0 {
		return nil, nil
	}
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		var ok []WorkunitValidateParams
		var err error
		ok, conflicts, err = lockValidate(ctx, tx, p.Jobs)
		if err != nil || len(ok) == 0 {
			return err
		}
		return writeValidate(ctx, tx, p.Now, p.DailyResultQuota, ok)
	})
	if err != nil {
		return nil, fmt.Errorf("validate %d workunits: %w", len(p.Jobs), err)
	}
	return conflicts, nil
}

// lockValidate locks the jobs and instances that can be written and
// returns the jobs whose conditions hold, and the ids of the others.
func lockValidate(ctx context.Context, tx *sqlx.Tx, jobs []WorkunitValidateParams) (ok []WorkunitValidateParams, conflicts []int64, err error) {
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	canonical := map[int64]int64{}
	for c := range slices.Chunk(ids, validateChunk) {
		q, args, err := sqlx.In(workunitLockValidate, c)
		if err != nil {
			return nil, nil, err
		}
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, nil, fmt.Errorf("lock workunits: %w", err)
		}
		for rows.Next() {
			var id, canon int64
			if err := rows.Scan(&id, &canon); err != nil {
				rows.Close()
				return nil, nil, fmt.Errorf("lock workunits: %w", err)
			}
			canonical[id] = canon
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, nil, fmt.Errorf("lock workunits: %w", err)
		}
	}
	var results []int64
	for _, j := range jobs {
		canon, found := canonical[j.ID]
		if !found || (j.CanonicalResultID != 0 && canon != 0) {
			conflicts = append(conflicts, j.ID)
			continue
		}
		ok = append(ok, j)
		for _, r := range j.Results {
			results = append(results, r.ID)
		}
	}
	waiting := map[int64]bool{}
	for c := range slices.Chunk(results, validateChunk) {
		q, args, err := sqlx.In(resultLockValidate, c,
			[]state.ValidateState{state.ValidateInit, state.ValidateInconclusive})
		if err != nil {
			return nil, nil, err
		}
		var got []int64
		if err := tx.SelectContext(ctx, &got, q, args...); err != nil {
			return nil, nil, fmt.Errorf("lock results: %w", err)
		}
		for _, id := range got {
			waiting[id] = true
		}
	}
	kept := ok[:0]
	for _, j := range ok {
		all := true
		for _, r := range j.Results {
			all = all && waiting[r.ID]
		}
		if all {
			kept = append(kept, j)
		} else {
			conflicts = append(conflicts, j.ID)
		}
	}
	return kept, conflicts, nil
}

// writeValidate writes the jobs lockValidate kept.
func writeValidate(ctx context.Context, tx *sqlx.Tx, now int64, quota int, jobs []WorkunitValidateParams) error {
	for c := range slices.Chunk(jobs, validateChunk) {
		if err := updateWorkunitsValidated(ctx, tx, now, c); err != nil {
			return err
		}
	}
	var results []ResultValidation
	for _, j := range jobs {
		results = append(results, j.Results...)
	}
	for c := range slices.Chunk(results, validateChunk) {
		if err := updateResultsValidated(ctx, tx, now, c); err != nil {
			return err
		}
	}
	if err := addThroughput(ctx, tx, ThroughputValidated, now, countVerdicts(results)); err != nil {
		return err
	}
	users, hosts := creditTotals(results)
	for c := range slices.Chunk(users, validateChunk) {
		if err := updateCredit(ctx, tx, "user", now, c); err != nil {
			return err
		}
	}
	for c := range slices.Chunk(hosts, validateChunk) {
		if err := updateCredit(ctx, tx, "host", now, c); err != nil {
			return err
		}
	}
	if err := creditTeams(ctx, tx, now, users); err != nil {
		return err
	}
	for c := range slices.Chunk(results, validateChunk) {
		if err := validateHostAppVersions(ctx, tx, quota, c); err != nil {
			return err
		}
	}
	return nil
}

// workunitValidatedUpdate writes the jobs' rows. A job without a canonical
// instance keeps its canonical columns and assimilate_state; target 0
// leaves target_nresults.
var workunitValidatedUpdate = rowsUpdate{query: `UPDATE workunit w SET w.need_validate = 0,
w.canonical_resultid = IF({canon} = 0, w.canonical_resultid, {canon}),
w.canonical_credit = IF({canon} = 0, w.canonical_credit, {credit}),
w.assimilate_state = IF({canon} = 0, w.assimilate_state, GREATEST(w.assimilate_state, ` + assimilateReady + `)),
w.target_nresults = GREATEST(w.target_nresults, LEAST({target}, w.max_total_results)),
w.transition_time = LEAST(w.transition_time - 1, {now}), w.mod_time = {now}
WHERE {keys} AND w.need_validate = 1`, key: []string{"w.id"}, cols: []string{"id", "canon", "credit", "target", "now"}}

// updateWorkunitsValidated writes the jobs' rows in one statement.
func updateWorkunitsValidated(ctx context.Context, tx *sqlx.Tx, now int64, jobs []WorkunitValidateParams) error {
	rows := make([][]any, len(jobs))
	for i, j := range jobs {
		rows[i] = []any{j.ID, j.CanonicalResultID, j.CanonicalCredit, j.TargetNResults, now}
	}
	q, args := workunitValidatedUpdate.expand(rows)
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("update workunits: %w", err)
	}
	return nil
}

// resultValidatedUpdate writes the instances' verdicts and credit.
var resultValidatedUpdate = rowsUpdate{query: `UPDATE result r
SET r.validate_state = {vs}, r.outcome = {outcome}, r.granted_credit = {credit}, r.mod_time = {now}
WHERE {keys} AND r.validate_state IN (` + validateInit + `, ` + validateInconclusive + `)`,
	key: []string{"r.id"}, cols: []string{"id", "vs", "outcome", "credit", "now"}}

// updateResultsValidated writes the instances' rows in one statement.
func updateResultsValidated(ctx context.Context, tx *sqlx.Tx, now int64, results []ResultValidation) error {
	rows := make([][]any, len(results))
	for i, r := range results {
		rows[i] = []any{r.ID, r.ValidateState, r.Outcome, r.GrantedCredit, now}
	}
	q, args := resultValidatedUpdate.expand(rows)
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("update results: %w", err)
	}
	return nil
}

// creditChange is what a batch does to one user or host.
type creditChange struct {
	id     int64
	credit float64
	// rel is nil for a user, and for a host without a verdict that counts.
	rel *reliability
}

// creditTotals sums the batch's credit per user and per host and folds
// each host's verdicts, in the order given, into its reliability change.
// Both come back in id order, the order rows are locked in everywhere.
func creditTotals(results []ResultValidation) (users, hosts []creditChange) {
	userCredit := map[int64]float64{}
	host := map[int64]*creditChange{}
	for _, r := range results {
		if r.GrantedCredit != 0 && r.UserID != 0 {
			userCredit[r.UserID] += r.GrantedCredit
		}
		if r.HostID == 0 {
			continue
		}
		h := host[r.HostID]
		if h == nil {
			h = &creditChange{id: r.HostID}
		}
		h.credit += r.GrantedCredit
		rel := h.rel
		if rel == nil {
			rel = &reliability{}
		}
		if rel.apply(r.ValidateState) {
			h.rel = rel
		}
		if h.credit != 0 || h.rel != nil {
			host[r.HostID] = h
		}
	}
	for _, id := range sortedKeys(userCredit) {
		users = append(users, creditChange{id: id, credit: userCredit[id]})
	}
	for _, id := range sortedKeys(host) {
		hosts = append(hosts, *host[id])
	}
	return users, hosts
}

// updateCredit applies credit changes to the rows of table (user, host or
// team) in one statement. It is a single-table UPDATE, whose assignments
// MySQL makes left to right: expavg_credit decays by the expavg_time it
// read before that is moved, as in userAddCredit. Each row's values are
// chosen by CASE on its id; a row without credit keeps its credit columns,
// one without a reliability change (every user and team) its counts.
func updateCredit(ctx context.Context, tx *sqlx.Tx, table string, now int64, rows []creditChange) error {
	var credited, all []int64
	var total, gain, valid, streak strings.Builder
	var totalArgs, gainArgs, validArgs, streakArgs []any
	for _, c := range rows {
		all = append(all, c.id)
		if c.credit != 0 {
			credited = append(credited, c.id)
			total.WriteString(" WHEN ? THEN ? + 0e0")
			totalArgs = append(totalArgs, c.id, c.credit)
			gain.WriteString(" WHEN ? THEN ? + 0e0")
			gainArgs = append(gainArgs, c.id, c.credit*expavgGain)
		}
		if r := c.rel; r != nil {
			if r.resetValid {
				valid.WriteString(" WHEN ? THEN ?")
			} else {
				valid.WriteString(" WHEN ? THEN consecutive_valid + ?")
			}
			validArgs = append(validArgs, c.id, r.addValid)
			if r.resetStreak {
				streak.WriteString(" WHEN ? THEN ?")
			} else {
				streak.WriteString(" WHEN ? THEN error_streak + ?")
			}
			streakArgs = append(streakArgs, c.id, r.addStreak)
		}
	}
	var sets []string
	var args []any
	if len(credited) > 0 {
		in := validPlaceholders(len(credited))
		sets = append(sets,
			"total_credit = total_credit + CASE id"+total.String()+" ELSE 0 END",
			"expavg_credit = expavg_credit * IF(id IN ("+in+"), EXP(-GREATEST(? - expavg_time, 0) * ?), 1) + CASE id"+
				gain.String()+" ELSE 0 END",
			"expavg_time = IF(id IN ("+in+"), GREATEST(expavg_time, ?), expavg_time)")
		args = append(args, totalArgs...)
		args = append(args, validIDArgs(credited)...)
		args = append(args, now, expavgDecay)
		args = append(args, gainArgs...)
		args = append(args, validIDArgs(credited)...)
		args = append(args, now)
	}
	if len(validArgs) > 0 {
		sets = append(sets,
			"consecutive_valid = CASE id"+valid.String()+" ELSE consecutive_valid END",
			"error_streak = CASE id"+streak.String()+" ELSE error_streak END")
		args = append(args, validArgs...)
		args = append(args, streakArgs...)
	}
	if len(sets) == 0 {
		return nil
	}
	q := "UPDATE " + table + " SET " + strings.Join(sets, ", ") + " WHERE id IN (" + validPlaceholders(len(all)) + ")"
	args = append(args, validIDArgs(all)...)
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("credit %ss: %w", table, err)
	}
	return nil
}

// validPlaceholders returns n comma-separated question marks.
func validPlaceholders(n int) string {
	if n == 0 {
		return ""
	}
	return strings.Repeat("?, ", n-1) + "?"
}

// validIDArgs returns ids as statement arguments.
func validIDArgs(ids []int64) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

// countVerdicts is how many of results were judged valid or invalid: the
// status page's "results validated".
func countVerdicts(results []ResultValidation) int {
	n := 0
	for _, r := range results {
		if r.ValidateState == state.ValidateValid || r.ValidateState == state.ValidateInvalid {
			n++
		}
	}
	return n
}
