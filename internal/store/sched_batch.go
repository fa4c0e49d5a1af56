package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// SchedReport is one instance a host reported, for SchedulerCommit.
type SchedReport struct {
	ResultID   int64
	WorkunitID int64
	// HostID is the host that reported the instance, whose it becomes.
	HostID int64
	// FromHostID is the host the instance was on as read, when another
	// host of the same user reports it (a client restored from a backup
	// has a new host id); 0 means HostID.
	FromHostID int64
	// Outcome is what the host's report amounts to.
	Outcome state.Outcome
	// SuccessIfDeleted marks an Outcome of CLIENT_ERROR that is only there
	// because an output file is missing from the upload directory: if the
	// instance turns out to be OVER with its files already marked for
	// deletion, the file deleter may have removed that output, and the
	// report is recorded as the success it was.
	SuccessIfDeleted bool
	ClientState      state.ClientState
	ExitStatus       int
	CPUTime          float64
	ElapsedTime      float64
	StderrOut        string
	XMLDocOut        string
	ClaimedCredit    float64
	Now              int64
}

// SchedReportOutcome is what became of one SchedReport.
type SchedReportOutcome struct {
	// Err is nil when the report was recorded, ErrConflict when the
	// instance is not (or no longer) one the host may report: nothing
	// changed.
	Err error
	// Outcome is the outcome recorded.
	Outcome state.Outcome
	// Late is set when the instance had timed out or been marked detached.
	Late bool
	// Turnaround is the seconds from send to report, 0 when unknown.
	Turnaround float64
}

// SchedSend is one unsent instance going to a host: ResultSendParams.
type SchedSend = ResultSendParams

// SchedHost is what one scheduler request says about its host.
type SchedHost struct {
	Host row.Host
	// Info writes the host_info columns too (they changed); otherwise only
	// rpc_seqno, rpc_time and last_ip_addr are written.
	Info bool
}

// SchedBatch is the writes of one or more scheduler requests.
type SchedBatch struct {
	Reports []SchedReport
	Sends   []SchedSend
	Hosts   []SchedHost
	// Committing, if set, is called when every statement has run and only
	// the commit is left: the caller may start other work (its next
	// batch) meanwhile. It may be called more than once if the
	// transaction is retried.
	Committing func()
}

// SchedOutcome is, index for index, what became of a SchedBatch's reports
// and sends. A send's error is nil, ErrConflict, ErrAlreadySentToUser,
// ErrHRMismatch, or one wrapping ErrCouldntSend.
type SchedOutcome struct {
	Reports []SchedReportOutcome
	Sends   []error
	// Workunits and Results hold the jobs and instances of the sends that
	// went through, by id, as the batch left them: what a reply describes.
	Workunits map[int64]row.Workunit
	Results   map[int64]row.Result
}

// schedBatchMaxRows bounds the rows of one multi-row statement's derived
// table; a larger batch is written in several statements.
const schedBatchMaxRows = 200

const schedLockWorkunits = `SELECT ` + WorkunitColumns + ` FROM workunit WHERE id IN (?) ORDER BY id FOR UPDATE`

// The whole row: a sent instance is described in the reply from it.
const schedLockResults = `SELECT ` + ResultColumns + ` FROM result WHERE id IN (?) ORDER BY id FOR UPDATE`

// The job rows are locked, and every writer of workunit_user holds its job's
// lock: a plain read sees every row that can conflict.
const schedListWorkunitUsers = `SELECT workunitid, userid FROM workunit_user WHERE workunitid IN (?)`

type wuUser struct {
	WorkunitID int64 `db:"workunitid"`
	UserID     int64 `db:"userid"`
}

