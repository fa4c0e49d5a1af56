package scheduler

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/scheduler/decide"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

// Which instance a report names, and whether the host may report it.
func TestReportTarget(t *testing.T) {
	t.Parallel()
	const host, otherHost, user, otherUser = 5, 6, 7, 8
	held := map[string]store.HostResult{"held_0": {ID: 1, WorkunitID: 11, SentTime: 100, XMLDocIn: "<in/>",
		FileDeleteState: state.FileDeleteInit}}
	read := func(hostID, userID int64, ss state.ServerState, o state.Outcome) store.ReportedResult {
		return store.ReportedResult{ID: 2, Name: "read_0", WorkunitID: 12, HostID: hostID, UserID: userID,
			ServerState: ss, Outcome: o}
	}
	lookupFailed := errors.New("database down")
	for _, tt := range []struct {
		name      string
		report    string
		row       store.ReportedResult // as read by name
		lookupErr error
		wantID    int64
		want      string // metric outcome when refused
		why       string
	}{
		{name: "held by the host", report: "held_0", wantID: 1},
		{name: "held by the host, lookup of the others failed", report: "held_0", lookupErr: lookupFailed, wantID: 1},
		{name: "in progress on the host, read by name", report: "read_0",
			row: read(host, user, state.ServerInProgress, state.OutcomeInit), wantID: 2},
		{name: "another host of the same user", report: "read_0",
			row: read(otherHost, user, state.ServerInProgress, state.OutcomeInit), wantID: 2},
		{name: "late: timed out", report: "read_0", row: read(host, user, state.ServerOver, state.OutcomeNoReply),
			wantID: 2},
		{name: "late: marked detached", report: "read_0",
			row: read(host, user, state.ServerOver, state.OutcomeClientDetached), wantID: 2},
		{name: "already reported", report: "read_0", row: read(host, user, state.ServerOver, state.OutcomeSuccess),
			want: reportIgnored, why: whyNotOnHost},
		{name: "cancelled", report: "read_0", row: read(host, user, state.ServerOver, state.OutcomeDidntNeed),
			want: reportIgnored, why: whyNotOnHost},
		{name: "never sent", report: "read_0", row: read(0, 0, state.ServerUnsent, state.OutcomeInit),
			want: reportIgnored, why: whyNotOnHost},
		{name: "another user's host", report: "read_0",
			row: read(otherHost, otherUser, state.ServerInProgress, state.OutcomeInit), want: reportIgnored,
			why: whyNotOnHost},
		{name: "on no host, of this user", report: "read_0", row: read(0, user, state.ServerInProgress, state.OutcomeInit),
			want: reportIgnored, why: whyNotOnHost},
		{name: "unknown name", report: "nobody_0", want: reportIgnored, why: whyUnknown},
		{name: "lookup failed: not acked", report: "read_0", lookupErr: lookupFailed, want: reportError, why: whyLookup},
		{name: "name too long", report: strings.Repeat("x", 255), want: reportIgnored, why: whyBadName},
		{name: "name not UTF-8", report: "r\xff_0", want: reportIgnored, why: whyBadName},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			byName := map[string]store.ReportedResult{}
			if tt.row.ID != 0 {
				byName[tt.row.Name] = tt.row
			}
			if tt.lookupErr != nil {
				byName = nil
			}
			r, outcome, why := reportTarget(tt.report, held, byName, tt.lookupErr, host, user)
			if outcome != tt.want || why != tt.why || (outcome == "" && r.ID != tt.wantID) {
				t.Fatalf("reportTarget = instance %d, %q (%s); want %d, %q (%s)", r.ID, outcome, why, tt.wantID, tt.want,
					tt.why)
			}
		})
	}
	// A held instance is described as the host holds it.
	r, _, _ := reportTarget("held_0", held, nil, nil, host, user)
	want := store.ReportedResult{ID: 1, Name: "held_0", WorkunitID: 11, HostID: host, UserID: user,
		ServerState: state.ServerInProgress, Outcome: state.OutcomeInit, SentTime: 100, XMLDocIn: "<in/>"}
	if r != want {
		t.Fatalf("held instance = %+v, want %+v", r, want)
	}
}

