package scheduler

import (
	"bytes"
	"cmp"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/scheduler/decide"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

// maxBlob is the size of a BLOB column: longer text would make the update
// fail, and the client would report the result again forever.
const maxBlob = 65535

// asksWork reports whether req asks for work: some seconds of it, for the
// CPU or a coprocessor, and not told by its user to send none.
func asksWork(req *protocol.SchedulerRequest) bool {
	if req.DontSendWork != 0 {
		return false
	}
	if finite(req.WorkReqSeconds) > 0 || finite(req.CPUReqSecs) > 0 {
		return true
	}
	for _, c := range req.Coprocs.Resources() {
		if finite(c.ReqSecs) > 0 {
			return true
		}
	}
	return false
}

// needsHeld reports whether req needs its host's instances in progress:
// it reports, lists or asks for anything.
func needsHeld(req *protocol.SchedulerRequest) bool {
	return len(req.Results) > 0 || asksWork(req) || req.HasOtherResults || len(req.OtherResults) > 0
}

// listHeld reads the host's instances in progress once, when the request
// reports, lists or asks for anything: reports, aborts and resends are all
// decided from it. The list authenticate read with the user serves when it
// is of the request's host; nothing was written in between.
func (s *Service) listHeld(ctx context.Context, x *rpc) error {
	if !needsHeld(x.req) {
		return nil
	}
	held := x.preHeld
	if x.preHeldOf == 0 || x.preHeldOf != x.host.ID {
		var err error
		held, err = s.st.ResultListHostInProgress(ctx, x.host.ID, maxInProgressListed)
		if err != nil {
			return fmt.Errorf("%w: %w", errUnavailable, err)
		}
	}
	x.held = make(map[string]store.HostResult, len(held))
	for _, hr := range held {
		x.held[hr.Name] = hr
	}
	return nil
}

// hostAppVersions returns what the request's host has shown of each app
// version (host_app_version: runtime statistics, daily quota, jobs today),
// by version id, as the request found them: the rows authenticate read with
// the user when that read was of this host (no extra round trip), else
// read once now (a host that was just created, or renumbered), plus the
// jobs this scheduler sent the host that the rows do not count yet. Sends
// of this request are not counted in them.
func (s *Service) hostAppVersions(ctx context.Context, x *rpc) ([]row.HostAppVersion, error) {
	if x.havsRead {
		return x.havs, nil
	}
	havs := x.preHAV
	if x.preHeldOf == 0 || x.preHeldOf != x.host.ID {
		var err error
		if havs, err = s.st.HostAppVersionListByHost(ctx, x.host.ID); err != nil {
			return nil, fmt.Errorf("%w: %w", errUnavailable, err)
		}
	}
	x.havs, x.havsRead = s.commit.today.overlay(x.host.ID, havs), true
	return x.havs, nil
}

// pendingReport is a report waiting for its request's commit; a report
// decided without one (ignored, or failed) has only its name and outcome.
type pendingReport struct {
	name    string
	outcome string // metric outcome when decided already
	p       store.SchedReport
}

// prepareReports decides what each reported result amounts to and queues
// it for the request's commit. The results the host does not hold in
// progress (late, or on another host of the user) are read in one
// statement. Later decisions in this request (quarantine, trust) see the
// host as the reports will leave it.
func (s *Service) prepareReports(ctx context.Context, x *rpc) {
	reports, names := reportsToRead(x.req.Results, x.held)
	for _, i := range reports {
		x.reported[strings.TrimSpace(x.req.Results[i].Name)] = true
	}
	var byName map[string]store.ReportedResult
	var lookupErr error
	if len(names) > 0 {
		rows, err := s.st.ResultListReported(ctx, names)
		if err != nil {
			s.log.Error("look up reported results", "host_id", x.host.ID, "results", len(names), "error", err)
			lookupErr = err
		}
		byName = make(map[string]store.ReportedResult, len(rows))
		for _, r := range rows {
			byName[r.Name] = r
		}
	}
	for _, i := range reports {
		rr := &x.req.Results[i]
		pr := s.prepareReport(x, strings.TrimSpace(rr.Name), rr, byName, lookupErr)
		if pr.outcome == reportError {
			x.dbErr = true
		}
		x.reports = append(x.reports, pr)
	}
}

// reportsToRead returns the indexes of a request's reports to handle, each
// name once (reported twice in one request, the first is the one; a blank
// name is none), and the names to read by name: those the host does not
// hold in progress (held) that a result can have, at most
// store.MaxReportedNames.
func reportsToRead(results []protocol.ReportResult, held map[string]store.HostResult) (reports []int, names []string) {
	seen := map[string]bool{}
	for i := range results {
		name := strings.TrimSpace(results[i].Name)
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		reports = append(reports, i)
		if _, ok := held[name]; !ok && resultName(name) && len(names) < store.MaxReportedNames {
			names = append(names, name)
		}
	}
	return reports, names
}

// prepareReport checks one reported result (reportTarget), closes or
// checks its outputs, and decides what it amounts to (reportedOutcome).
func (s *Service) prepareReport(x *rpc, name string, rr *protocol.ReportResult, byName map[string]store.ReportedResult,
	lookupErr error) pendingReport {
	pr := pendingReport{name: name}
	r, refused, why := reportTarget(name, x.held, byName, lookupErr, x.host.ID, x.user.ID)
	if refused != "" {
		if why != whyBadName {
			s.log.Debug("report not recorded: "+why, "result", name, "host_id", x.host.ID, "result_id", r.ID,
				"result_host_id", r.HostID, "server_state", r.ServerState.String(), "outcome", r.Outcome.String())
		}
		pr.outcome = refused
		return pr
	}
	if r.HostID != x.host.ID {
		s.log.Info("result reported by another host of the same user: recorded as the reporting host's", "result_id", r.ID,
			"host_id", x.host.ID, "result_host_id", r.HostID, "user_id", x.user.ID)
	}
	outputs, _ := jobxml.ParseResult(r.XMLDocIn)
	// Every output is closed whatever the outcome: the result is over, and
	// its certificates must write nothing more. Not once the files are
	// marked for deletion: the file deleter may have run, and a closed
	// file made now would be left behind; they are only looked at then.
	var missing string
	var err error
	if r.FileDeleteState == state.FileDeleteInit {
		missing, err = s.closeOutputs(outputs, rr.FileInfos)
	} else {
		missing, err = s.missingOutput(outputs, rr.FileInfos)
	}
	if err != nil {
		// The upload directory cannot be read or written: a server fault,
		// not the host's. Not acked, so the host reports again later.
		s.log.Error("check reported outputs", "result_id", r.ID, "host_id", x.host.ID, "error", err)
		pr.outcome = reportError
		return pr
	}
	outcome, successIfDeleted := reportedOutcome(rr, r, missing)
	if successIfDeleted {
		s.log.Debug("result reported as success without its output", "result_id", r.ID, "host_id", x.host.ID,
			"file", missing)
	}
	pr.p = store.SchedReport{
		ResultID:         r.ID,
		WorkunitID:       r.WorkunitID,
		HostID:           x.host.ID,
		FromHostID:       r.HostID,
		Outcome:          outcome,
		SuccessIfDeleted: successIfDeleted,
		ClientState:      state.ClientState(clampInt32(int64(rr.State))),
		ExitStatus:       int(clampInt32(int64(rr.ExitStatus))),
		CPUTime:          finite(rr.FinalCPUTime),
		ElapsedTime:      finite(rr.FinalElapsedTime),
		StderrOut:        clip(rr.StderrOut, maxBlob),
		XMLDocOut:        outputDoc(rr.FileInfos, outputs),
		ClaimedCredit:    claimedCredit(rr.FinalCPUTime, rr.FinalElapsedTime, x.host.PFpops),
		Now:              x.now,
	}
	// Later decisions in this request see the host as the report will
	// leave it.
	var d decide.HostDelta
	d.Add(outcome, decide.Turnaround(r.SentTime, x.now))
	x.host = d.Apply(x.host)
	return pr
}

// Why reportTarget refuses a report.
const (
	whyBadName   = "no result can have this name"
	whyLookup    = "the reported results could not be read"
	whyUnknown   = "unknown result"
	whyNotOnHost = "not in progress on this user's hosts"
)

// reportTarget finds the instance a report names and decides whether the
// host may report it: the host's own instances in progress first (held),
// then those read by name (byName, unless lookupErr). An instance is
// recorded while IN_PROGRESS, and also after it timed out or was marked
// detached: a late result is still a result, and the transitioner and
// validator take it as it comes. It must be this host's, or, as BOINC
// allows it, another host's of the same user: a client restored from a
// backup reports under a new host id the tasks its old id was sent.
//
// It returns the instance, or the report's metric outcome instead
// (reportIgnored: acked, nothing changes; reportError: not acked, the host
// reports again) and why.
func reportTarget(name string, held map[string]store.HostResult, byName map[string]store.ReportedResult,
	lookupErr error, hostID, userID int64) (r store.ReportedResult, outcome, why string) {
	if !resultName(name) {
		return r, reportIgnored, whyBadName
	}
	if hr, ok := held[name]; ok {
		return store.ReportedResult{ID: hr.ID, Name: name, WorkunitID: hr.WorkunitID, HostID: hostID, UserID: userID,
			ServerState: state.ServerInProgress, Outcome: state.OutcomeInit, SentTime: hr.SentTime, XMLDocIn: hr.XMLDocIn,
			FileDeleteState: hr.FileDeleteState}, "", ""
	}
	if lookupErr != nil {
		return r, reportError, whyLookup
	}
	r, ok := byName[name]
	switch {
	case !ok:
		return r, reportIgnored, whyUnknown
	case !reportable(r, hostID, userID):
		return r, reportIgnored, whyNotOnHost
	}
	return r, "", ""
}

// resultName reports whether a result can be called name: the column holds
// 254 bytes of UTF-8.
func resultName(name string) bool {
	return len(name) <= 254 && utf8.ValidString(name)
}

// reportedOutcome is what a report of instance r amounts to: reportOutcome,
// but a success whose output missing ("" when none is) does not count is a
// CLIENT_ERROR. A late report after the job's files were marked for
// deletion is the success it was instead: the file deleter may have removed
// the output the host just uploaded, nothing will validate it (TOO_LATE),
// and it is not held against the host. successIfDeleted marks a
// CLIENT_ERROR that the commit records as a success should the instance
// time out and its files be marked by then (decide.Report).
func reportedOutcome(rr *protocol.ReportResult, r store.ReportedResult, missing string) (o state.Outcome,
	successIfDeleted bool) {
	o, clientErr := reportOutcome(rr)
	if clientErr || missing == "" {
		return o, false
	}
	if r.ServerState == state.ServerOver && r.FileDeleteState != state.FileDeleteInit {
		return o, false
	}
	return state.OutcomeClientError, true
}

// commitRound writes sends, with the request's reports and host row if
// they are not written yet, through the group committer, and acks the
// reports it recorded. An error means nothing was written.
//
// The rows of the sends that went through are kept in x for the reply.
func (s *Service) commitRound(ctx context.Context, x *rpc, sends []store.SchedSend) ([]error, error) {
	b := store.SchedBatch{Sends: sends, DailyResultQuota: s.opts.DailyResultQuota}
	var queued []int // x.reports indexes in b.Reports
	if !x.committed {
		for i, pr := range x.reports {
			if pr.outcome == "" {
				queued = append(queued, i)
				b.Reports = append(b.Reports, pr.p)
			}
		}
		if x.hostWrite != nil {
			b.Hosts = append(b.Hosts, *x.hostWrite)
		}
	}
	if len(b.Reports) == 0 && len(b.Sends) == 0 && len(b.Hosts) == 0 {
		x.committed = true
		s.ackReports(x)
		return nil, nil
	}
	out, err := s.commit.commit(ctx, b)
	if err != nil {
		if !x.committed {
			return nil, fmt.Errorf("%w: %w", errUnavailable, err)
		}
		return nil, err
	}
	for _, p := range sends {
		r, ok := out.Results[p.ResultID]
		if !ok {
			continue
		}
		if x.sentRows == nil {
			x.sentRows, x.sentJobs = map[int64]row.Result{}, map[int64]row.Workunit{}
		}
		x.sentRows[r.ID] = r
		x.sentJobs[p.WorkunitID] = out.Workunits[p.WorkunitID]
	}
	if !x.committed {
		x.committed = true
		for k, i := range queued {
			o := out.Reports[k]
			pr := &x.reports[i]
			pr.outcome = reportMetric(o)
			if o.Err == nil && o.Late {
				s.m.lateReports.Inc()
			}
			s.log.Debug("result reported", "result_id", pr.p.ResultID, "host_id", x.host.ID, "outcome", pr.outcome,
				"late", o.Late)
		}
		s.ackReports(x)
	}
	return out.Sends, nil
}

// reportMetric is the results_reported_total outcome of a report the commit
// decided.
func reportMetric(o store.SchedReportOutcome) string {
	switch {
	case o.Err != nil:
		// Changed since it was read: reported by a concurrent request, or
		// taken from the host.
		return reportIgnored
	case o.Outcome == state.OutcomeClientError:
		return reportClientError
	}
	return reportSuccess
}

// ackReports counts the request's reports and acks all but those that
// could not be recorded: the client keeps those and reports them again.
func (s *Service) ackReports(x *rpc) {
	for _, pr := range x.reports {
		s.m.resultsReported.WithLabelValues(pr.outcome).Inc()
		if pr.outcome != reportError {
			x.reply.ResultAcks = append(x.reply.ResultAcks, protocol.NameElement{Name: pr.name})
		}
	}
}

// reportable reports whether host hostID of user userID may report
// instance r: it is one of the user's hosts' (BOINC's "same user" rule), and
// in progress or over without a result (timed out or detached).
func reportable(r store.ReportedResult, hostID, userID int64) bool {
	if !usersHost(r.HostID, r.UserID, hostID, userID) {
		return false
	}
	return r.ServerState == state.ServerInProgress || (r.ServerState == state.ServerOver && decide.LateOutcome(r.Outcome))
}

// usersHost reports whether an instance on host onHost of user onUser is
// host hostID's of user userID to report or keep: it is on that host, or on
// another host of the same user (a client restored from a backup has a new
// host id).
func usersHost(onHost, onUser, hostID, userID int64) bool {
	return onHost == hostID || (onHost != 0 && onUser == userID)
}

// reportOutcome is BOINC's rule: success iff the client uploaded the outputs
// and the app exited 0. An upload that failed for good is still reported as
// uploaded by client 7.20 (PROTOCOL.md §8.5), with an error_msg in the file's
// entry, so that counts as an error too.
func reportOutcome(rr *protocol.ReportResult) (state.Outcome, bool) {
	if state.ClientState(rr.State) != state.ClientFilesUploaded || rr.ExitStatus != 0 {
		return state.OutcomeClientError, true
	}
	for _, f := range rr.FileInfos {
		if strings.TrimSpace(f.ErrorMsg) != "" {
			return state.OutcomeClientError, true
		}
	}
	return state.OutcomeSuccess, false
}

// closeOutputs closes every output file of a reported result
// (outputfile.Close), so no upload changes or adds to them once the report
// is recorded, and returns the name of the first that is not a finished
// output of the size the client reported; "" when all are. An optional
// output the client did not report (it reports only the files it uploaded,
// and skips an optional one the application did not write) need not be
// there: it is closed all the same, and absent for the daemons after.
func (s *Service) closeOutputs(outputs []jobxml.OutputFile, reported []protocol.ReportFileInfo) (string, error) {
	if s.opts.UploadDir == "" {
		return "", nil
	}
	nbytes := reportedSizes(reported)
	unfinished := ""
	for _, o := range outputs {
		path, err := fanout.Path(s.opts.UploadDir, o.Name, s.opts.Fanout)
		if err != nil {
			unfinished = cmp.Or(unfinished, o.Name) // no upload could have stored it
			continue
		}
		finished, size, err := outputfile.Close(path)
		if err != nil {
			return "", fmt.Errorf("output %s: %w", o.Name, err)
		}
		if _, ok := nbytes[o.Name]; !finished && !ok && o.Optional {
			continue
		}
		if n := nbytes[o.Name]; !finished || n > 0 && size != int64(n) {
			unfinished = cmp.Or(unfinished, o.Name)
		}
	}
	return unfinished, nil
}

// missingOutput returns the name of the first output file of the result
// that does not count: not in the upload directory, not finished (only a
// finished output is frozen for good; one merely present at the reported
// size may still be written), or of another size than the client
// reported; "" when all count. The client reports a result as uploaded
// even when an upload failed for good (PROTOCOL.md §8.5), and the
// validator must not be handed a success with nothing to check. An
// optional output the client did not report need not be there (see
// closeOutputs).
func (s *Service) missingOutput(outputs []jobxml.OutputFile, reported []protocol.ReportFileInfo) (string, error) {
	if s.opts.UploadDir == "" {
		return "", nil
	}
	nbytes := reportedSizes(reported)
	for _, o := range outputs {
		path, err := fanout.Path(s.opts.UploadDir, o.Name, s.opts.Fanout)
		if err != nil {
			return o.Name, nil // no upload could have stored it
		}
		fi, err := os.Stat(path)
		_, reportedByClient := nbytes[o.Name]
		absent := errors.Is(err, fs.ErrNotExist) || err == nil && !outputfile.Finished(fi.Mode())
		switch {
		case absent && o.Optional && !reportedByClient:
			continue
		case errors.Is(err, fs.ErrNotExist):
			return o.Name, nil
		case err != nil:
			return "", fmt.Errorf("output %s: %w", o.Name, err)
		case !outputfile.Finished(fi.Mode()):
			return o.Name, nil
		}
		if n := nbytes[o.Name]; n > 0 && fi.Size() != int64(n) {
			return o.Name, nil
		}
	}
	return "", nil
}

// reportedSizes maps each reported output file to the size the client
// reported for it.
func reportedSizes(reported []protocol.ReportFileInfo) map[string]float64 {
	nbytes := map[string]float64{}
	for _, f := range reported {
		nbytes[strings.TrimSpace(f.Name)] = finite(f.Nbytes)
	}
	return nbytes
}

// reportedFile is one uploaded output as stored in result.xml_doc_out.
type reportedFile struct {
	XMLName   xml.Name `xml:"file_info"`
	Name      string   `xml:"name"`
	Nbytes    float64  `xml:"nbytes"`
	MaxNbytes float64  `xml:"max_nbytes"`
	MD5Cksum  string   `xml:"md5_cksum,omitempty"`
	ErrorMsg  string   `xml:"error_msg,omitempty"`
}

// outputDoc is result.xml_doc_out: the reported <file_info> of each output
// file. Only the result's own outputs are kept (when its xml_doc_in names
// them), so a client cannot point the validator at someone else's files.
func outputDoc(reported []protocol.ReportFileInfo, outputs []jobxml.OutputFile) string {
	own := map[string]bool{}
	for _, o := range outputs {
		own[o.Name] = true
	}
	var b strings.Builder
	var one bytes.Buffer
	enc := xml.NewEncoder(&one) // one encoder (and its buffer) for every file
	for _, f := range reported {
		name := strings.TrimSpace(f.Name)
		if fanout.ValidName(name) != nil || (len(own) > 0 && !own[name]) {
			continue
		}
		one.Reset()
		err := enc.Encode(reportedFile{Name: name, Nbytes: finite(f.Nbytes), MaxNbytes: finite(f.MaxNbytes),
			MD5Cksum: clip(strings.TrimSpace(f.MD5Cksum), 64), ErrorMsg: clip(strings.TrimSpace(f.ErrorMsg), 1024)})
		if err != nil || b.Len()+one.Len()+1 > maxBlob {
			continue
		}
		b.Write(one.Bytes())
		b.WriteByte('\n')
	}
	return b.String()
}

// finite maps values a database column cannot hold (NaN, ±Inf) and
// negative times or sizes to 0.
func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0
	}
	return f
}

func clampInt32(v int64) int32 {
	return int32(max(min(v, math.MaxInt32), math.MinInt32))
}

// clip cuts s to at most n bytes, on a UTF-8 boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	// Drop a rune cut in half (at most UTFMax-1 trailing bytes).
	for i := 0; i < utf8.UTFMax-1 && len(s) > 0; i++ {
		if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size != 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}