// SchedulerCommit records the writes of concurrent scheduler requests in one
// transaction with a few multi-row statements, and decides each row on its own:
//   - the jobs of every report and send are locked first, by id (the lock
//     order every program uses), then the instances, by id;
//   - from the locked rows, each report and send is decided in Go in
//     batch order: one that may not happen (the instance changed, the job
//     went to this user already, even earlier in this batch, or is bound
//     to another host class) changes nothing and gets its own error, and
//     never stops the others;
//   - the changes are then written: jobs (triggers, wakes, host class,
//     adaptive replication), workunit_user rows, reported, sent and
//     unsendable instances, hosts. Each conditional update still carries its
//     condition, and a count that differs from the rows decided fails the
//     whole batch (nothing is written);
//   - a deadlock retries the whole batch.
//
// A report accepts an instance on FromHostID (the reporting host, or
// another of its user's), IN_PROGRESS, or OVER with an outcome LateOutcome
// accepts (recorded late), and moves it to the reporting host; its job is triggered; a
// success for a job already done gets validate_state TOO_LATE. The host
// row moves with its reports: a CLIENT_ERROR adds one to error_streak and
// zeroes consecutive_valid; a SUCCESS folds its turnaround into
// avg_turnaround (NextAvgTurnaround). An error means nothing was written.
func (s *Store) SchedulerCommit(ctx context.Context, b SchedBatch) (SchedOutcome, error) {
	var out SchedOutcome
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var err error
		out, err = schedCommit(ctx, tx, b)
		if err == nil && b.Committing != nil {
			b.Committing()
		}
		return err
	})
	if err != nil {
		return SchedOutcome{}, fmt.Errorf("scheduler batch of %d reports, %d sends, %d hosts: %w",
			len(b.Reports), len(b.Sends), len(b.Hosts), err)
	}
	return out, nil
}

// hostDelta is what a batch's reports do to one host.
type hostDelta struct {
	errors int
	// samples are turnarounds of successes, in order.
	samples []float64
}

