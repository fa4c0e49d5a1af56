package store

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/state"
)

// The scale benchmark's probes: how much work is left for the daemon under
// measurement (index range counts, cheap next to the daemon's own work), the
// server's buffer-pool counters, and the plans of the hot queries.

// ScaleWork is one daemon's work, as ScaleLeftAt counts it.
type ScaleWork int

// The daemons' work.
const (
	// ScaleDueTransition: jobs with transition_time <= now.
	ScaleDueTransition ScaleWork = iota
	// ScaleNeedValidate: jobs of the apps with need_validate = 1.
	ScaleNeedValidate
	// ScaleNeedAssimilate: jobs of the apps with assimilate_state = READY.
	ScaleNeedAssimilate
	// ScaleFileDeleteReady: jobs and instances with file_delete_state =
	// READY.
	ScaleFileDeleteReady
	// ScalePurgeable: jobs whose files were deleted at or before the purge
	// cutoff.
	ScalePurgeable
	// ScaleUnsent: instances not sent yet, dispatch's backlog.
	ScaleUnsent
)

// scaleLeft is, per kind of work, its rows as one or two index ranges,
// each read up to a limit.
var scaleLeft = map[ScaleWork]string{
	ScaleDueTransition: `SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM workunit WHERE transition_time <= ? LIMIT ?) t)`,
	ScaleNeedValidate: `SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM workunit WHERE appid IN (?) AND need_validate = 1
LIMIT ?) t)`,
	ScaleNeedAssimilate: `SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM workunit WHERE appid IN (?) AND assimilate_state = ?
LIMIT ?) t)`,
	ScaleFileDeleteReady: `SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM workunit WHERE file_delete_state = ? LIMIT ?) t) +
(SELECT COUNT(*) FROM (SELECT 1 FROM result WHERE file_delete_state = ? LIMIT ?) t)`,
	ScalePurgeable: `SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM workunit WHERE file_delete_state = ? AND mod_time <= ?
LIMIT ?) t)`,
	ScaleUnsent: `SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM result WHERE server_state = ? LIMIT ?) t)`,
}

// ScaleLeftAt counts the rows of work left at time now for apps appIDs
// (jobs purgeable when their files were deleted at or before
// purgeBefore), reading at most limit rows of each index range (0: all).
// A daemon's phase counts its work once in full, then polls with limit 1
// until none is left: a poll reads one index entry, where a full count at
// 10^7 rows read hundreds of thousands and took its share of the
// database CPU the phase is measured by.
func (s *Store) ScaleLeftAt(ctx context.Context, work ScaleWork, appIDs []int64, now, purgeBefore, limit int64) (int64, error) {
	if limit <= 0 {
		limit = math.MaxInt64
	}
	var args []any
	switch work {
	case ScaleDueTransition:
		args = []any{now, limit}
	case ScaleNeedValidate:
		args = []any{appIDs, limit}
	case ScaleNeedAssimilate:
		args = []any{appIDs, int(state.AssimilateReady), limit}
	case ScaleFileDeleteReady:
		args = []any{int(state.FileDeleteReady), limit, int(state.FileDeleteReady), limit}
	case ScalePurgeable:
		args = []any{int(state.FileDeleteDone), purgeBefore, limit}
	case ScaleUnsent:
		args = []any{int(state.ServerUnsent), limit}
	default:
		return 0, fmt.Errorf("count work left: unknown work %d", work)
	}
	q, args, err := sqlx.In(scaleLeft[work], args...)
	if err != nil {
		return 0, err
	}
	var n int64
	if err := s.db.GetContext(ctx, &n, q, args...); err != nil {
		return 0, fmt.Errorf("count work left: %w", err)
	}
	return n, nil
}

// ScaleStatusVars returns the server's global status counters named.
func (s *Store) ScaleStatusVars(ctx context.Context, names []string) (map[string]int64, error) {
	q, args, err := sqlx.In(`SHOW GLOBAL STATUS WHERE Variable_name IN (?)`, names)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read server status: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var v sql.NullInt64
		if err := rows.Scan(&name, &v); err != nil {
			return nil, err
		}
		out[name] = v.Int64
	}
	return out, rows.Err()
}

