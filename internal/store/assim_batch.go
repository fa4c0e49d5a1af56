package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// WorkunitListAssimilateParams selects jobs ready for assimilation.
type WorkunitListAssimilateParams struct {
	AppID int64
	// Mod and ModIndex select this replica's jobs: Partition(id, Mod) = ModIndex.
	Mod, ModIndex int
	// AfterID pages through the jobs: only ids above it are returned, so a
	// caller can step past jobs it chose to skip (0 starts at the first).
	AfterID int64
	Limit   int
}

// WorkunitCanonical is a job with its canonical instance, as the
// assimilator reads them together.
type WorkunitCanonical struct {
	Workunit row.Workunit
	// Canonical is the canonical instance; nil when the job has none
	// (canonical_resultid 0) or that row is gone.
	Canonical *row.Result
}

// workunitColumnsW is WorkunitColumns qualified by the alias w, for reads
// that join another table (the assimilator's: all of them, since a handler
// is the project's code and may look at any; db_purge's).
const workunitColumnsW = `w.id, w.create_time, w.appid, w.name, COALESCE(w.xml_doc, '') AS xml_doc, w.batch,
w.rsc_fpops_est, w.rsc_fpops_bound, w.rsc_memory_bound, w.rsc_disk_bound, w.need_validate,
w.canonical_resultid, w.canonical_credit, w.transition_time, w.delay_bound, w.error_mask,
w.file_delete_state, w.assimilate_state, w.hr_class, w.opaque, w.min_quorum, w.target_nresults,
w.max_error_results, w.max_total_results, w.max_success_results, w.priority, w.mod_time,
w.hold_reason, w.hold_time, w.fixed_credit, w.replication_quorum, w.known_answer_id, w.tail_copies, w.output_template_id`

// assimResultColumns are the Result columns of the LEFT JOINed canonical
// instance r, named "r.<column>" for the nested struct, NULLs read as zero
// values (r.id 0: no row).
const assimResultColumns = "COALESCE(r.id, 0) AS `r.id`, COALESCE(r.create_time, 0) AS `r.create_time`, " +
	"COALESCE(r.workunitid, 0) AS `r.workunitid`, COALESCE(r.server_state, 0) AS `r.server_state`, " +
	"COALESCE(r.outcome, 0) AS `r.outcome`, COALESCE(r.client_state, 0) AS `r.client_state`, " +
	"COALESCE(r.hostid, 0) AS `r.hostid`, COALESCE(r.userid, 0) AS `r.userid`, " +
	"COALESCE(r.report_deadline, 0) AS `r.report_deadline`, COALESCE(r.sent_time, 0) AS `r.sent_time`, " +
	"COALESCE(r.received_time, 0) AS `r.received_time`, COALESCE(r.name, '') AS `r.name`, " +
	"COALESCE(r.cpu_time, 0) AS `r.cpu_time`, COALESCE(r.xml_doc_in, '') AS `r.xml_doc_in`, " +
	"COALESCE(r.xml_doc_out, '') AS `r.xml_doc_out`, COALESCE(r.stderr_out, '') AS `r.stderr_out`, " +
	"COALESCE(r.batch, 0) AS `r.batch`, COALESCE(r.file_delete_state, 0) AS `r.file_delete_state`, " +
	"COALESCE(r.validate_state, 0) AS `r.validate_state`, COALESCE(r.claimed_credit, 0) AS `r.claimed_credit`, " +
	"COALESCE(r.granted_credit, 0) AS `r.granted_credit`, COALESCE(r.opaque, 0) AS `r.opaque`, " +
	"COALESCE(r.random, 0) AS `r.random`, COALESCE(r.app_version_num, 0) AS `r.app_version_num`, " +
	"COALESCE(r.appid, 0) AS `r.appid`, COALESCE(r.exit_status, 0) AS `r.exit_status`, " +
	"COALESCE(r.teamid, 0) AS `r.teamid`, COALESCE(r.priority, 0) AS `r.priority`, " +
	"COALESCE(r.mod_time, 0) AS `r.mod_time`, COALESCE(r.elapsed_time, 0) AS `r.elapsed_time`, " +
	"COALESCE(r.app_version_id, 0) AS `r.app_version_id`, COALESCE(r.send_flags, 0) AS `r.send_flags`"

// The index (appid, assimilate_state) holds the id too: the range is read
// in id order, without a sort, and the canonical row is a primary-key
// lookup.
var workunitListAssimilateCanonical = `SELECT ` + workunitColumnsW + `, ` + assimResultColumns + `
FROM workunit w LEFT JOIN result r ON r.id = w.canonical_resultid AND w.canonical_resultid <> 0
WHERE w.appid = ? AND w.assimilate_state = ? AND w.id > ? AND ` + partitionFilter("w.id") + `
ORDER BY w.id
LIMIT ?`

// assimRow is one row of the job ⋈ canonical instance stream.
type assimRow struct {
	row.Workunit
	R row.Result `db:"r"`
}

// WorkunitListAssimilateCanonical returns up to p.Limit of app p.AppID's
// jobs with assimilate_state READY and id above p.AfterID, by id, each with
// its canonical instance, read in one query instead of one more per job.
func (s *Store) WorkunitListAssimilateCanonical(ctx context.Context, p WorkunitListAssimilateParams) ([]WorkunitCanonical, error) {
	var rows []assimRow
	err := s.withRetry(ctx, func() error {
		rows = nil
		return s.db.SelectContext(ctx, &rows, workunitListAssimilateCanonical, p.AppID, state.AssimilateReady,
			p.AfterID, p.Mod, p.ModIndex, p.Limit)
	})
	if err != nil {
		return nil, fmt.Errorf("list workunits to assimilate: %w", err)
	}
	out := make([]WorkunitCanonical, len(rows))
	for i := range rows {
		out[i].Workunit = rows[i].Workunit
		if rows[i].R.ID != 0 {
			r := rows[i].R
			out[i].Canonical = &r
		}
	}
	return out, nil
}

const workunitLockAssimilated = `SELECT id FROM workunit WHERE id IN (?) AND assimilate_state = ? ORDER BY id FOR UPDATE`

const workunitMarkAssimilatedIn = `UPDATE workunit SET assimilate_state = ?,
transition_time = LEAST(transition_time - 1, ?), mod_time = ?
WHERE id IN (?) AND assimilate_state = ?`

// WorkunitMarkAssimilatedBatch records that jobs were handed to the project,
// in one transaction: each job still READY is marked DONE and its
// transitioner triggered (which then marks its files for deletion), and it
// is returned; a job that is not READY any more (someone
// else marked it) is left alone and not returned, without failing the
// others. The READY rows are locked first so that the ids returned are
// exactly the rows written.
func (s *Store) WorkunitMarkAssimilatedBatch(ctx context.Context, ids []int64, now int64) ([]int64, error) {
	var done []int64
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		done = nil
		for c := range slices.Chunk(ids, validateChunk) {
			q, args, err := sqlx.In(workunitLockAssimilated, c, state.AssimilateReady)
			if err != nil {
				return err
			}
			var ready []int64
			if err := tx.SelectContext(ctx, &ready, q, args...); err != nil {
				return err
			}
			if len(ready) == 0 {
				continue
			}
			q, args, err = sqlx.In(workunitMarkAssimilatedIn, state.AssimilateDone, now, now, ready, state.AssimilateReady)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return err
			}
			done = append(done, ready...)
		}
		return addThroughput(ctx, tx, ThroughputAssimilated, now, len(done))
	})
	if err != nil {
		return nil, fmt.Errorf("mark %d workunits assimilated: %w", len(ids), err)
	}
	return done, nil
}