func schedCommit(ctx context.Context, tx *sqlx.Tx, b SchedBatch) (SchedOutcome, error) {
	out := SchedOutcome{Reports: make([]SchedReportOutcome, len(b.Reports)), Sends: make([]error, len(b.Sends))}
	var wuIDs, resIDs, sendWUs []int64
	for _, r := range b.Reports {
		wuIDs = append(wuIDs, r.WorkunitID)
		resIDs = append(resIDs, r.ResultID)
	}
	for _, p := range b.Sends {
		wuIDs = append(wuIDs, p.WorkunitID)
		resIDs = append(resIDs, p.ResultID)
		sendWUs = append(sendWUs, p.WorkunitID)
	}
	wus := map[int64]*row.Workunit{}
	orig := map[int64]row.Workunit{}
	if len(wuIDs) > 0 {
		rows, err := txSelectIn[row.Workunit](ctx, tx, schedLockWorkunits, uniq(wuIDs))
		if err != nil {
			return out, err
		}
		for i := range rows {
			wus[rows[i].ID] = &rows[i]
			orig[rows[i].ID] = rows[i]
		}
	}
	res := map[int64]*row.Result{}
	if len(resIDs) > 0 {
		rows, err := txSelectIn[row.Result](ctx, tx, schedLockResults, uniq(resIDs))
		if err != nil {
			return out, err
		}
		for i := range rows {
			res[rows[i].ID] = &rows[i]
		}
	}
	sentTo := map[wuUser]bool{}
	if len(sendWUs) > 0 {
		rows, err := txSelectIn[wuUser](ctx, tx, schedListWorkunitUsers, uniq(sendWUs))
		if err != nil {
			return out, err
		}
		for _, r := range rows {
			sentTo[r] = true
		}
	}

	var (
		reportRows  [][]any
		sendRows    [][]any
		couldntRows [][]any
		userRows    [][]any
		deltas      = map[int64]*hostDelta{}
		sent        []int // indexes of the sends that go through
	)
	for i, r := range b.Reports {
		if r.FromHostID == 0 {
			r.FromHostID = r.HostID
		}
		row, ok := res[r.ResultID]
		if !ok || row.HostID != r.FromHostID ||
			!(row.ServerState == state.ServerInProgress || (row.ServerState == state.ServerOver && LateOutcome(row.Outcome))) {
			out.Reports[i] = SchedReportOutcome{Err: ErrConflict}
			continue
		}
		outcome := r.Outcome
		if r.SuccessIfDeleted && row.ServerState == state.ServerOver && row.FileDeleteState != state.FileDeleteInit {
			outcome = state.OutcomeSuccess
		}
		vs := state.ValidateInit
		if wu, ok := wus[row.WorkunitID]; ok {
			if outcome == state.OutcomeSuccess && (wu.ErrorMask != 0 || wu.AssimilateState == state.AssimilateDone) {
				vs = state.ValidateTooLate
			}
			wu.TransitionTime = min(wu.TransitionTime-1, r.Now)
		}
		fds := row.FileDeleteState
		if fds == state.FileDeleteDone {
			fds = state.FileDeleteReady
		}
		var turnaround float64
		if row.SentTime > 0 && r.Now > row.SentTime {
			turnaround = float64(r.Now - row.SentTime)
		}
		reportRows = append(reportRows, []any{row.ID, r.HostID, r.FromHostID, row.ServerState, row.Outcome, outcome, r.ClientState,
			r.ExitStatus, r.CPUTime, r.ElapsedTime, r.Now, []byte(r.StderrOut), []byte(r.XMLDocOut), vs, r.ClaimedCredit, fds})
		out.Reports[i] = SchedReportOutcome{Outcome: outcome, Late: row.ServerState == state.ServerOver, Turnaround: turnaround}
		d := deltas[r.HostID]
		if d == nil {
			d = &hostDelta{}
			deltas[r.HostID] = d
		}
		switch {
		case outcome == state.OutcomeClientError:
			d.errors++
		case outcome == state.OutcomeSuccess && turnaround > 0:
			d.samples = append(d.samples, turnaround)
		}
		// A second report of the instance in this batch finds it over.
		row.ServerState, row.Outcome, row.HostID = state.ServerOver, outcome, r.HostID
	}

	for i, p := range b.Sends {
		wu, ok := wus[p.WorkunitID]
		var unsendable error
		switch {
		case !ok:
			unsendable = fmt.Errorf("workunit %d: %w", p.WorkunitID, ErrNotFound)
		case p.CheckWorkunit != nil:
			unsendable = p.CheckWorkunit(*wu)
		}
		row, rowOK := res[p.ResultID]
		if unsendable != nil {
			if !rowOK || row.ServerState != state.ServerUnsent {
				out.Sends[i] = ErrConflict
				continue
			}
			if ok {
				wu.TransitionTime = min(wu.TransitionTime-1, p.Now)
			}
			couldntRows = append(couldntRows, []any{row.ID, p.Now})
			row.ServerState, row.Outcome = state.ServerOver, state.OutcomeCouldntSend
			out.Sends[i] = fmt.Errorf("result %d: %w: %w", p.ResultID, ErrCouldntSend, unsendable)
			continue
		}
		switch {
		case p.HRClass != 0 && wu.HRClass != p.HRClass && wu.HRClass != 0:
			out.Sends[i] = ErrHRMismatch
			continue
		case sentTo[wuUser{p.WorkunitID, p.UserID}]:
			out.Sends[i] = ErrAlreadySentToUser
			continue
		case !rowOK || row.ServerState != state.ServerUnsent:
			out.Sends[i] = ErrConflict
			continue
		}
		if p.HRClass != 0 {
			wu.HRClass = p.HRClass
		}
		if p.Replicate && wu.ReplicationQuorum > wu.MinQuorum {
			wu.MinQuorum = max(wu.MinQuorum, wu.ReplicationQuorum)
			wu.TargetNResults = max(wu.TargetNResults, wu.ReplicationQuorum)
			wu.TransitionTime = min(wu.TransitionTime-1, p.Now)
		}
		sentTo[wuUser{p.WorkunitID, p.UserID}] = true
		userRows = append(userRows, []any{p.WorkunitID, p.UserID, p.ResultID})
		wu.TransitionTime = min(wu.TransitionTime, p.ReportDeadline)
		sendRows = append(sendRows, []any{row.ID, p.HostID, p.UserID, p.Now, p.ReportDeadline, p.AppVersionID,
			p.AppVersionNum})
		row.ServerState, row.HostID, row.UserID, row.SentTime, row.ReportDeadline = state.ServerInProgress, p.HostID, p.UserID, p.Now, p.ReportDeadline
		row.AppVersionID, row.AppVersionNum, row.ModTime = p.AppVersionID, p.AppVersionNum, p.Now
		sent = append(sent, i)
	}

	var wuRows [][]any
	for _, id := range uniq(wuIDs) {
		wu, ok := wus[id]
		if !ok {
			continue
		}
		o := orig[id]
		if wu.TransitionTime != o.TransitionTime || wu.HRClass != o.HRClass || wu.MinQuorum != o.MinQuorum ||
			wu.TargetNResults != o.TargetNResults {
			wuRows = append(wuRows, []any{id, wu.TransitionTime, wu.HRClass, wu.MinQuorum, wu.TargetNResults})
		}
	}
	if err := execRows(ctx, tx, schedUpdateWorkunits, []string{"id", "tt", "hr", "mq", "tn"}, wuRows, -1); err != nil {
		return out, err
	}
	if err := insertRows(ctx, tx, `INSERT INTO workunit_user (workunitid, userid, resultid) VALUES `, 3, userRows); err != nil {
		return out, err
	}
	if err := execRows(ctx, tx, schedUpdateReports, []string{"id", "hostid", "fh", "fs", "fo", "outcome", "cs", "es", "cpu",
		"el", "now", "se", "xo", "vs", "cc", "fds"}, reportRows, len(reportRows)); err != nil {
		return out, err
	}
	if err := execRows(ctx, tx, schedUpdateSends, []string{"id", "hostid", "userid", "now", "deadline", "avid", "avnum"},
		sendRows, len(sendRows)); err != nil {
		return out, err
	}
	if err := execRows(ctx, tx, schedUpdateCouldntSend, []string{"id", "now"}, couldntRows, len(couldntRows)); err != nil {
		return out, err
	}
	if err := schedWriteHosts(ctx, tx, b.Hosts, deltas); err != nil {
		return out, err
	}
	if len(sent) > 0 {
		out.Workunits = make(map[int64]row.Workunit, len(sent))
		out.Results = make(map[int64]row.Result, len(sent))
		for _, i := range sent {
			p := b.Sends[i]
			out.Workunits[p.WorkunitID] = *wus[p.WorkunitID]
			out.Results[p.ResultID] = *res[p.ResultID]
		}
	}
	return out, nil
}