// ExplainRow is one line of EXPLAIN's table.
type ExplainRow struct {
	ID           sql.NullInt64  `db:"id"`
	SelectType   string         `db:"select_type"`
	Table        sql.NullString `db:"table"`
	Type         sql.NullString `db:"type"`
	PossibleKeys sql.NullString `db:"possible_keys"`
	Key          sql.NullString `db:"key"`
	KeyLen       sql.NullString `db:"key_len"`
	Ref          sql.NullString `db:"ref"`
	Rows         sql.NullInt64  `db:"rows"`
	Extra        sql.NullString `db:"Extra"`
}

// String is the line as the report prints it.
func (e ExplainRow) String() string {
	return fmt.Sprintf("%s %s type=%s key=%s rows=%d %s", e.SelectType, e.Table.String, e.Type.String,
		e.Key.String, e.Rows.Int64, e.Extra.String)
}

// ScaleExplained is one hot query's plan.
type ScaleExplained struct {
	Name string
	Plan []string
}

// ScaleExplain returns the plans of the hot queries at time now for app
// appID: the status page's counts, the feeder's enumeration, the
// transitioner's, validator's, assimilator's, file deleter's and purge's
// scans, with the arguments the daemons pass.
func (s *Store) ScaleExplain(ctx context.Context, appID, now int64) ([]ScaleExplained, error) {
	unsent, over := int(state.ServerUnsent), int(state.ServerOver)
	qs := []struct {
		name  string
		query string
		args  []any
	}{
		{"status: result counts", resultCountTable.sums, nil},
		{"status: job counts", workunitCountTable.sums, nil},
		{"status: jobs due", workunitCountDueAll, []any{now}},
		{"status: throughput", throughputCount, []any{minuteFrom(now - 3600), minuteFrom(now - 86400)}},
		{"feeder: unsent by id", resultListUnsentForCache, []any{unsent, 0, 1, 0, 1000}},
		{"transitioner: due jobs", workunitListDue, []any{now, 1, 0, 1000}},
		{"validator: jobs to validate", workunitListValidate, []any{over, int(state.OutcomeSuccess), appID, 0, 1, 0, 1000}},
		{"file_deleter: job files", workunitListFileDeleteReady, []any{int(state.FileDeleteReady), 0, 1, 0, 1000}},
		{"file_deleter: instance files", resultListFileDeleteReady, []any{int(state.FileDeleteReady), 0, 1, 0, 1000}},
		// The join's condition comes first in the text, so its arguments do.
		{"db_purge: purgeable jobs", workunitListPurgeable, []any{over, int(state.FileDeleteInit),
			int(state.FileDeleteDone), int(state.FileDeleteDone), now, 0, 1, 0, 1000}},
	}
	out := make([]ScaleExplained, 0, len(qs))
	for _, q := range qs {
		var rows []ExplainRow
		if err := s.db.SelectContext(ctx, &rows, "EXPLAIN "+q.query, q.args...); err != nil {
			return nil, fmt.Errorf("explain %s: %w", q.name, err)
		}
		e := ScaleExplained{Name: q.name}
		for _, r := range rows {
			e.Plan = append(e.Plan, strings.TrimSpace(r.String()))
		}
		out = append(out, e)
	}
	return out, nil
}

// scaleWarm reads every row of the big tables through their clustered
// index: the pages a cold buffer pool is given first, as a fill leaves
// them in the pool.
const scaleWarm = `SELECT (SELECT COUNT(*) FROM result FORCE INDEX (PRIMARY))
 + (SELECT COUNT(*) FROM workunit FORCE INDEX (PRIMARY))
 + (SELECT COUNT(*) FROM host FORCE INDEX (PRIMARY))
 + (SELECT COUNT(*) FROM user FORCE INDEX (PRIMARY))`

// ScaleWarm reads the result, workunit, host and user rows once, to warm a
// buffer pool started cold (make bench-scale's pool sweep).
func (s *Store) ScaleWarm(ctx context.Context) error {
	var n int64
	if err := s.db.GetContext(ctx, &n, scaleWarm); err != nil {
		return fmt.Errorf("warm the buffer pool: %w", err)
	}
	return nil
}

