package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/row"
)

// The SQL of `taskctl import boinc` (package boincimport): reading a BOINC
// project's database, which the import never writes (every statement on a
// BoincDB is a SELECT or CHECKSUM TABLE, so a user with only SELECT on it
// is enough), and writing the rows it read into ours with their ids.

// BoincDB is a BOINC project's database, opened to be read.
type BoincDB struct {
	db *sqlx.DB
	st *Store
}

// OpenBoinc connects to the BOINC database at dsn, as Open does, with a
// connection for each table the import reads at once.
func OpenBoinc(ctx context.Context, dsn string) (*BoincDB, error) {
	st, err := Open(ctx, dsn, Options{MaxOpenConns: 6})
	if err != nil {
		return nil, fmt.Errorf("BOINC database: %w", err)
	}
	return &BoincDB{db: st.db.DB, st: st}, nil
}

// Close closes the connection pool.
func (b *BoincDB) Close() error { return b.st.Close() }

// ImportTable is a table the import copies column for column, from
// BOINC's table of the same name into ours.
type ImportTable struct {
	// Name is the table's name in both databases.
	Name string
	// source is the SELECT list on BOINC's table, aligned with columns:
	// NULLs BOINC allows read as '' and its TIMESTAMPs as Unix seconds.
	source string
	// columns are ours; the first is id.
	columns []string
	// identity is the column (one of columns) that tells the row imported
	// before from another row at the same id: one no program changes
	// after the row is made.
	identity string
}

// ImportTables are the tables copied column for column, in the order the
// import copies them.
var ImportTables = []ImportTable{
	{Name: "platform", identity: "name",
		source:  "id, create_time, name, user_friendly_name, deprecated",
		columns: []string{"id", "create_time", "name", "user_friendly_name", "deprecated"}},
	{Name: "app", identity: "name",
		source:  "id, create_time, name, user_friendly_name, min_version, deprecated, homogeneous_redundancy, weight, beta",
		columns: []string{"id", "create_time", "name", "user_friendly_name", "min_version", "deprecated", "homogeneous_redundancy", "weight", "beta"}},
	{Name: "team", identity: "name",
		source: "id, create_time, userid, name, COALESCE(name_lc, ''), COALESCE(url, ''), type, COALESCE(name_html, ''), " +
			"COALESCE(description, ''), nusers, COALESCE(country, ''), total_credit, expavg_credit, expavg_time, joinable",
		columns: []string{"id", "create_time", "userid", "name", "name_lc", "url", "type", "name_html", "description", "nusers", "country",
			"total_credit", "expavg_credit", "expavg_time", "joinable"}},
	{Name: "user", identity: "authenticator",
		source: "id, create_time, email_addr, COALESCE(name, ''), COALESCE(authenticator, ''), passwd_hash, total_credit, expavg_credit, " +
			"expavg_time, teamid, cross_project_id, COALESCE(project_prefs, ''), COALESCE(global_prefs, ''), COALESCE(country, ''), " +
			"COALESCE(postal_code, ''), COALESCE(url, ''), venue, send_email, show_hosts, has_profile, email_validated",
		columns: []string{"id", "create_time", "email_addr", "name", "authenticator", "passwd_hash", "total_credit", "expavg_credit",
			"expavg_time", "teamid", "cross_project_id", "project_prefs", "global_prefs", "country", "postal_code", "url", "venue", "send_email",
			"show_hosts", "has_profile", "email_validated"}},
	{Name: "host", identity: "create_time",
		source: "id, create_time, userid, rpc_seqno, rpc_time, total_credit, expavg_credit, expavg_time, timezone, COALESCE(domain_name, ''), " +
			"COALESCE(last_ip_addr, ''), COALESCE(host_cpid, ''), p_ncpus, COALESCE(p_vendor, ''), COALESCE(p_model, ''), p_fpops, p_iops, " +
			"m_nbytes, m_swap, d_total, d_free, COALESCE(os_name, ''), COALESCE(os_version, ''), on_frac, active_frac, nresults_today, " +
			"avg_turnaround, venue, COALESCE(serialnum, ''), COALESCE(external_ip_addr, ''), product_name, p_membw, m_cache, n_bwup, n_bwdown, " +
			"credit_per_cpu_sec",
		columns: []string{"id", "create_time", "userid", "rpc_seqno", "rpc_time", "total_credit", "expavg_credit", "expavg_time", "timezone",
			"domain_name", "last_ip_addr", "host_cpid", "p_ncpus", "p_vendor", "p_model", "p_fpops", "p_iops", "m_nbytes", "m_swap", "d_total",
			"d_free", "os_name", "os_version", "on_frac", "active_frac", "nresults_today", "avg_turnaround", "venue", "serialnum",
			"external_ip_addr", "product_name", "p_membw", "m_cache", "n_bwup", "n_bwdown", "credit_per_cpu_sec"}},
}