// The job rows are locked and their new values computed from what the lock
// read: a trigger is LEAST(transition_time - 1, now), a wake LEAST(
// transition_time, deadline).
const schedUpdateWorkunits = `UPDATE workunit w STRAIGHT_JOIN (%s) d ON d.id = w.id
SET w.transition_time = d.tt, w.hr_class = d.hr, w.min_quorum = d.mq, w.target_nresults = d.tn
WHERE w.id IN (%s)`

const schedUpdateReports = `UPDATE result r STRAIGHT_JOIN (%s) d ON d.id = r.id
SET r.hostid = d.hostid, r.server_state = ` + stateOver + `, r.outcome = d.outcome, r.client_state = d.cs, r.exit_status = d.es,
r.cpu_time = d.cpu, r.elapsed_time = d.el, r.received_time = d.now, r.stderr_out = d.se, r.xml_doc_out = d.xo,
r.validate_state = d.vs, r.claimed_credit = d.cc, r.mod_time = d.now, r.file_delete_state = d.fds
WHERE r.id IN (%s) AND r.hostid = d.fh AND r.server_state = d.fs AND r.outcome = d.fo`

const schedUpdateSends = `UPDATE result r STRAIGHT_JOIN (%s) d ON d.id = r.id
SET r.server_state = ` + stateInProgress + `, r.hostid = d.hostid, r.userid = d.userid, r.sent_time = d.now,
r.report_deadline = d.deadline, r.app_version_id = d.avid, r.app_version_num = d.avnum, r.mod_time = d.now
WHERE r.id IN (%s) AND r.server_state = ` + stateUnsent

const schedUpdateCouldntSend = `UPDATE result r STRAIGHT_JOIN (%s) d ON d.id = r.id
SET r.server_state = ` + stateOver + `, r.outcome = ` + outcomeCouldntSend + `, r.mod_time = d.now
WHERE r.id IN (%s) AND r.server_state = ` + stateUnsent

// The states as SQL literals, checked against package state by a test.
const (
	stateUnsent        = "2"
	stateInProgress    = "4"
	stateOver          = "5"
	outcomeCouldntSend = "2"
)