// ScaleStatement is one statement form's share of the server's time over a
// span, from performance_schema's digest summary (the server must run with
// performance_schema on).
type ScaleStatement struct {
	// Text is the digest text with its lists folded (statementForm).
	Text  string
	Count int64
	// TimeMS is the server's time in the statement, waits included: on a
	// server with busy cores, close to its CPU.
	TimeMS       float64
	RowsExamined int64
	RowsSent     int64
	RowsAffected int64
}

const scaleStatements = `SELECT COALESCE(digest_text, ''), count_star, sum_timer_wait, sum_rows_examined, sum_rows_sent,
sum_rows_affected FROM performance_schema.events_statements_summary_by_digest`

// ScaleStatementsReset empties the digest summary: ScaleStatements then
// counts from now.
func (s *Store) ScaleStatementsReset(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, `TRUNCATE performance_schema.events_statements_summary_by_digest`); err != nil {
		return fmt.Errorf("reset the statement digests: %w", err)
	}
	return nil
}

// ScaleStatements returns the statement forms run since the last reset,
// the most server time first, at most limit of them.
func (s *Store) ScaleStatements(ctx context.Context, limit int) ([]ScaleStatement, error) {
	rows, err := s.db.QueryContext(ctx, scaleStatements)
	if err != nil {
		return nil, fmt.Errorf("read the statement digests: %w", err)
	}
	defer rows.Close()
	var all []ScaleStatement
	for rows.Next() {
		var st ScaleStatement
		var picos uint64
		if err := rows.Scan(&st.Text, &st.Count, &picos, &st.RowsExamined, &st.RowsSent, &st.RowsAffected); err != nil {
			return nil, fmt.Errorf("read the statement digests: %w", err)
		}
		st.TimeMS = float64(picos) / 1e9
		all = append(all, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the statement digests: %w", err)
	}
	return foldStatements(all, limit), nil
}

// foldStatements merges the digests of one statement form (statementForm),
// leaves out the statements on performance_schema itself, and returns the limit forms with the most time, the most first.
func foldStatements(all []ScaleStatement, limit int) []ScaleStatement {
	byForm := map[string]*ScaleStatement{}
	var forms []*ScaleStatement
	for _, st := range all {
		if strings.Contains(st.Text, "`performance_schema`") {
			continue // the probe's own reset and reads
		}
		form := statementForm(st.Text)
		f := byForm[form]
		if f == nil {
			f = &ScaleStatement{Text: form}
			byForm[form] = f
			forms = append(forms, f)
		}
		f.Count += st.Count
		f.TimeMS += st.TimeMS
		f.RowsExamined += st.RowsExamined
		f.RowsSent += st.RowsSent
		f.RowsAffected += st.RowsAffected
	}
	slices.SortStableFunc(forms, func(a, b *ScaleStatement) int { return cmp.Compare(b.TimeMS, a.TimeMS) })
	out := make([]ScaleStatement, 0, min(limit, len(forms)))
	for _, f := range forms[:min(limit, len(forms))] {
		f.TimeMS = math.Round(f.TimeMS*1000) / 1000
		out = append(out, *f)
	}
	return out
}

// formCaseArms are a multi-row update's CASE arms, a WHEN ? THEN ? per
// row; formListOne is an IN list of one value. The digest folds IN and
// VALUES lists of several values itself, not these.
var (
	formCaseArms = regexp.MustCompile(`(WHEN \? THEN \? )+`)
	formListOne  = regexp.MustCompile(`IN \( ?\? ?\)`)
)

// statementForm is the part of a digest text that names its statement
// whatever the batch size: its one-value IN lists folded into "(...)" and
// its text cut after its first CASE's arms, folded into "WHEN ...", and at
// statementFormLen characters. The digest itself is cut at 1,024
// characters, inside the arms of a large batch, so what follows them is
// not always there.
func statementForm(digest string) string {
	t := strings.Join(strings.Fields(digest), " ") + " "
	t = formListOne.ReplaceAllString(formCaseArms.ReplaceAllString(t, "WHEN ... "), "IN (...)")
	if i := strings.Index(t, "WHEN ... "); i >= 0 {
		t = t[:i+len("WHEN ...")]
	}
	t = strings.TrimSpace(t)
	if len(t) > statementFormLen {
		t = t[:statementFormLen] + "…"
	}
	return t
}

// statementFormLen bounds a form's text: enough to tell the statements of
// a phase apart.
const statementFormLen = 160
