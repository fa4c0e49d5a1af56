package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/scheduler/decide"
)

// SchedReport is one instance a host reported, for SchedulerCommit.
type SchedReport = decide.Report

// SchedReportOutcome is what became of one SchedReport; its Err is nil or
// ErrConflict.
type SchedReportOutcome = decide.ReportOutcome

// SchedSend is one unsent instance going to a host, for SchedulerCommit.
type SchedSend = decide.Send

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
	// DailyResultQuota is the project's daily quota per instance
	// (--daily-result-quota; 0: none): a reported CLIENT_ERROR shrinks the
	// host's quota for the version from it (hostav.AddError).
	DailyResultQuota int
	// JobsToday are jobs sent to hosts by earlier batches, per host and
	// version (Errors 0), added to the host_app_version rows with this
	// batch's errors: a scheduler counts its sends in memory and writes
	// them in one batch now and then (SchedOutcome.JobsToday), not one row
	// update per request.
	JobsToday []decide.HostAppVersionDelta
	// Committing, if set, is called when every statement has run and only
	// the commit is left: the caller may start other work (its next
	// batch) meanwhile. It may be called more than once if the
	// transaction is retried.
	Committing func()
}

// SchedOutcome is, index for index, what became of a SchedBatch's reports
// and sends. A send's error is nil, ErrConflict, decide.ErrAlreadySentToUser,
// decide.ErrHRMismatch, or one wrapping decide.ErrCouldntSend.
type SchedOutcome struct {
	Reports []SchedReportOutcome
	Sends   []error
	// Workunits and Results hold the jobs and instances of the sends that
	// went through, by id, as the batch left them: what a reply describes.
	Workunits map[int64]row.Workunit
	Results   map[int64]row.Result
	// JobsToday counts the sends that went through per host and version:
	// not written (see SchedBatch.JobsToday).
	JobsToday []decide.HostAppVersionDelta
}

// schedBatchMaxRows bounds the rows of one multi-row statement's derived
// table; a larger batch is written in several statements.
const schedBatchMaxRows = 200

const schedLockWorkunits = `SELECT ` + WorkunitColumns + ` FROM workunit WHERE id IN (?) ORDER BY id FOR UPDATE`

// The whole row: a sent instance is described in the reply from it.
const schedLockResults = `SELECT ` + ResultColumns + ` FROM result WHERE id IN (?) ORDER BY id FOR UPDATE`

// A plain read: on one server every writer of workunit_user holds its
// job's lock, so it sees every row that can conflict, but on a Galera
// cluster the lock is one node's and another node's send can insert a row
// this read missed. What holds "one instance per user per job" is the
// primary key (workunitid, userid): the insert fails certification (1213)
// or, once the other row is applied here, with a duplicate key, and both
// re-run the batch (a 1213 in inTx, errRetryBatch in SchedulerCommit), whose
// read then sees the row.
const schedListWorkunitUsers = `SELECT workunitid, userid FROM workunit_user WHERE workunitid IN (?)`

type wuUser struct {
	WorkunitID int64 `db:"workunitid"`
	UserID     int64 `db:"userid"`
}

// SchedulerCommit records the writes of concurrent scheduler requests in one
// transaction with a few multi-row statements, and decides each row on its
// own:
//   - the jobs of every report and send are locked first, by id (the lock
//     order every program uses), then the instances, by id, and the sends'
//     workunit_user rows are read;
//   - from the locked rows, decide.Batch decides each report and send in
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
// The rules are decide.Batch's; an instance that is no longer as the request
// read it is ErrConflict here. An error means nothing was written.
func (s *Store) SchedulerCommit(ctx context.Context, b SchedBatch) (SchedOutcome, error) {
	var out SchedOutcome
	var err error
	for attempt := 0; ; attempt++ {
		err = s.inTx(ctx, func(tx *sqlx.Tx) error {
			var err error
			out, err = schedCommit(ctx, tx, b)
			if err == nil && b.Committing != nil {
				b.Committing()
			}
			return err
		})
		if !errors.Is(err, errRetryBatch) || attempt >= schedKeyRetries {
			break
		}
	}
	if err != nil {
		return SchedOutcome{}, fmt.Errorf("scheduler batch of %d reports, %d sends, %d hosts: %w",
			len(b.Reports), len(b.Sends), len(b.Hosts), err)
	}
	return out, nil
}