// Credit columns are the validator's; error_streak, consecutive_valid and
// avg_turnaround are relative to the row as it is.
const schedUpdateHostsRPC = `UPDATE host h STRAIGHT_JOIN (%s) d ON d.id = h.id
SET h.rpc_seqno = d.seq, h.rpc_time = d.t, h.last_ip_addr = d.ip,
h.error_streak = h.error_streak + d.errs, h.consecutive_valid = IF(d.errs > 0, 0, h.consecutive_valid),
h.avg_turnaround = IF(d.nt = 0, h.avg_turnaround, IF(h.avg_turnaround > 0, h.avg_turnaround * d.ta + d.tb, d.tc))
WHERE h.id IN (%s)`

const schedUpdateHostsInfo = `UPDATE host h STRAIGHT_JOIN (%s) d ON d.id = h.id
SET h.rpc_seqno = d.seq, h.rpc_time = d.t, h.last_ip_addr = d.ip,
h.error_streak = h.error_streak + d.errs, h.consecutive_valid = IF(d.errs > 0, 0, h.consecutive_valid),
h.avg_turnaround = IF(d.nt = 0, h.avg_turnaround, IF(h.avg_turnaround > 0, h.avg_turnaround * d.ta + d.tb, d.tc)),
h.timezone = d.tz, h.domain_name = d.dn, h.host_cpid = d.cpid, h.p_ncpus = d.nc, h.p_vendor = d.pv,
h.p_model = d.pm, h.p_fpops = d.pf, h.p_iops = d.pi, h.m_nbytes = d.mn, h.m_swap = d.ms, h.d_total = d.dt,
h.d_free = d.df, h.os_name = d.osn, h.os_version = d.osv, h.on_frac = d.onf, h.active_frac = d.af
WHERE h.id IN (%s)`

var (
	hostRPCCols  = []string{"id", "seq", "t", "ip", "errs", "nt", "ta", "tb", "tc"}
	hostInfoCols = append(append([]string{}, hostRPCCols...), "tz", "dn", "cpid", "nc", "pv", "pm", "pf", "pi", "mn",
		"ms", "dt", "df", "osn", "osv", "onf", "af")
)

// turnaroundFold is avg_turnaround after samples, as a*old + b for a host
// with an average, and c for one without (the first sample starts it):
// NextAvgTurnaround applied once per sample.
func turnaroundFold(samples []float64) (a, b, c float64) {
	a = 1
	for _, t := range samples {
		a *= 1 - TurnaroundWeight
		b = b*(1-TurnaroundWeight) + t*TurnaroundWeight
	}
	if len(samples) > 0 {
		c = samples[0]
		for _, t := range samples[1:] {
			c = NextAvgTurnaround(c, t)
		}
	}
	return a, b, c
}

// schedWriteHosts writes each host once: the last request's RPC columns, the
// last host_info that changed, and the reports' deltas.
func schedWriteHosts(ctx context.Context, tx *sqlx.Tx, hosts []SchedHost, deltas map[int64]*hostDelta) error {
	type merged struct {
		last row.Host
		info *row.Host
	}
	var order []int64
	byID := map[int64]*merged{}
	for _, h := range hosts {
		m := byID[h.Host.ID]
		if m == nil {
			m = &merged{}
			byID[h.Host.ID] = m
			order = append(order, h.Host.ID)
		}
		m.last = h.Host
		if h.Info {
			info := h.Host
			m.info = &info
		}
	}
	// A report of a host that sent no RPC columns in this batch (not made
	// by the scheduler) still moves its counters.
	for id := range deltas {
		if byID[id] == nil {
			return fmt.Errorf("report for host %d without its request's host row", id)
		}
	}
	var rpcRows, infoRows [][]any
	for _, id := range order {
		m := byID[id]
		d := deltas[id]
		if d == nil {
			d = &hostDelta{}
		}
		a, bb, c := turnaroundFold(d.samples)
		row := []any{id, m.last.RPCSeqno, m.last.RPCTime, m.last.LastIPAddr, d.errors, len(d.samples), a, bb, c}
		if m.info == nil {
			rpcRows = append(rpcRows, row)
			continue
		}
		h := m.info
		infoRows = append(infoRows, append(row, h.Timezone, h.DomainName, h.HostCPID, h.PNCPUs, h.PVendor, h.PModel,
			h.PFpops, h.PIops, h.MNbytes, h.MSwap, h.DTotal, h.DFree, h.OSName, h.OSVersion, h.OnFrac, h.ActiveFrac))
	}
	if err := execRows(ctx, tx, schedUpdateHostsRPC, hostRPCCols, rpcRows, -1); err != nil {
		return err
	}
	return execRows(ctx, tx, schedUpdateHostsInfo, hostInfoCols, infoRows, -1)
}