// ImportRow is one row read from BOINC's table: its id, its identity, and
// its values in the order of our columns.
type ImportRow struct {
	ID       int64
	Identity string
	Values   []any
}

// ImportRowsList returns up to limit rows of t with id > afterID, in id
// order.
func (b *BoincDB) ImportRowsList(ctx context.Context, t ImportTable, afterID int64, limit int) ([]ImportRow, error) {
	q := "SELECT " + t.source + " FROM " + t.Name + " WHERE id > ? ORDER BY id LIMIT ?"
	ident := -1
	for i, c := range t.columns {
		if c == t.identity {
			ident = i
		}
	}
	rows, err := b.db.QueryContext(ctx, q, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("read BOINC %s after id %d: %w", t.Name, afterID, err)
	}
	defer rows.Close()
	n := len(t.columns)
	var out []ImportRow
	for rows.Next() {
		raw := make([]any, n)
		ptrs := make([]any, n)
		for i := range raw {
			ptrs[i] = &raw[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, fmt.Errorf("read BOINC %s: %w", t.Name, err)
		}
		for i, v := range raw {
			if bs, ok := v.([]byte); ok {
				raw[i] = string(bs)
			}
		}
		id, err := toInt64(raw[0])
		if err != nil {
			return nil, fmt.Errorf("read BOINC %s: id: %w", t.Name, err)
		}
		out = append(out, ImportRow{ID: id, Identity: fmt.Sprint(raw[ident]), Values: raw})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read BOINC %s: %w", t.Name, err)
	}
	return out, nil
}

func toInt64(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case string:
		var n int64
		_, err := fmt.Sscan(x, &n)
		return n, err
	}
	return 0, fmt.Errorf("unexpected %T", v)
}

// ImportIdentities returns, for those of ids that table (ours) holds, the
// row's identity (see ImportTable.identity; for workunit and result the
// name, for app_version its key).
func (s *Store) ImportIdentities(ctx context.Context, table string, ids []int64) (map[int64]string, error) {
	out := make(map[int64]string, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	ident, ok := importIdentity[table]
	if !ok {
		return nil, fmt.Errorf("import: no identity for table %q", table)
	}
	q, args, err := sqlx.In("SELECT id, "+ident+" FROM "+table+" WHERE id IN (?)", ids)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read our %s ids: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var v string
		if err := rows.Scan(&id, &v); err != nil {
			return nil, fmt.Errorf("read our %s ids: %w", table, err)
		}
		out[id] = v
	}
	return out, rows.Err()
}

// importIdentity is each imported table's identity expression.
var importIdentity = map[string]string{
	"platform":    "name",
	"app":         "name",
	"team":        "name",
	"user":        "authenticator",
	"host":        "create_time",
	"app_version": AppVersionIdentity,
	"workunit":    "name",
	"result":      "name",
}

// AppVersionIdentity is the identity of an app_version row, on either side:
// its unique key.
const AppVersionIdentity = "CONCAT_WS(',', appid, platformid, version_num, plan_class)"

// ImportRowsInsert inserts rows into our table t in one statement, ids as
// given; a row whose key another row holds fails it with ErrDuplicate.
func (s *Store) ImportRowsInsert(ctx context.Context, t ImportTable, rows []ImportRow) error {
	if len(rows) == 0 {
		return nil
	}
	one := "(" + strings.TrimSuffix(strings.Repeat("?,", len(t.columns)), ",") + ")"
	q := "INSERT INTO " + t.Name + " (" + strings.Join(t.columns, ", ") + ") VALUES " + strings.TrimSuffix(strings.Repeat(one+",", len(rows)), ",")
	args := make([]any, 0, len(rows)*len(t.columns))
	for _, r := range rows {
		args = append(args, r.Values...)
	}
	if _, err := s.db.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("import %s ids %d..%d: %w", t.Name, rows[0].ID, rows[len(rows)-1].ID, importErr(err))
	}
	return nil
}