// schedCommit locks and reads the batch's rows, has decide.Batch decide
// every report and send on them, and writes the plan.
func schedCommit(ctx context.Context, tx *sqlx.Tx, b SchedBatch) (SchedOutcome, error) {
	in, err := schedRead(ctx, tx, b)
	if err != nil {
		return SchedOutcome{}, err
	}
	plan := decide.Batch(in)
	if err := schedWrite(ctx, tx, b, plan); err != nil {
		return SchedOutcome{}, err
	}
	out := SchedOutcome{Reports: plan.Reports, Sends: plan.Sends, Workunits: plan.SentWorkunits,
		Results: plan.SentResults, JobsToday: plan.JobsToday}
	for i := range out.Reports {
		if errors.Is(out.Reports[i].Err, decide.ErrChanged) {
			out.Reports[i].Err = ErrConflict
		}
	}
	for i, err := range out.Sends {
		if errors.Is(err, decide.ErrChanged) {
			out.Sends[i] = ErrConflict
		}
	}
	return out, nil
}

// schedRead locks the jobs of every report and send first, by id (the lock
// order every program uses), then the instances, by id, and reads the
// workunit_user rows of the sends' jobs: the three statements go to the
// server in one packet and come back as three result sets.
func schedRead(ctx context.Context, tx *sqlx.Tx, b SchedBatch) (decide.Input, error) {
	in := decide.Input{Reports: b.Reports, Sends: b.Sends}
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
	if len(wuIDs) == 0 {
		return in, nil
	}
	var rows []wuUser
	err := txSelectSets(ctx, tx, []selectSet{
		{schedLockWorkunits, uniq(wuIDs), &in.Workunits},
		{schedLockResults, uniq(resIDs), &in.Results},
		{schedListWorkunitUsers, uniq(sendWUs), &rows},
	})
	if err != nil {
		return in, err
	}
	in.SentTo = make([]decide.UserJob, len(rows))
	for i, r := range rows {
		in.SentTo[i] = decide.UserJob{WorkunitID: r.WorkunitID, UserID: r.UserID}
	}
	return in, nil
}

// schedWrite writes a plan: jobs, workunit_user rows, reported, sent and
// unsendable instances, hosts. Each conditional update still carries its
// condition, and a count that differs from the rows decided fails the
// whole batch.
func schedWrite(ctx context.Context, tx *sqlx.Tx, b SchedBatch, plan decide.Plan) error {
	if schedAfterRead != nil {
		schedAfterRead()
	}
	w := newStmtBatch(ctx, tx)
	w.updateRows(schedUpdateWorkunits, schedWorkunitRows(plan), -1)
	userRows := make([][]any, len(plan.UserJobs))
	for i, u := range plan.UserJobs {
		userRows[i] = []any{u.WorkunitID, u.UserID, u.ResultID}
	}
	w.insertRows(`INSERT INTO workunit_user (workunitid, userid, resultid) VALUES `, 3, userRows, "")
	reportRows := make([][]any, len(plan.ReportWrites))
	for i, r := range plan.ReportWrites {
		reportRows[i] = []any{r.ResultID, r.HostID, r.FromHostID, r.FromState, r.FromOutcome, r.Outcome, r.ClientState,
			r.ExitStatus, r.CPUTime, r.ElapsedTime, r.Now, []byte(r.StderrOut), []byte(r.XMLDocOut), r.ValidateState,
			r.ClaimedCredit, r.FileDeleteState}
	}
	w.updateRows(schedUpdateReports, reportRows, len(reportRows))
	if len(plan.ReportWrites) > 0 {
		w.throughput(ThroughputReported, plan.ReportWrites[0].Now, len(plan.ReportWrites))
	}
	sendRows := make([][]any, len(plan.SendWrites))
	for i, p := range plan.SendWrites {
		sendRows[i] = []any{p.ResultID, p.HostID, p.UserID, p.Now, p.ReportDeadline, p.AppVersionID, p.AppVersionNum,
			p.FlopsEstimate}
	}
	w.updateRows(schedUpdateSends, sendRows, len(sendRows))
	couldntRows := make([][]any, len(plan.CouldntSends))
	for i, c := range plan.CouldntSends {
		couldntRows[i] = []any{c.ResultID, c.Now}
	}
	w.updateRows(schedUpdateCouldntSend, couldntRows, len(couldntRows))
	if err := schedWriteHosts(w, b.Hosts, plan.Hosts); err != nil {
		return err
	}
	schedWriteHostAppVersions(w, mergeHostAppVersionDeltas(plan.HostAppVersions, b.JobsToday), b.DailyResultQuota)
	err := w.run()
	if isDuplicate(err) {
		return fmt.Errorf("%w: %w", errRetryBatch, err)
	}
	return err
}

// The job rows are locked and their new values computed from what the lock
// read: a trigger is LEAST(transition_time - 1, now), a wake LEAST(
// transition_time, deadline), as the single-row statements write them.
// mod_time always grows, so the row is in the batch's write set even when
// nothing else changes (see schedWorkunitRows).
var schedUpdateWorkunits = rowsUpdate{query: `UPDATE workunit w
SET w.transition_time = {tt}, w.hr_class = {hr}, w.min_quorum = {mq}, w.target_nresults = {tn},
w.mod_time = GREATEST(w.mod_time + 1, {now})
WHERE {keys}`, key: []string{"w.id"}, cols: []string{"id", "tt", "hr", "mq", "tn", "now"}}