// errBatchCount means a multi-row update changed another number of rows
// than were decided under lock: something wrote them without the lock, and
// the whole batch is refused rather than half applied.
var errBatchCount = errors.New("multi-row update changed an unexpected number of rows")

// execRows runs query in chunks of schedBatchMaxRows: its first %s is a
// derived table of rows (first row named by cols), its second the list of
// the rows' ids (their first column). want is the rows it must change in
// all, or -1 for no check (an update that may leave a row as it was).
//
// The queries name the updated table first, STRAIGHT_JOIN the derived
// table, and restrict the table to the ids: the server then reads the rows
// by primary key and updates each as it finds it. Joined the other way, a
// multi-table update collects the new values in a temporary table first,
// one on disk when a BLOB column is set (the reports' stderr_out): about
// half the cost of the batch.
func execRows(ctx context.Context, tx *sqlx.Tx, query string, cols []string, rows [][]any, want int) error {
	var changed int64
	for len(rows) > 0 {
		n := min(len(rows), schedBatchMaxRows)
		q, args := derivedTable(cols, rows[:n])
		for _, row := range rows[:n] {
			args = append(args, row[0])
		}
		ids := strings.Repeat("?, ", n-1) + "?"
		r, err := tx.ExecContext(ctx, fmt.Sprintf(query, q, ids), args...)
		if err != nil {
			return err
		}
		c, err := r.RowsAffected()
		if err != nil {
			return err
		}
		changed += c
		rows = rows[n:]
	}
	if want >= 0 && changed != int64(want) {
		return fmt.Errorf("%w: %d, want %d", errBatchCount, changed, want)
	}
	return nil
}

// derivedTable is `SELECT ? AS c1, ? AS c2 UNION ALL SELECT ?, ? ...`, which
// MySQL, MariaDB and TiDB all accept as a derived table, and its arguments.
// A float64 column gets "+ 0e0" in the first row so that the column is a
// DOUBLE whatever literals the other rows have.
func derivedTable(cols []string, rows [][]any) (string, []any) {
	var b strings.Builder
	args := make([]any, 0, len(cols)*len(rows))
	for i, row := range rows {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		b.WriteString("SELECT ")
		for j, v := range row {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("?")
			if i == 0 {
				if _, ok := v.(float64); ok {
					b.WriteString(" + 0e0")
				}
				b.WriteString(" AS ")
				b.WriteString(cols[j])
			}
			args = append(args, schedArg(v))
		}
	}
	return b.String(), args
}

// schedArg maps values a column cannot hold (NaN, an infinity) to 0.
func schedArg(v any) any {
	if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
		return 0.0
	}
	return v
}

// insertRows runs a multi-row INSERT of rows of width columns.
func insertRows(ctx context.Context, tx *sqlx.Tx, prefix string, width int, rows [][]any) error {
	for len(rows) > 0 {
		n := min(len(rows), schedBatchMaxRows)
		var b strings.Builder
		b.WriteString(prefix)
		args := make([]any, 0, n*width)
		for i, row := range rows[:n] {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(" + strings.Repeat("?, ", width-1) + "?)")
			args = append(args, row...)
		}
		if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

// txSelectIn is selectIn inside a transaction.
func txSelectIn[T any](ctx context.Context, tx *sqlx.Tx, query string, list []int64) ([]T, error) {
	q, args, err := sqlx.In(query, list)
	if err != nil {
		return nil, err
	}
	var out []T
	if err := tx.SelectContext(ctx, &out, q, args...); err != nil {
		return nil, err
	}
	return out, nil
}

// uniq returns the distinct values of ids in order of first appearance.
func uniq(ids []int64) []int64 {
	seen := make(map[int64]bool, len(ids))
	out := make([]int64, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