// importErr wraps ErrDuplicate around a duplicate-key error: the id (rows
// written by a killed import's last statement, committed after the next
// run looked) or another unique key (an e-mail address or name our
// database gives another row); the server's message says which.
func importErr(err error) error {
	if isDuplicate(err) {
		return fmt.Errorf("%w: %w", ErrDuplicate, err)
	}
	return err
}

func isDuplicate(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062
}

const boincAppVersionList = `SELECT id, create_time, appid, version_num, platformid, plan_class, COALESCE(xml_doc, '') AS xml_doc,
deprecated <> 0 AS deprecated, beta <> 0 AS beta FROM app_version ORDER BY id`

// AppVersionList returns every app version of the BOINC project, its
// xml_doc as BOINC wrote it.
func (b *BoincDB) AppVersionList(ctx context.Context) ([]row.AppVersion, error) {
	var out []row.AppVersion
	if err := b.db.SelectContext(ctx, &out, boincAppVersionList); err != nil {
		return nil, fmt.Errorf("read BOINC app_version: %w", err)
	}
	return out, nil
}

const appVersionImport = `INSERT INTO app_version (id, create_time, appid, version_num, platformid, plan_class, xml_doc, deprecated, beta)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`

// AppVersionImport inserts app version v with its id.
func (s *Store) AppVersionImport(ctx context.Context, v row.AppVersion) error {
	if _, err := s.db.ExecContext(ctx, appVersionImport, v.ID, v.CreateTime, v.AppID, v.VersionNum, v.PlatformID, v.PlanClass, v.XMLDoc,
		v.Deprecated, v.Beta); err != nil {
		return fmt.Errorf("import app_version %d: %w", v.ID, err)
	}
	return nil
}

// BoincWorkunit is a BOINC job with the path of its output template.
type BoincWorkunit struct {
	row.Workunit
	// ResultTemplateFile is the output template's path, relative to the
	// BOINC project's directory.
	ResultTemplateFile string `db:"result_template_file"`
}

// boincInFlight selects the jobs still in flight: neither a canonical
// result nor an error, not assimilated.
const boincInFlight = `canonical_resultid = 0 AND error_mask = 0 AND assimilate_state = 0`

const boincWorkunitInFlightList = `SELECT id, create_time, appid, name, COALESCE(xml_doc, '') AS xml_doc, batch, rsc_fpops_est,
rsc_fpops_bound, rsc_memory_bound, rsc_disk_bound, need_validate <> 0 AS need_validate, canonical_resultid, canonical_credit,
transition_time, delay_bound, error_mask, file_delete_state, assimilate_state, hr_class, opaque, min_quorum, target_nresults,
max_error_results, max_total_results, max_success_results, priority, COALESCE(UNIX_TIMESTAMP(mod_time), 0) AS mod_time,
result_template_file FROM workunit WHERE id > ? AND ` + boincInFlight + ` ORDER BY id LIMIT ?`

// WorkunitInFlightList returns up to limit jobs in flight with id >
// afterID, in id order.
func (b *BoincDB) WorkunitInFlightList(ctx context.Context, afterID int64, limit int) ([]BoincWorkunit, error) {
	var out []BoincWorkunit
	if err := b.db.SelectContext(ctx, &out, boincWorkunitInFlightList, afterID, limit); err != nil {
		return nil, fmt.Errorf("read BOINC workunits after id %d: %w", afterID, err)
	}
	return out, nil
}

const boincResultListByWorkunits = `SELECT id, create_time, workunitid, server_state, outcome, client_state, hostid, userid,
report_deadline, sent_time, received_time, name, cpu_time, COALESCE(xml_doc_in, '') AS xml_doc_in,
COALESCE(xml_doc_out, '') AS xml_doc_out, COALESCE(stderr_out, '') AS stderr_out, batch, file_delete_state, validate_state,
claimed_credit, granted_credit, opaque, random, app_version_num, appid, exit_status, teamid, priority,
COALESCE(UNIX_TIMESTAMP(mod_time), 0) AS mod_time, elapsed_time, app_version_id, flops_estimate
FROM result WHERE workunitid IN (?) ORDER BY id`

// ResultListByWorkunits returns every instance of the jobs wuIDs.
func (b *BoincDB) ResultListByWorkunits(ctx context.Context, wuIDs []int64) ([]row.Result, error) {
	if len(wuIDs) == 0 {
		return nil, nil
	}
	q, args, err := sqlx.In(boincResultListByWorkunits, wuIDs)
	if err != nil {
		return nil, err
	}
	var out []row.Result
	if err := b.db.SelectContext(ctx, &out, q, args...); err != nil {
		return nil, fmt.Errorf("read BOINC results of workunits %d..: %w", wuIDs[0], err)
	}
	return out, nil
}