// What a report amounts to, given the output files the upload directory
// has for it.
func TestReportedOutcome(t *testing.T) {
	t.Parallel()
	uploaded := protocol.ReportResult{State: int(state.ClientFilesUploaded)}
	failed := protocol.ReportResult{State: int(state.ClientFilesUploaded), ExitStatus: 1}
	inProgress := store.ReportedResult{ServerState: state.ServerInProgress}
	late := store.ReportedResult{ServerState: state.ServerOver, Outcome: state.OutcomeNoReply}
	lateMarked := late
	lateMarked.FileDeleteState = state.FileDeleteReady
	inProgressMarked := inProgress
	inProgressMarked.FileDeleteState = state.FileDeleteReady
	for _, tt := range []struct {
		name             string
		rr               protocol.ReportResult
		r                store.ReportedResult
		missing          string
		want             state.Outcome
		successIfDeleted bool
	}{
		{"success with its outputs", uploaded, inProgress, "", state.OutcomeSuccess, false},
		{"error", failed, inProgress, "", state.OutcomeClientError, false},
		{"error without its outputs", failed, inProgress, "r_0", state.OutcomeClientError, false},
		{"success without its output: an error, unless the files turn out marked", uploaded, inProgress, "r_0",
			state.OutcomeClientError, true},
		{"late success without its output, files not yet marked", uploaded, late, "r_0", state.OutcomeClientError, true},
		{"success without its output, in progress after its job's files were marked", uploaded, inProgressMarked, "r_0",
			state.OutcomeClientError, true},
		{"late success without its output, files marked for deletion: the success it was", uploaded, lateMarked, "r_0",
			state.OutcomeSuccess, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o, sid := reportedOutcome(&tt.rr, tt.r, tt.missing)
			if o != tt.want || sid != tt.successIfDeleted {
				t.Fatalf("reportedOutcome = %s, successIfDeleted %v; want %s, %v", o, sid, tt.want, tt.successIfDeleted)
			}
		})
	}
}

