package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

const knownAnswerGet = `SELECT id, create_time, appid, name, output FROM known_answer WHERE id = ?`

// KnownAnswerGet returns known answer id with its expected output but
// without its input (which only job creation needs), or ErrNotFound.
func (s *Store) KnownAnswerGet(ctx context.Context, id int64) (row.KnownAnswer, error) {
	var k row.KnownAnswer
	err := s.db.GetContext(ctx, &k, knownAnswerGet, id)
	if errors.Is(err, sql.ErrNoRows) {
		return k, fmt.Errorf("known answer %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return k, fmt.Errorf("get known answer %d: %w", id, err)
	}
	return k, nil
}

// ExpavgHalfLife is the half-life of user and host expavg_credit, in
// seconds: one week, as in BOINC.
const ExpavgHalfLife = 7 * 86400

// expavgDecay is the decay rate of expavg_credit per second.
const expavgDecay = math.Ln2 / ExpavgHalfLife

// expavgGain turns credit granted now into its share of the average, which
// is in credit per day: a steady rate of c credits a day converges to c.
const expavgGain = expavgDecay * 86400

// ExpavgCredit returns the recent average credit (credit per day) of a user
// or host whose average was avg at avgTime (Unix seconds; 0 = never) after
// credit is granted at now: the old average decays with a half-life of
// ExpavgHalfLife and the new credit joins it. WorkunitValidate computes the
// same in SQL, relative to the stored values.
func ExpavgCredit(avg, avgTime, credit float64, now int64) float64 {
	elapsed := max(float64(now)-avgTime, 0)
	return avg*math.Exp(-elapsed*expavgDecay) + credit*expavgGain
}

// ResultValidation is the validator's verdict on one instance.
type ResultValidation struct {
	ID int64
	// UserID and HostID receive GrantedCredit; HostID's reliability counts
	// follow the verdict (VALID raises consecutive_valid and clears
	// error_streak; INVALID, validate errors included, does the opposite).
	UserID, HostID int64
	ValidateState  state.ValidateState
	// Outcome is SUCCESS, or VALIDATE_ERROR when the output could not be
	// read.
	Outcome       state.Outcome
	GrantedCredit float64
}

// WorkunitValidateParams is one job's validation.
type WorkunitValidateParams struct {
	ID int64
	// Now is the current time: the trigger, mod_time and expavg_time.
	Now int64
	// CanonicalResultID is the canonical instance this validation found, 0
	// if it found none (or the job had one already). Finding one also asks
	// for assimilation.
	CanonicalResultID int64
	CanonicalCredit   float64
	// TargetNResults raises target_nresults to at least this many (never
	// past max_total_results) so the transitioner makes more instances; 0
	// leaves it.
	TargetNResults int
	// Results are written in order, each only if the instance still awaits
	// validation (validate_state INIT or INCONCLUSIVE). Their verdicts also
	// teach their hosts' host_app_version rows (package hostav).
	Results []ResultValidation
	// DailyResultQuota is the project's daily quota per instance (the
	// validator's --daily-result-quota): a valid result grows a host's
	// shrunk quota back up to it; 0, no quota.
	DailyResultQuota int
}

const workunitValidateCanonical = `UPDATE workunit SET need_validate = 0, canonical_resultid = ?, canonical_credit = ?,
assimilate_state = GREATEST(assimilate_state, ?), transition_time = LEAST(transition_time - 1, ?), mod_time = ?
WHERE id = ? AND need_validate = 1 AND canonical_resultid = 0 AND error_mask = 0`

const workunitValidate = `UPDATE workunit SET need_validate = 0,
target_nresults = GREATEST(target_nresults, LEAST(?, max_total_results)),
transition_time = LEAST(transition_time - 1, ?), mod_time = ?
WHERE id = ? AND need_validate = 1 AND error_mask = 0`

const resultValidate = `UPDATE result SET validate_state = ?, outcome = ?, granted_credit = ?, mod_time = ?
WHERE id = ? AND validate_state IN (?, ?)`

// The credit updates are relative so that concurrent validators granting
// to one user cannot lose each other's credit. MySQL assigns left to right,
// so expavg_credit decays by the expavg_time it read before that is moved;
// GREATEST keeps a validator whose clock lags from pushing it back.
const userAddCredit = `UPDATE user SET total_credit = total_credit + ?,
expavg_credit = expavg_credit * EXP(-GREATEST(? - expavg_time, 0) * ?) + ?,
expavg_time = GREATEST(expavg_time, ?)
WHERE id = ?`

const hostAddCredit = `UPDATE host SET total_credit = total_credit + ?,
expavg_credit = expavg_credit * EXP(-GREATEST(? - expavg_time, 0) * ?) + ?,
expavg_time = GREATEST(expavg_time, ?)
WHERE id = ?`

// hostReliability applies a run of verdicts to a host's counts: each count
// is optionally reset, then raised.
const hostReliability = `UPDATE host SET consecutive_valid = IF(?, 0, consecutive_valid) + ?,
error_streak = IF(?, 0, error_streak) + ?
WHERE id = ?`

// reliability is the combined effect of a host's verdicts in one job, in
// their order: VALID adds one to consecutive_valid and zeroes error_streak;
// INVALID zeroes consecutive_valid and adds one to error_streak.
type reliability struct {
	resetValid  bool
	addValid    int
	resetStreak bool
	addStreak   int
}

func (r *reliability) apply(vs state.ValidateState) bool {
	switch vs {
	case state.ValidateValid:
		r.addValid++
		r.resetStreak, r.addStreak = true, 0
	case state.ValidateInvalid:
		r.resetValid, r.addValid = true, 0
		r.addStreak++
	default:
		return false
	}
	return true
}

// WorkunitValidate writes one job's validation in one short transaction:
// the job row first (clearing need_validate, which guards against a second
// validator, and triggering the transitioner), then each instance's verdict,
// then each user's and host's credit (total and recent average) and each
// host's reliability counts, then the credit of the users' teams, each
// table in id order so that concurrent validators lock rows in the same
// order (workunit, result, user, host, team, host_app_version). Credit is granted only together with the verdict
// it belongs to, so a rerun after a crash cannot grant it twice. If the job
// no longer needs validation, has failed meanwhile (a cancel: its error bit
// and a verdict exclude each other, whichever commits first wins), or an
// instance was judged meanwhile, nothing is written and ErrConflict is
// returned.
func (s *Store) WorkunitValidate(ctx context.Context, p WorkunitValidateParams) error {
	userCredit := map[int64]float64{}
	hostCredit := map[int64]float64{}
	hostRel := map[int64]*reliability{}
	hosts := map[int64]bool{}
	for _, r := range p.Results {
		if r.GrantedCredit != 0 && r.UserID != 0 {
			userCredit[r.UserID] += r.GrantedCredit
		}
		if r.HostID == 0 {
			continue
		}
		if r.GrantedCredit != 0 {
			hostCredit[r.HostID] += r.GrantedCredit
			hosts[r.HostID] = true
		}
		rel := hostRel[r.HostID]
		if rel == nil {
			rel = &reliability{}
		}
		if rel.apply(r.ValidateState) {
			hostRel[r.HostID] = rel
			hosts[r.HostID] = true
		}
	}
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var err error
		if p.CanonicalResultID != 0 {
			err = execChanged(ctx, tx, ErrConflict, workunitValidateCanonical, p.CanonicalResultID, p.CanonicalCredit,
				state.AssimilateReady, p.Now, p.Now, p.ID)
		} else {
			err = execChanged(ctx, tx, ErrConflict, workunitValidate, p.TargetNResults, p.Now, p.Now, p.ID)
		}
		if err != nil {
			return err
		}
		for _, r := range p.Results {
			if err := execChanged(ctx, tx, ErrConflict, resultValidate, r.ValidateState, r.Outcome, r.GrantedCredit, p.Now,
				r.ID, state.ValidateInit, state.ValidateInconclusive); err != nil {
				return err
			}
		}
		if err := addThroughput(ctx, tx, ThroughputValidated, p.Now, countVerdicts(p.Results)); err != nil {
			return err
		}
		for _, id := range sortedKeys(userCredit) {
			c := userCredit[id]
			if _, err := tx.ExecContext(ctx, userAddCredit, c, p.Now, expavgDecay, c*expavgGain, p.Now, id); err != nil {
				return fmt.Errorf("credit user %d: %w", id, err)
			}
		}
		// One host's statements run together, so its row is locked in id
		// order like the others.
		for _, id := range sortedKeys(hosts) {
			if c := hostCredit[id]; c != 0 {
				if _, err := tx.ExecContext(ctx, hostAddCredit, c, p.Now, expavgDecay, c*expavgGain, p.Now, id); err != nil {
					return fmt.Errorf("credit host %d: %w", id, err)
				}
			}
			if r := hostRel[id]; r != nil {
				if _, err := tx.ExecContext(ctx, hostReliability, r.resetValid, r.addValid, r.resetStreak, r.addStreak, id); err != nil {
					return fmt.Errorf("host %d reliability: %w", id, err)
				}
			}
		}
		credited := make([]creditChange, 0, len(userCredit))
		for _, id := range sortedKeys(userCredit) {
			credited = append(credited, creditChange{id: id, credit: userCredit[id]})
		}
		if err := creditTeams(ctx, tx, p.Now, credited); err != nil {
			return err
		}
		return validateHostAppVersions(ctx, tx, p.DailyResultQuota, p.Results)
	})
	if errors.Is(err, ErrConflict) {
		return ErrConflict
	}
	if err != nil {
		return fmt.Errorf("validate workunit %d: %w", p.ID, err)
	}
	return nil
}

// sortedKeys returns m's keys in ascending order.
func sortedKeys[V any](m map[int64]V) []int64 {
	keys := make([]int64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp.Compare)
	return keys
}
