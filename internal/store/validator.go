package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/state"
)

// WorkunitListNeedValidateParams selects jobs awaiting validation.
type WorkunitListNeedValidateParams struct {
	AppID int64
	// Mod and ModIndex select this replica's jobs: id % Mod = ModIndex.
	Mod, ModIndex int
	// Limit bounds the rows (job ⋈ instance) read.
	Limit int
}

var workunitListNeedValidate = `SELECT ` + workunitJoinColumns + `, ` + resultJoinColumns + `
FROM workunit w JOIN result r ON r.workunitid = w.id
WHERE w.appid = ? AND w.need_validate = 1 AND w.id % ? = ?
ORDER BY w.id, r.id
LIMIT ?`

// WorkunitListNeedValidate returns app p.AppID's jobs with need_validate set,
// with all their instances, read as one job ⋈ instance stream.
func (s *Store) WorkunitListNeedValidate(ctx context.Context, p WorkunitListNeedValidateParams) ([]WorkunitResults, error) {
	return s.listWorkunitResults(ctx, "workunits to validate", workunitListNeedValidate, p.Limit,
		p.AppID, p.Mod, p.ModIndex, p.Limit)
}

// ResultValidation is the validator's verdict on one instance.
type ResultValidation struct {
	ID int64
	// UserID and HostID receive GrantedCredit.
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
	// Now is the current time: the trigger and mod_time.
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
	// validation (validate_state INIT or INCONCLUSIVE).
	Results []ResultValidation
}

const workunitValidateCanonical = `UPDATE workunit SET need_validate = 0, canonical_resultid = ?, canonical_credit = ?,
assimilate_state = GREATEST(assimilate_state, ?), transition_time = LEAST(transition_time - 1, ?), mod_time = ?
WHERE id = ? AND need_validate = 1 AND canonical_resultid = 0`

const workunitValidate = `UPDATE workunit SET need_validate = 0,
target_nresults = GREATEST(target_nresults, LEAST(?, max_total_results)),
transition_time = LEAST(transition_time - 1, ?), mod_time = ?
WHERE id = ? AND need_validate = 1`

const resultValidate = `UPDATE result SET validate_state = ?, outcome = ?, granted_credit = ?, mod_time = ?
WHERE id = ? AND validate_state IN (?, ?)`

const userAddCredit = `UPDATE user SET total_credit = total_credit + ? WHERE id = ?`

const hostAddCredit = `UPDATE host SET total_credit = total_credit + ? WHERE id = ?`

// WorkunitValidate writes one job's validation in one short transaction:
// the job row first (clearing need_validate, which guards against a second
// validator, and triggering the transitioner), then each instance's verdict,
// then credit, added relatively. Credit is granted only together with the
// verdict it belongs to, so a rerun after a crash cannot grant it twice. If
// the job no longer needs validation or an instance was judged meanwhile,
// nothing is written and ErrConflict is returned.
func (s *Store) WorkunitValidate(ctx context.Context, p WorkunitValidateParams) error {
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
		for _, r := range p.Results {
			if r.GrantedCredit == 0 {
				continue
			}
			if _, err := tx.ExecContext(ctx, userAddCredit, r.GrantedCredit, r.UserID); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, hostAddCredit, r.GrantedCredit, r.HostID); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, ErrConflict) {
		return ErrConflict
	}
	if err != nil {
		return fmt.Errorf("validate workunit %d: %w", p.ID, err)
	}
	return nil
}