const jobImportWorkunitCols = `id, create_time, appid, name, xml_doc, batch, rsc_fpops_est, rsc_fpops_bound, rsc_memory_bound,
rsc_disk_bound, need_validate, canonical_resultid, canonical_credit, transition_time, delay_bound, error_mask, file_delete_state,
assimilate_state, hr_class, opaque, min_quorum, target_nresults, max_error_results, max_total_results, max_success_results, priority,
mod_time, output_template_id`

const jobImportResultCols = `id, create_time, workunitid, server_state, outcome, client_state, hostid, userid, report_deadline,
sent_time, received_time, name, cpu_time, xml_doc_in, xml_doc_out, stderr_out, batch, file_delete_state, validate_state,
claimed_credit, granted_credit, opaque, random, app_version_num, appid, exit_status, teamid, priority, mod_time, elapsed_time,
app_version_id, flops_estimate`

// JobsImport inserts jobs and their instances with their ids, and a
// workunit_user row for each instance sent to a user (the first of a user's
// instances of a job, should BOINC have sent it two), in one transaction:
// a job is never there without its instances.
func (s *Store) JobsImport(ctx context.Context, wus []row.Workunit, results []row.Result) error {
	if len(wus) == 0 {
		return nil
	}
	return s.inTx(ctx, func(tx *sqlx.Tx) error {
		var args []any
		for _, w := range wus {
			args = append(args, w.ID, w.CreateTime, w.AppID, w.Name, w.XMLDoc, w.Batch, w.RscFpopsEst, w.RscFpopsBound, w.RscMemoryBound,
				w.RscDiskBound, w.NeedValidate, w.CanonicalResultID, w.CanonicalCredit, w.TransitionTime, w.DelayBound, w.ErrorMask,
				w.FileDeleteState, w.AssimilateState, w.HRClass, w.Opaque, w.MinQuorum, w.TargetNResults, w.MaxErrorResults,
				w.MaxTotalResults, w.MaxSuccessResults, w.Priority, w.ModTime, w.OutputTemplateID)
		}
		if _, err := tx.ExecContext(ctx, multiInsert("workunit", jobImportWorkunitCols, len(wus)), args...); err != nil {
			return fmt.Errorf("import workunits %d..%d: %w", wus[0].ID, wus[len(wus)-1].ID, importErr(err))
		}
		if len(results) == 0 {
			return nil
		}
		args = args[:0]
		var wuUsers []any
		for _, r := range results {
			args = append(args, r.ID, r.CreateTime, r.WorkunitID, r.ServerState, r.Outcome, r.ClientState, r.HostID, r.UserID,
				r.ReportDeadline, r.SentTime, r.ReceivedTime, r.Name, r.CPUTime, r.XMLDocIn, r.XMLDocOut, r.StderrOut, r.Batch,
				r.FileDeleteState, r.ValidateState, r.ClaimedCredit, r.GrantedCredit, r.Opaque, r.Random, r.AppVersionNum, r.AppID,
				r.ExitStatus, r.TeamID, r.Priority, r.ModTime, r.ElapsedTime, r.AppVersionID, r.FlopsEstimate)
			if r.UserID > 0 {
				wuUsers = append(wuUsers, r.WorkunitID, r.UserID, r.ID)
			}
		}
		if _, err := tx.ExecContext(ctx, multiInsert("result", jobImportResultCols, len(results)), args...); err != nil {
			return fmt.Errorf("import results of workunits %d..%d: %w", wus[0].ID, wus[len(wus)-1].ID, importErr(err))
		}
		if len(wuUsers) == 0 {
			return nil
		}
		q := strings.Replace(multiInsert("workunit_user", "workunitid, userid, resultid", len(wuUsers)/3), "INSERT", "INSERT IGNORE", 1)
		if _, err := tx.ExecContext(ctx, q, wuUsers...); err != nil {
			return fmt.Errorf("import workunit_user of workunits %d..%d: %w", wus[0].ID, wus[len(wus)-1].ID, err)
		}
		return nil
	})
}

