package store

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/state"
)

// FileDeleteListParams selects rows whose files are ready for deletion.
type FileDeleteListParams struct {
	// AfterID is the caller's cursor: only rows with a larger id are
	// returned, so that a pass does not read again the rows earlier passes
	// handled (MariaDB scans the primary key when most rows are READY).
	AfterID int64
	// Mod and ModIndex pick this replica's rows: Partition(id, Mod) = ModIndex.
	Mod, ModIndex int
	// Limit bounds the rows returned.
	Limit int
}

// FileDeleteRow is a row whose files may be deleted: all the file deleter
// reads of a workunit or a result.
type FileDeleteRow struct {
	ID int64 `db:"id"`
	// XMLDoc lists the files: workunit.xml_doc (inputs) or
	// result.xml_doc_in (outputs).
	XMLDoc string `db:"xml_doc"`
	// ReportDeadline is a result's report deadline (Unix seconds; 0 if
	// never sent, and for workunits): its upload certificates are good
	// until then plus the scheduler's upload grace.
	ReportDeadline int64 `db:"report_deadline"`
}

// Either plan reads rows in id order from the cursor and stops at the
// limit: wu_file_delete / res_file_delete (file_delete_state, and the
// primary key InnoDB appends) when few rows are READY, the primary key when
// most are. Only the XML column (and a result's deadline) is fetched from
// the row.
var (
	workunitListFileDeleteReady = `SELECT id, COALESCE(xml_doc, '') AS xml_doc FROM workunit
WHERE file_delete_state = ? AND id > ? AND ` + partitionFilter("id") + ` ORDER BY id LIMIT ?`
	resultListFileDeleteReady = `SELECT id, COALESCE(xml_doc_in, '') AS xml_doc, report_deadline FROM result
WHERE file_delete_state = ? AND id > ? AND ` + partitionFilter("id") + ` ORDER BY id LIMIT ?`
)

// WorkunitListFileDeleteReady returns jobs whose input files may be deleted
// (file_delete_state = READY) with id > p.AfterID, by id, with their
// xml_doc.
func (s *Store) WorkunitListFileDeleteReady(ctx context.Context, p FileDeleteListParams) ([]FileDeleteRow, error) {
	out, err := s.fileDeleteList(ctx, workunitListFileDeleteReady, p)
	if err != nil {
		return nil, fmt.Errorf("list workunits ready for file deletion: %w", err)
	}
	return out, nil
}

// ResultListFileDeleteReady returns instances whose output files may be
// deleted (file_delete_state = READY) with id > p.AfterID, by id, with their
// xml_doc_in.
func (s *Store) ResultListFileDeleteReady(ctx context.Context, p FileDeleteListParams) ([]FileDeleteRow, error) {
	out, err := s.fileDeleteList(ctx, resultListFileDeleteReady, p)
	if err != nil {
		return nil, fmt.Errorf("list results ready for file deletion: %w", err)
	}
	return out, nil
}

func (s *Store) fileDeleteList(ctx context.Context, query string, p FileDeleteListParams) ([]FileDeleteRow, error) {
	var out []FileDeleteRow
	err := s.withRetry(ctx, func() error {
		out = out[:0]
		return s.db.SelectContext(ctx, &out, query,
			int(state.FileDeleteReady), p.AfterID, max(p.Mod, 1), p.ModIndex, p.Limit)
	})
	return out, err
}

// FileDeleteFinishParams moves a batch of rows out of READY.
type FileDeleteFinishParams struct {
	// IDs are the rows whose files were handled.
	IDs []int64
	// To is the new state: DONE or ERROR.
	To state.FileDeleteState
	// Now is the time written to mod_time (Unix seconds).
	Now int64
}

// The condition on file_delete_state is checked per row: a row another
// replica or an operator moved on meanwhile is left as it is and not
// counted, and does not stop the others.
const (
	workunitFileDeleteFinish = `UPDATE workunit SET file_delete_state = ?, mod_time = ?
WHERE id IN (?) AND file_delete_state = ?`
	resultFileDeleteFinish = `UPDATE result SET file_delete_state = ?, mod_time = ?
WHERE id IN (?) AND file_delete_state = ?`
)

// WorkunitFileDeleteFinish moves the jobs p.IDs that are still READY to p.To
// at p.Now in one statement, and returns how many it moved. A job that is
// no longer READY is skipped: a conflict, not an error.
func (s *Store) WorkunitFileDeleteFinish(ctx context.Context, p FileDeleteFinishParams) (int64, error) {
	n, err := s.fileDeleteFinish(ctx, workunitFileDeleteFinish, p)
	if err != nil {
		return 0, fmt.Errorf("set file_delete_state of %d workunits to %v: %w", len(p.IDs), p.To, err)
	}
	return n, nil
}

// ResultFileDeleteFinish moves the instances p.IDs that are still READY to
// p.To at p.Now in one statement, and returns how many it moved. An
// instance that is no longer READY is skipped: a conflict, not an error.
func (s *Store) ResultFileDeleteFinish(ctx context.Context, p FileDeleteFinishParams) (int64, error) {
	n, err := s.fileDeleteFinish(ctx, resultFileDeleteFinish, p)
	if err != nil {
		return 0, fmt.Errorf("set file_delete_state of %d results to %v: %w", len(p.IDs), p.To, err)
	}
	return n, nil
}

func (s *Store) fileDeleteFinish(ctx context.Context, query string, p FileDeleteFinishParams) (int64, error) {
	if len(p.IDs) == 0 {
		return 0, nil
	}
	q, args, err := sqlx.In(query, int(p.To), p.Now, p.IDs, int(state.FileDeleteReady))
	if err != nil {
		return 0, err
	}
	return s.exec(ctx, q, args...)
}