// schedWorkunitRows are the job rows a plan writes: the jobs whose values
// changed, and every job an instance was sent of, whatever changed. The
// send's decisions were made on the job row locked, but that lock is one
// node's on a Galera cluster, which certifies only rows written: a send
// that left its job row alone (transition_time already before the
// deadline, as it is for a job due for transition) could commit beside a
// transitioner on another node that read the instance still unsent and
// moved transition_time past the new deadline, and the instance would
// never time out. Writing the job row makes the two conflict.
func schedWorkunitRows(plan decide.Plan) [][]any {
	var now int64
	for _, p := range plan.SendWrites {
		now = max(now, p.Now)
	}
	for _, r := range plan.ReportWrites {
		now = max(now, r.Now)
	}
	for _, c := range plan.CouldntSends {
		now = max(now, c.Now)
	}
	rows := make([][]any, 0, len(plan.Workunits)+len(plan.SentWorkunits))
	written := make(map[int64]bool, len(plan.Workunits))
	for _, w := range plan.Workunits {
		written[w.ID] = true
		rows = append(rows, []any{w.ID, w.TransitionTime, w.HRClass, w.MinQuorum, w.TargetNResults, now})
	}
	var sent []int64
	for id := range plan.SentWorkunits {
		if !written[id] {
			sent = append(sent, id)
		}
	}
	slices.Sort(sent) // the lock order, as every multi-row write keeps
	for _, id := range sent {
		w := plan.SentWorkunits[id]
		rows = append(rows, []any{w.ID, w.TransitionTime, w.HRClass, w.MinQuorum, w.TargetNResults, now})
	}
	return rows
}

// errRetryBatch means the batch met a row another node of a cluster
// committed after the batch's locked read (a workunit_user key): nothing
// was written, and a re-run reads the row and decides on it.
var errRetryBatch = errors.New("key conflict with a concurrent commit")

// schedKeyRetries bounds the re-runs after errRetryBatch: each one reads
// the rows the last conflict was about, so a second conflict needs yet
// another node's send of the same job to the same user.
const schedKeyRetries = 3

// schedAfterRead, when set (by a test), runs between a batch's locked read
// and its writes: where another node's write lands on a cluster.
var schedAfterRead func()

var schedUpdateReports = rowsUpdate{query: `UPDATE result r
SET r.hostid = {hostid}, r.server_state = ` + stateOver + `, r.outcome = {outcome}, r.client_state = {cs}, r.exit_status = {es},
r.cpu_time = {cpu}, r.elapsed_time = {el}, r.received_time = {now}, r.stderr_out = {se}, r.xml_doc_out = {xo},
r.validate_state = {vs}, r.claimed_credit = {cc}, r.mod_time = {now}, r.file_delete_state = {fds}
WHERE {keys} AND r.hostid = {fh} AND r.server_state = {fs} AND r.outcome = {fo}`,
	key: []string{"r.id"}, cols: []string{"id", "hostid", "fh", "fs", "fo", "outcome", "cs", "es", "cpu",
		"el", "now", "se", "xo", "vs", "cc", "fds"}}

var schedUpdateSends = rowsUpdate{query: `UPDATE result r
SET r.server_state = ` + stateInProgress + `, r.hostid = {hostid}, r.userid = {userid}, r.sent_time = {now},
r.report_deadline = {deadline}, r.app_version_id = {avid}, r.app_version_num = {avnum}, r.flops_estimate = {fe},
r.mod_time = {now}
WHERE {keys} AND r.server_state = ` + stateUnsent,
	key: []string{"r.id"}, cols: []string{"id", "hostid", "userid", "now", "deadline", "avid", "avnum", "fe"}}

var schedUpdateCouldntSend = rowsUpdate{query: `UPDATE result r
SET r.server_state = ` + stateOver + `, r.outcome = ` + outcomeCouldntSend + `, r.mod_time = {now}
WHERE {keys} AND r.server_state = ` + stateUnsent, key: []string{"r.id"}, cols: []string{"id", "now"}}

// The states as SQL literals, checked against package state by a test.
const (
	stateUnsent          = "2"
	stateInProgress      = "4"
	stateOver            = "5"
	outcomeCouldntSend   = "2"
	noTransition         = "2147483647"
	assimilateReady      = "1"
	validateInit         = "0"
	validateInconclusive = "4"
)