// multiInsert is an INSERT of n rows of the comma-separated cols.
func multiInsert(table, cols string, n int) string {
	one := "(" + strings.TrimSuffix(strings.Repeat("?,", strings.Count(cols, ",")+1), ",") + ")"
	return "INSERT INTO " + table + " (" + cols + ") VALUES " + strings.TrimSuffix(strings.Repeat(one+",", n), ",")
}

// ImportCount is what one table holds for the import's summaries.
type ImportCount struct {
	Table string
	Rows  int64
	// Credit and Expavg are the sums of total_credit and expavg_credit,
	// for users, hosts and teams.
	Credit, Expavg float64
}

// importCountQueries count each table both databases have; the same text
// runs on either side.
var importCountQueries = []struct{ table, query string }{
	{"platform", "SELECT COUNT(*), 0, 0 FROM platform"},
	{"app", "SELECT COUNT(*), 0, 0 FROM app"},
	{"app_version", "SELECT COUNT(*), 0, 0 FROM app_version"},
	{"user", "SELECT COUNT(*), COALESCE(SUM(total_credit), 0), COALESCE(SUM(expavg_credit), 0) FROM user"},
	{"team", "SELECT COUNT(*), COALESCE(SUM(total_credit), 0), COALESCE(SUM(expavg_credit), 0) FROM team"},
	{"host", "SELECT COUNT(*), COALESCE(SUM(total_credit), 0), COALESCE(SUM(expavg_credit), 0) FROM host"},
}

func importCounts(ctx context.Context, db *sqlx.DB) ([]ImportCount, error) {
	var out []ImportCount
	for _, c := range importCountQueries {
		n := ImportCount{Table: c.table}
		if err := db.QueryRowContext(ctx, c.query).Scan(&n.Rows, &n.Credit, &n.Expavg); err != nil {
			return nil, fmt.Errorf("count %s: %w", c.table, err)
		}
		out = append(out, n)
	}
	return out, nil
}

// ImportCounts returns the rows and credit sums of the BOINC project's
// tables that the import copies whole.
func (b *BoincDB) ImportCounts(ctx context.Context) ([]ImportCount, error) {
	return importCounts(ctx, b.db)
}

// ImportCounts returns the same figures of our database.
func (s *Store) ImportCounts(ctx context.Context) ([]ImportCount, error) {
	return importCounts(ctx, s.db.DB)
}

const boincJobCounts = `SELECT
  (SELECT COUNT(*) FROM workunit),
  (SELECT COUNT(*) FROM workunit WHERE ` + boincInFlight + `),
  (SELECT COUNT(*) FROM result WHERE workunitid IN (SELECT id FROM workunit WHERE ` + boincInFlight + `))`

// JobCounts returns how many jobs the BOINC project has, how many are in
// flight, and how many instances those have.
func (b *BoincDB) JobCounts(ctx context.Context) (all, inFlight, instances int64, err error) {
	err = b.db.QueryRowContext(ctx, boincJobCounts).Scan(&all, &inFlight, &instances)
	if err != nil {
		err = fmt.Errorf("count BOINC jobs: %w", err)
	}
	return all, inFlight, instances, err
}

// TableChecksums returns CHECKSUM TABLE of each of tables: equal sums
// before and after show the import (or anything else) changed nothing.
func (b *BoincDB) TableChecksums(ctx context.Context, tables []string) (map[string]int64, error) {
	out := make(map[string]int64, len(tables))
	for _, t := range tables {
		var name string
		var sum *int64
		if err := b.db.QueryRowContext(ctx, "CHECKSUM TABLE "+t).Scan(&name, &sum); err != nil {
			return nil, fmt.Errorf("checksum %s: %w", t, err)
		}
		if sum == nil {
			return nil, fmt.Errorf("checksum %s: no such table", t)
		}
		out[t] = *sum
	}
	return out, nil
}

// ImportMaxID returns the largest id in our table (0 when empty): rows the
// import reads above it cannot clash with ours, so their chunk needs no
// check, as long as nothing else writes the table during the import.
func (s *Store) ImportMaxID(ctx context.Context, table string) (int64, error) {
	if _, ok := importIdentity[table]; !ok {
		return 0, fmt.Errorf("import: unknown table %q", table)
	}
	var id int64
	if err := s.db.QueryRowContext(ctx, "SELECT COALESCE(MAX(id), 0) FROM "+table).Scan(&id); err != nil {
		return 0, fmt.Errorf("read our largest %s id: %w", table, err)
	}
	return id, nil
}