// What the request's report does to the host for the rest of the request:
// the same as the commit writes.
func TestHostAfterReport(t *testing.T) {
	t.Parallel()
	h := row.Host{ErrorStreak: 2, ConsecutiveValid: 9, AvgTurnaround: 1000}
	for _, tt := range []struct {
		name       string
		outcome    state.Outcome
		sent, now  int64
		want       row.Host
		turnaround float64
	}{
		{"error: streak grows, valid run ends", state.OutcomeClientError, 100, 600,
			row.Host{ErrorStreak: 3, AvgTurnaround: 1000}, 500},
		{"success: turnaround folded in", state.OutcomeSuccess, 100, 1100,
			row.Host{ErrorStreak: 2, ConsecutiveValid: 9, AvgTurnaround: 1000}, 1000},
		{"success: faster", state.OutcomeSuccess, 100, 200,
			row.Host{ErrorStreak: 2, ConsecutiveValid: 9, AvgTurnaround: 730}, 100},
		{"success never sent: no sample", state.OutcomeSuccess, 0, 600, h, 0},
		{"success reported before its send (clock back): no sample", state.OutcomeSuccess, 700, 600, h, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ta := decide.Turnaround(tt.sent, tt.now)
			if ta != tt.turnaround {
				t.Fatalf("Turnaround(%d, %d) = %v, want %v", tt.sent, tt.now, ta, tt.turnaround)
			}
			var d decide.HostDelta
			d.Add(tt.outcome, ta)
			got := d.Apply(h)
			if got.ErrorStreak != tt.want.ErrorStreak || got.ConsecutiveValid != tt.want.ConsecutiveValid ||
				math.Abs(got.AvgTurnaround-tt.want.AvgTurnaround) > 1e-9 {
				t.Fatalf("host after the report = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// What becomes of each task the host holds, from what its request says.
func TestHeldFate(t *testing.T) {
	t.Parallel()
	const now = 1000
	task := store.HostResult{Name: "t_0", ReportDeadline: now + 1}
	for _, tt := range []struct {
		name                       string
		hr                         store.HostResult
		reported, listed, complete bool
		want                       taskFate
	}{
		{"listed", task, false, true, true, taskKept},
		{"not listed, list incomplete", task, false, false, false, taskKept},
		{"reported (its report failed)", task, true, false, true, taskReported},
		{"lost", task, false, false, true, taskLost},
		{"lost and past its deadline", store.HostResult{ReportDeadline: now}, false, false, true, taskDropped},
		{"lost, job done", store.HostResult{ReportDeadline: now + 1, JobDone: true}, false, false, true, taskDropped},
		{"listed, job done: kept (aborted if not started)", store.HostResult{ReportDeadline: now + 1, JobDone: true},
			false, true, true, taskKept},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := heldFate(tt.hr, tt.reported, tt.listed, tt.complete, now); got != tt.want {
				t.Fatalf("heldFate = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestRequestRules(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name                string
		req                 protocol.SchedulerRequest
		asks, needs, listed bool
	}{
		{name: "nothing", req: protocol.SchedulerRequest{}},
		{name: "seconds of work", req: protocol.SchedulerRequest{WorkReqSeconds: 10}, asks: true, needs: true},
		{name: "CPU seconds", req: protocol.SchedulerRequest{CPUReqSecs: 10}, asks: true, needs: true},
		{name: "work, but told to send none", req: protocol.SchedulerRequest{WorkReqSeconds: 10, DontSendWork: 1}},
		{name: "NaN seconds", req: protocol.SchedulerRequest{WorkReqSeconds: math.NaN()}},
		{name: "negative seconds", req: protocol.SchedulerRequest{WorkReqSeconds: -5}},
		{name: "reports only", req: protocol.SchedulerRequest{Results: []protocol.ReportResult{{Name: "r_0"}}},
			needs: true},
		{name: "complete list of tasks", req: protocol.SchedulerRequest{HasOtherResults: true}, needs: true,
			listed: true},
		{name: "list with reports left unread", req: protocol.SchedulerRequest{HasOtherResults: true, ReportsLeft: 1},
			needs: true},
		{name: "tasks listed without the list element",
			req: protocol.SchedulerRequest{OtherResults: []protocol.OtherResult{{Name: "r_0"}}}, needs: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := asksWork(&tt.req); got != tt.asks {
				t.Errorf("asksWork = %v, want %v", got, tt.asks)
			}
			if got := needsHeld(&tt.req); got != tt.needs {
				t.Errorf("needsHeld = %v, want %v", got, tt.needs)
			}
			if got := completeList(&tt.req); got != tt.listed {
				t.Errorf("completeList = %v, want %v", got, tt.listed)
			}
		})
	}
}

// What a send the commit refused means for its cache slot and the walk.
func TestRefusalOf(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want refusal
	}{
		{decide.ErrAlreadySentToUser, refusal{claim: claimOnePerUser, keep: true, reason: reasonOnePerUser, skipJob: true}},
		{decide.ErrHRMismatch, refusal{claim: claimHRMismatch, keep: true, reason: reasonHR, hrBound: true}},
		{fmt.Errorf("result 1: %w: %w", decide.ErrCouldntSend, errors.New("bad")), refusal{claim: claimCouldntSend}},
		{store.ErrConflict, refusal{claim: claimConflict}},
	} {
		t.Run(tt.err.Error(), func(t *testing.T) {
			t.Parallel()
			if got := refusalOf(tt.err); got != tt.want {
				t.Fatalf("refusalOf(%v) = %+v, want %+v", tt.err, got, tt.want)
			}
		})
	}
}

func TestReportMetric(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		o    store.SchedReportOutcome
		want string
	}{
		{store.SchedReportOutcome{Outcome: state.OutcomeSuccess}, reportSuccess},
		{store.SchedReportOutcome{Outcome: state.OutcomeSuccess, Late: true}, reportSuccess},
		{store.SchedReportOutcome{Outcome: state.OutcomeClientError}, reportClientError},
		{store.SchedReportOutcome{Err: store.ErrConflict}, reportIgnored},
	} {
		if got := reportMetric(tt.o); got != tt.want {
			t.Errorf("reportMetric(%+v) = %q, want %q", tt.o, got, tt.want)
		}
	}
}

// Adaptive replication: only for an app that uses it, and then by the
// host's trust (replicationProbability).
func TestReplicates(t *testing.T) {
	t.Parallel()
	ar := row.App{AdaptiveReplication: true}
	trusted := row.Host{ConsecutiveValid: 1000}
	for _, tt := range []struct {
		name  string
		app   row.App
		host  row.Host
		quar  bool
		draw  float64
		want  bool
		draws int
	}{
		{name: "app without adaptive replication: never, nothing drawn", app: row.App{}, host: row.Host{}, want: false},
		{name: "new host: always", app: ar, host: row.Host{}, draw: 0.99, want: true, draws: 1},
		{name: "trusted host: not replicated", app: ar, host: trusted, draw: 0.5, want: false, draws: 1},
		{name: "trusted host: spot-checked", app: ar, host: trusted, draw: 0.05, want: true, draws: 1},
		{name: "quarantined host: always", app: ar, host: trusted, quar: true, draw: 0.99, want: true, draws: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := 0
			draw := func() float64 { n++; return tt.draw }
			if got := replicates(tt.app, tt.host, 10, 0.1, tt.quar, draw); got != tt.want || n != tt.draws {
				t.Fatalf("replicates = %v after %d draws, want %v after %d", got, n, tt.want, tt.draws)
			}
		})
	}
}

// What the host is told of a task it lists and does not hold in progress
// here.
func TestAbortKind(t *testing.T) {
	t.Parallel()
	const host, otherHost, user, otherUser = 5, 6, 7, 8
	on := func(hostID, userID int64, ss state.ServerState, o state.Outcome) store.ResultByName {
		return store.ResultByName{Name: "r_0", HostID: hostID, UserID: userID, ServerState: ss, Outcome: o}
	}
	jobDone := on(otherHost, user, state.ServerInProgress, state.OutcomeInit)
	jobDone.CanonicalResultID = 3
	jobFailed := on(otherHost, user, state.ServerInProgress, state.OutcomeInit)
	jobFailed.ErrorMask = state.ErrTooManyErrorResults
	for _, tt := range []struct {
		name  string
		r     store.ResultByName
		found bool
		want  string
	}{
		{"unknown to the server", store.ResultByName{}, false, abortNow},
		{"another user's", on(otherHost, otherUser, state.ServerInProgress, state.OutcomeInit), true, abortNow},
		{"never sent", on(0, 0, state.ServerUnsent, state.OutcomeInit), true, abortNow},
		{"on no host, of this user", on(0, user, state.ServerInProgress, state.OutcomeInit), true, abortNow},
		{"in progress on another host of the user, job needed", on(otherHost, user, state.ServerInProgress,
			state.OutcomeInit), true, ""},
		{"in progress, job done", jobDone, true, abortIfNotStarted},
		{"in progress, job failed", jobFailed, true, abortIfNotStarted},
		{"timed out", on(host, user, state.ServerOver, state.OutcomeNoReply), true, abortNow},
		{"cancelled", on(host, user, state.ServerOver, state.OutcomeDidntNeed), true, abortNow},
		{"detached", on(host, user, state.ServerOver, state.OutcomeClientDetached), true, abortNow},
		{"finished and recorded: success", on(host, user, state.ServerOver, state.OutcomeSuccess), true, ""},
		{"finished and recorded: error", on(host, user, state.ServerOver, state.OutcomeClientError), true, ""},
		{"finished and recorded: invalid", on(host, user, state.ServerOver, state.OutcomeValidateError), true, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := abortKind(tt.r, tt.found, host, user); got != tt.want {
				t.Fatalf("abortKind = %q, want %q", got, tt.want)
			}
		})
	}
}

// Which of a request's reports are handled, and which are read by name.
func TestReportsToRead(t *testing.T) {
	t.Parallel()
	held := map[string]store.HostResult{"held_0": {ID: 1}}
	rep := func(names ...string) []protocol.ReportResult {
		var out []protocol.ReportResult
		for _, n := range names {
			out = append(out, protocol.ReportResult{Name: n})
		}
		return out
	}
	many := make([]string, store.MaxReportedNames+1)
	for i := range many {
		many[i] = fmt.Sprintf("r_%d", i)
	}
	for _, tt := range []struct {
		name        string
		results     []protocol.ReportResult
		wantReports []int
		wantNames   []string
	}{
		{"none", nil, nil, nil},
		{"held: not read", rep("held_0"), []int{0}, nil},
		{"not held: read", rep("late_0"), []int{0}, []string{"late_0"}},
		{"twice: the first is the one", rep("a_0", "b_0", " a_0 "), []int{0, 1}, []string{"a_0", "b_0"}},
		{"blank names are none", rep("", "  ", "a_0"), []int{2}, []string{"a_0"}},
		{"a name no result can have: handled, not read", rep(strings.Repeat("x", 255)), []int{0}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reports, names := reportsToRead(tt.results, held)
			if fmt.Sprint(reports) != fmt.Sprint(tt.wantReports) || fmt.Sprint(names) != fmt.Sprint(tt.wantNames) {
				t.Fatalf("reportsToRead = %v, %q; want %v, %q", reports, names, tt.wantReports, tt.wantNames)
			}
		})
	}
	reports, names := reportsToRead(rep(many...), held)
	if len(reports) != len(many) || len(names) != store.MaxReportedNames {
		t.Fatalf("%d reports: %d handled, %d read; want all handled, %d read", len(many), len(reports), len(names),
			store.MaxReportedNames)
	}
}