// Credit columns are the validator's; error_streak, consecutive_valid and
// avg_turnaround are relative updates, so concurrent batches never lose one.
// schedHostRPCSet sets a host's RPC columns and folds its reports into its
// counters; the host_info update sets the rest as well.
const schedHostRPCSet = `h.rpc_seqno = {seq}, h.rpc_time = {t}, h.last_ip_addr = {ip},
h.error_streak = h.error_streak + {errs}, h.consecutive_valid = IF({errs} > 0, 0, h.consecutive_valid),
h.avg_turnaround = IF({nt} = 0, h.avg_turnaround, IF(h.avg_turnaround > 0, h.avg_turnaround * {ta} + {tb}, {tc}))`

var (
	schedUpdateHostsRPC = rowsUpdate{query: "UPDATE host h SET " + schedHostRPCSet + "\nWHERE {keys}",
		key: []string{"h.id"}, cols: hostRPCCols}
	schedUpdateHostsInfo = rowsUpdate{query: "UPDATE host h SET " + schedHostRPCSet + `,
h.timezone = {tz}, h.domain_name = {dn}, h.host_cpid = {cpid}, h.p_ncpus = {nc}, h.p_vendor = {pv},
h.p_model = {pm}, h.p_fpops = {pf}, h.p_iops = {pi}, h.m_nbytes = {mn}, h.m_swap = {ms}, h.d_total = {dt},
h.d_free = {df}, h.os_name = {osn}, h.os_version = {osv}, h.on_frac = {onf}, h.active_frac = {af},
h.p_features = {pfe}, h.coprocs = {cop}, h.client_version = {cv}
WHERE {keys}`, key: []string{"h.id"}, cols: hostInfoCols}
)

var (
	hostRPCCols  = []string{"id", "seq", "t", "ip", "errs", "nt", "ta", "tb", "tc"}
	hostInfoCols = append(append([]string{}, hostRPCCols...), "tz", "dn", "cpid", "nc", "pv", "pm", "pf", "pi", "mn",
		"ms", "dt", "df", "osn", "osv", "onf", "af", "pfe", "cop", "cv")
)

// schedWriteHosts writes each host once: the last request's RPC columns, the
// last host_info that changed, and the reports' deltas.
func schedWriteHosts(w *stmtBatch, hosts []SchedHost, deltas map[int64]*decide.HostDelta) error {
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
			d = &decide.HostDelta{}
		}
		a, bb, c := d.TurnaroundFold()
		row := []any{id, m.last.RPCSeqno, m.last.RPCTime, m.last.LastIPAddr, d.Errors, len(d.Samples), a, bb, c}
		if m.info == nil {
			rpcRows = append(rpcRows, row)
			continue
		}
		h := m.info
		infoRows = append(infoRows, append(row, h.Timezone, h.DomainName, h.HostCPID, h.PNCPUs, h.PVendor, h.PModel,
			h.PFpops, h.PIops, h.MNbytes, h.MSwap, h.DTotal, h.DFree, h.OSName, h.OSVersion, h.OnFrac, h.ActiveFrac,
			h.PFeatures, h.Coprocs, h.ClientVersion))
	}
	w.updateRows(schedUpdateHostsRPC, rpcRows, -1)
	w.updateRows(schedUpdateHostsInfo, infoRows, -1)
	return nil
}

// errBatchCount means a multi-row update changed another number of rows
// than were decided under lock: something wrote them without the lock, and
// the whole batch is refused rather than half applied.
var errBatchCount = errors.New("multi-row update changed an unexpected number of rows")

// schedArg maps values a column cannot hold to what the single-row
// statements would have stored.
func schedArg(v any) any {
	if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
		return 0.0
	}
	return v
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

// selectSet is one read of txSelectSets: query has one IN (?) for list,
// and its rows are scanned into dest, a pointer to a slice. An empty list
// reads nothing.
type selectSet struct {
	query string
	list  []int64
	dest  any
}

// txSelectSets runs the reads in tx as one multi-statement query, one
// round trip, each read's rows its own result set.
func txSelectSets(ctx context.Context, tx *sqlx.Tx, sets []selectSet) error {
	var text strings.Builder
	var args []any
	var run []selectSet
	for _, s := range sets {
		if len(s.list) == 0 {
			continue
		}
		q, a, err := sqlx.In(s.query, s.list)
		if err != nil {
			return err
		}
		if text.Len() > 0 {
			text.WriteString(stmtSeparator)
		}
		text.WriteString(q)
		args = append(args, a...)
		run = append(run, s)
	}
	if len(run) == 0 {
		return nil
	}
	rows, err := tx.QueryContext(ctx, text.String(), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for i, s := range run {
		if i > 0 && !rows.NextResultSet() {
			return errors.Join(rows.Err(), fmt.Errorf("%d result sets of %d", i, len(run)))
		}
		// sqlx.StructScan maps the columns of each set anew (an sqlx.Rows
		// would keep the first set's mapping).
		if err := sqlx.StructScan(rows, s.dest); err != nil {
			return err
		}
	}
	return rows.Close()
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
