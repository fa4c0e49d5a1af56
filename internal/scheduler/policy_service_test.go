package scheduler

import (
	"math"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

const (
	linuxIntel = "Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz [Family 6 Model 158 Stepping 10]"
	winAMD     = "AMD Ryzen 9 5950X 16-Core Processor [Family 25 Model 33 Stepping 0]"
)

// setAppPolicy changes the fixture app's policies and republishes the
// tables, as the feeder would.
func (f *fixture) setAppPolicy(column string, value any) {
	f.t.Helper()
	if _, err := f.st.DB().ExecContext(f.ctx, `UPDATE app SET `+column+` = ? WHERE id = ?`, value, f.appID); err != nil {
		f.t.Fatal(err)
	}
	f.publishTables()
}

// setHost sets a host's reliability columns, which only the validator and
// the scheduler's reports change.
func (f *fixture) setHost(id int64, consecutiveValid, errorStreak int, avgTurnaround float64) {
	f.t.Helper()
	if _, err := f.st.DB().ExecContext(f.ctx, `UPDATE host SET consecutive_valid = ?, error_streak = ?, avg_turnaround = ?
		WHERE id = ?`, consecutiveValid, errorStreak, avgTurnaround, id); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) host(id int64) row.Host {
	f.t.Helper()
	h, err := f.st.HostGet(f.ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return h
}

func TestHomogeneousRedundancy(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.setAppPolicy("homogeneous_redundancy", hrFine)
	wu, ids := f.addJob("wu", job{instances: 3})

	a := f.rpc(request{workSecs: 100, instances: 1, osName: "Linux Ubuntu", vendor: "GenuineIntel", model: linuxIntel})
	if names := resultNames(a); len(names) != 1 {
		t.Fatalf("first host: got %v (%q), want one instance", names, messages(a))
	}
	linux := hrClass(hrFine, "Linux Ubuntu", "GenuineIntel", linuxIntel)
	if got := f.workunit(wu).HRClass; got != linux {
		t.Fatalf("hr_class after the first send = %d, want the Linux/Intel class %d", got, linux)
	}

	// Another user's Windows/AMD computer: the cache still says class 0,
	// the send finds the job bound, and the slot goes back for others.
	bob := f.newUser("bob")
	b := f.rpc(request{auth: bob.Authenticator, workSecs: 100, instances: 1, osName: "Microsoft Windows 11",
		vendor: "AuthenticAMD", model: winAMD})
	if len(b.Results) != 0 || !strings.Contains(messages(b), "another type") {
		t.Fatalf("host of another class: got %v, messages %q; want nothing and the HR message", resultNames(b), messages(b))
	}
	if got := testutil.ToFloat64(f.svc.m.claims.WithLabelValues(claimHRMismatch)); got != 1 {
		t.Fatalf("cache_claims_total{hr_mismatch} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(f.svc.m.noWork.WithLabelValues(reasonHR)); got != 1 {
		t.Fatalf("no_work_total{homogeneous_redundancy} = %v, want 1", got)
	}
	if n := f.cached(); n != 2 {
		t.Fatalf("cache slots present after the mismatch = %d, want the 2 unsent instances", n)
	}

	// The feeder refills with the class known: refused without a claim.
	for i := 0; i < f.feeder.NSlots(); i++ {
		if cl, ok := f.feeder.Claim(i, 1, t0); ok {
			f.feeder.Release(cl)
			e := cl.Entry
			e.HRClass = int32(linux)
			f.fill(e)
		}
	}
	claimsBefore := testutil.ToFloat64(f.svc.m.claims.WithLabelValues(claimHRMismatch))
	b = f.rpc(request{auth: bob.Authenticator, hostID: b.HostID, seqno: 1, workSecs: 100, instances: 1,
		osName: "Microsoft Windows 11", vendor: "AuthenticAMD", model: winAMD})
	if len(b.Results) != 0 || testutil.ToFloat64(f.svc.m.claims.WithLabelValues(claimHRMismatch)) != claimsBefore {
		t.Fatalf("host of another class with the class cached: got %v, want nothing and no claim", resultNames(b))
	}

	// A computer of the same class, another user's: it gets one.
	carol := f.newUser("carol")
	c := f.rpc(request{auth: carol.Authenticator, workSecs: 100, instances: 1, osName: "Linux Debian",
		vendor: "GenuineIntel", model: linuxIntel})
	if len(c.Results) != 1 {
		t.Fatalf("host of the job's class: got %v (%q), want one instance", resultNames(c), messages(c))
	}
	if n := f.count(`SELECT COUNT(*) FROM result WHERE workunitid = ? AND server_state = ?`, wu, state.ServerInProgress); n != 2 {
		t.Fatalf("instances in progress = %d, want 2", n)
	}
	_ = ids
}

// drawSource is a settable spot-check draw.
type drawSource struct{ bits atomic.Uint64 }

func (d *drawSource) set(v float64) { d.bits.Store(math.Float64bits(v)) }
func (d *drawSource) draw() float64 { return math.Float64frombits(d.bits.Load()) }

func TestAdaptiveReplication(t *testing.T) {
	t.Parallel()
	var d drawSource
	f := setup(t, func(o *Options) { o.ARTrustValid = 10; o.ARSpotCheck = 0.1; o.Rand = d.draw })
	f.setAppPolicy("adaptive_replication", 1)

	// An untrusted (new) host: the job is replicated.
	d.set(0.99)
	wu1, _ := f.addJob("wu1", job{replicationQuorum: 2})
	host := f.sendTo(1)
	if w := f.workunit(wu1); w.MinQuorum != 2 || w.TargetNResults != 2 || w.TransitionTime != t0 {
		t.Fatalf("job sent to an untrusted host = quorum %d target %d transition %d; want 2, 2 and woken (%d)",
			w.MinQuorum, w.TargetNResults, w.TransitionTime, t0)
	}

	// Trusted: 100 valid in a row, so a spot-check chance of 0.1.
	f.setHost(host, 100, 0, 0)
	wu2, _ := f.addJob("wu2", job{replicationQuorum: 2})
	rep := f.rpc(request{hostID: host, seqno: 1, workSecs: 100, instances: 1, other: []string{"wu1_0"}})
	if len(rep.Results) != 1 {
		t.Fatalf("trusted host: got %v (%q)", resultNames(rep), messages(rep))
	}
	if w := f.workunit(wu2); w.MinQuorum != 1 || w.TargetNResults != 1 {
		t.Fatalf("job sent to a trusted host, draw 0.99 = quorum %d target %d; want 1, 1 (alone)", w.MinQuorum, w.TargetNResults)
	}

	// The same host, spot-checked.
	d.set(0.05)
	wu3, _ := f.addJob("wu3", job{replicationQuorum: 3})
	rep = f.rpc(request{hostID: host, seqno: 2, workSecs: 100, instances: 1, other: []string{"wu1_0", "wu2_0"}})
	if len(rep.Results) != 1 {
		t.Fatalf("trusted host again: got %v (%q)", resultNames(rep), messages(rep))
	}
	if w := f.workunit(wu3); w.MinQuorum != 3 || w.TargetNResults != 3 {
		t.Fatalf("job spot-checked (draw 0.05 < 0.1) = quorum %d target %d; want 3, 3", w.MinQuorum, w.TargetNResults)
	}
	for label, want := range map[string]float64{"true": 2, "false": 1} {
		if got := testutil.ToFloat64(f.svc.m.arSends.WithLabelValues(label)); got != want {
			t.Errorf("ar_sends_total{replicated=%q} = %v, want %v", label, got, want)
		}
	}
}

func TestQuarantinedHostGetsOneTask(t *testing.T) {
	t.Parallel()
	f := setup(t, func(o *Options) { o.QuarantineStreak = 3 })
	for _, n := range []string{"wua", "wub", "wuc"} {
		f.addJob(n, job{})
	}
	first := f.rpc(request{ncpus: 4, cpid: "0123456789abcdef0123456789abcdef"})
	f.setHost(first.HostID, 0, 3, 0)
	rep := f.rpc(request{hostID: first.HostID, seqno: 1, ncpus: 4, workSecs: 1e4, instances: 4})
	if len(rep.Results) != 1 {
		t.Fatalf("quarantined 4-CPU host asking for 4: got %v, want one task", resultNames(rep))
	}
	rep = f.rpc(request{hostID: first.HostID, seqno: 2, ncpus: 4, workSecs: 1e4, instances: 4, other: resultNames(rep)})
	if len(rep.Results) != 0 || !strings.Contains(messages(rep), "too many errors") {
		t.Fatalf("quarantined host holding one task: got %v, messages %q; want nothing and the quarantine message",
			resultNames(rep), messages(rep))
	}
	if got := testutil.ToFloat64(f.svc.m.noWork.WithLabelValues(reasonQuarantined)); got != 1 {
		t.Fatalf("no_work_total{quarantined} = %v, want 1", got)
	}
}

func TestReliableOnlyInstances(t *testing.T) {
	t.Parallel()
	f := setup(t, func(o *Options) { o.ARTrustValid = 5 })
	_, ids := f.addJob("tail", job{sendFlags: row.SendReliableOnly, delayBound: 3600})
	rep := f.rpc(request{workSecs: 100, instances: 1})
	if len(rep.Results) != 0 || !strings.Contains(messages(rep), "return valid results quickly") {
		t.Fatalf("new host and a reliable-only instance: got %v, messages %q; want nothing and the reliable-only message",
			resultNames(rep), messages(rep))
	}
	host := rep.HostID
	// Trusted but slow: a turnaround of more than a quarter of the bound.
	f.setHost(host, 5, 0, 901)
	rep = f.rpc(request{hostID: host, seqno: 1, workSecs: 100, instances: 1})
	if len(rep.Results) != 0 {
		t.Fatalf("slow trusted host: got %v, want nothing", resultNames(rep))
	}
	if got := testutil.ToFloat64(f.svc.m.noWork.WithLabelValues(reasonReliableOnly)); got != 2 {
		t.Fatalf("no_work_total{reliable_only} = %v, want 2", got)
	}
	f.setHost(host, 5, 0, 900)
	rep = f.rpc(request{hostID: host, seqno: 2, workSecs: 100, instances: 1})
	if len(rep.Results) != 1 || f.result(ids[0]).HostID != host {
		t.Fatalf("fast trusted host: got %v (%q), want the reliable-only instance", resultNames(rep), messages(rep))
	}
}

func TestLateReportIsRecorded(t *testing.T) {
	t.Parallel()
	f := setup(t)
	wu, a := f.addJob("wua", job{})
	host := f.sendTo(1)
	// The transitioner timed it out an hour later.
	f.now.Add(4000)
	if _, err := f.st.DB().ExecContext(f.ctx, `UPDATE result SET server_state = ?, outcome = ? WHERE id = ?`,
		state.ServerOver, state.OutcomeNoReply, a[0]); err != nil {
		t.Fatal(err)
	}
	f.now.Add(1000)
	rep := f.rpc(request{hostID: host, seqno: 1, results: []string{successReport("wua_0")}})
	if !acked(rep, "wua_0") {
		t.Fatalf("late report not acked: %+v", rep.ResultAcks)
	}
	r := f.result(a[0])
	wantClaim := 12.5 * 1e9 * 200 / 86400e9
	if r.ServerState != state.ServerOver || r.Outcome != state.OutcomeSuccess || r.ValidateState != state.ValidateInit ||
		r.ReceivedTime != t0+5000 || math.Abs(r.ClaimedCredit-wantClaim) > 1e-12 {
		t.Fatalf("late success recorded as %+v, want OVER/SUCCESS, validate INIT, received %d, claimed %v", r, t0+5000, wantClaim)
	}
	if got := f.workunit(wu).TransitionTime; got > t0+5000 {
		t.Fatalf("transition_time after a late report = %d, want at most now", got)
	}
	if h := f.host(host); h.AvgTurnaround != 5000 {
		t.Fatalf("avg_turnaround after a 5000 s result = %v, want 5000", h.AvgTurnaround)
	}
	for outcome, want := range map[string]float64{reportSuccess: 1, reportIgnored: 0} {
		if got := testutil.ToFloat64(f.svc.m.resultsReported.WithLabelValues(outcome)); got != want {
			t.Errorf("results_reported_total{%s} = %v, want %v", outcome, got, want)
		}
	}
	if got := testutil.ToFloat64(f.svc.m.lateReports); got != 1 {
		t.Fatalf("late_reports_total = %v, want 1", got)
	}
}

func TestSuccessForFailedJobIsTooLate(t *testing.T) {
	t.Parallel()
	f := setup(t)
	wu, a := f.addJob("wua", job{})
	host := f.sendTo(1)
	if _, err := f.st.DB().ExecContext(f.ctx, `UPDATE workunit SET error_mask = ? WHERE id = ?`, state.ErrTooManyErrorResults, wu); err != nil {
		t.Fatal(err)
	}
	rep := f.rpc(request{hostID: host, seqno: 1, results: []string{successReport("wua_0")}})
	if !acked(rep, "wua_0") {
		t.Fatalf("report not acked: %+v", rep.ResultAcks)
	}
	if r := f.result(a[0]); r.Outcome != state.OutcomeSuccess || r.ValidateState != state.ValidateTooLate {
		t.Fatalf("success for a failed job = %+v, want SUCCESS, validate_state TOO_LATE", r)
	}
}

func TestReportedErrorGrowsErrorStreak(t *testing.T) {
	t.Parallel()
	f := setup(t, func(o *Options) { o.QuarantineStreak = 3 })
	f.addJob("wua", job{})
	host := f.sendTo(1)
	f.setHost(host, 7, 2, 0)
	for _, n := range []string{"wub", "wuc"} {
		f.addJob(n, job{})
	}
	// The error is the host's third in a row: quarantined at once, so the
	// same request gets one task, not two.
	rep := f.rpc(request{hostID: host, seqno: 1, ncpus: 4, workSecs: 1e4, instances: 2, results: []string{errorReport("wua_0")}})
	if h := f.host(host); h.ErrorStreak != 3 || h.ConsecutiveValid != 0 {
		t.Fatalf("host after a reported error = error_streak %d consecutive_valid %d; want 3, 0", h.ErrorStreak, h.ConsecutiveValid)
	}
	if len(rep.Results) != 1 {
		t.Fatalf("host quarantined by this request's report: got %v, want one task", resultNames(rep))
	}
}

func TestReattachedClientDetachesItsResults(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const cpid = "2f5059bf76b7983d47a6084575a9b1cc"
	wua, a := f.addJob("wua", job{})
	wub, b := f.addJob("wub", job{})
	host := f.rpc(request{cpid: cpid, workSecs: 100, instances: 2}).HostID
	if r := f.result(a[0]); r.HostID != host {
		t.Fatalf("setup: wua_0 = %+v, want sent to host %d", r, host)
	}

	// Attached anew: no host id, the same cpid, no tasks.
	f.now.Add(600)
	f.addJob("wuc", job{})
	rep := f.rpc(request{cpid: cpid, workSecs: 100, instances: 1, hasOther: true})
	if rep.HostID != host {
		t.Fatalf("reattached client: reply hostid %d, want its old host %d", rep.HostID, host)
	}
	for _, id := range []int64{a[0], b[0]} {
		if r := f.result(id); r.ServerState != state.ServerOver || r.Outcome != state.OutcomeClientDetached || r.ReceivedTime != t0+600 {
			t.Fatalf("result %d of the reattached client = %+v, want OVER/CLIENT_DETACHED", id, r)
		}
	}
	for _, wu := range []int64{wua, wub} {
		if got := f.workunit(wu).TransitionTime; got != t0+600 {
			t.Fatalf("job %d transition_time = %d, want woken at %d", wu, got, t0+600)
		}
	}
	if names := resultNames(rep); len(names) != 1 || names[0] != "wuc_0" {
		t.Fatalf("reattached client got %v, want only the new wuc_0 (detached work is not resent)", names)
	}
	if got := testutil.ToFloat64(f.svc.m.detached); got != 2 {
		t.Fatalf("results_detached_total = %v, want 2", got)
	}

	// Coming back by cpid while still listing its task: nothing detached.
	f.now.Add(60)
	f.rpc(request{cpid: cpid, other: []string{"wuc_0"}})
	if r := f.result(idOf(f, "wuc_0")); r.ServerState != state.ServerInProgress {
		t.Fatalf("wuc_0 after a reattach listing it = %+v, want still in progress", r)
	}
}

// idOf returns the id of the result called name.
func idOf(f *fixture, name string) int64 {
	f.t.Helper()
	var id int64
	if err := f.st.DB().GetContext(f.ctx, &id, `SELECT id FROM result WHERE name = ?`, name); err != nil {
		f.t.Fatalf("result %q: %v", name, err)
	}
	return id
}

func TestForeignHostIDDetachesTheReplacedHost(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const cpid = "2f5059bf76b7983d47a6084575a9b1cc"
	alice := f.rpc(request{cpid: cpid}).HostID
	bob := f.newUser("bob")
	_, ids := f.addJob("wua", job{})
	bobs := f.rpc(request{auth: bob.Authenticator, cpid: cpid, workSecs: 100, instances: 1}).HostID
	if r := f.result(ids[0]); r.HostID != bobs {
		t.Fatalf("setup: wua_0 = %+v, want on bob's host %d", r, bobs)
	}
	// Bob's client now names alice's host: it gets a new host, and bob's
	// old host with this cpid is replaced.
	rep := f.rpc(request{auth: bob.Authenticator, hostID: alice, cpid: cpid})
	if rep.HostID == 0 || rep.HostID == alice || rep.HostID == bobs {
		t.Fatalf("bob naming alice's host: reply hostid %d, want a new host", rep.HostID)
	}
	if r := f.result(ids[0]); r.ServerState != state.ServerOver || r.Outcome != state.OutcomeClientDetached {
		t.Fatalf("bob's replaced host's task = %+v, want OVER/CLIENT_DETACHED", r)
	}
}

func TestDetachedResultReportedLaterIsRecorded(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const cpid = "2f5059bf76b7983d47a6084575a9b1cc"
	_, a := f.addJob("wua", job{})
	host := f.rpc(request{cpid: cpid, workSecs: 100, instances: 1}).HostID
	f.rpc(request{cpid: cpid}) // looked detached
	if r := f.result(a[0]); r.Outcome != state.OutcomeClientDetached {
		t.Fatalf("setup: %+v, want detached", r)
	}
	// It had the task after all.
	rep := f.rpc(request{hostID: host, seqno: 1, cpid: cpid, results: []string{successReport("wua_0")}})
	if !acked(rep, "wua_0") {
		t.Fatal("report of a detached task not acked")
	}
	if r := f.result(a[0]); r.ServerState != state.ServerOver || r.Outcome != state.OutcomeSuccess {
		t.Fatalf("detached task reported = %+v, want OVER/SUCCESS", r)
	}
}

func TestUnsendableJobIsCouldntSend(t *testing.T) {
	t.Parallel()
	f := setup(t)
	wu, ids := f.addJob("bad", job{instances: 2, xmlDoc: "<workunit><file_info><name>../../etc/passwd</name></file_info></workunit>"})
	_, good := f.addJob("good", job{})
	rep := f.rpc(request{workSecs: 1000, instances: 2})
	if names := resultNames(rep); len(names) != 1 || names[0] != "good_0" {
		t.Fatalf("work request with an unsendable job cached: got %v, want only good_0", names)
	}
	for _, id := range ids {
		if r := f.result(id); r.ServerState != state.ServerOver || r.Outcome != state.OutcomeCouldntSend || r.HostID != 0 {
			t.Fatalf("unsendable instance = %+v, want OVER/COULDNT_SEND on no host", r)
		}
	}
	if got := f.workunit(wu).TransitionTime; got > t0 {
		t.Fatalf("unsendable job transition_time = %d, want woken (at most %d)", got, t0)
	}
	if got := testutil.ToFloat64(f.svc.m.claims.WithLabelValues(claimCouldntSend)); got != 2 {
		t.Fatalf("cache_claims_total{couldnt_send} = %v, want 2", got)
	}
	if n := f.cached(); n != 0 {
		t.Fatalf("cache slots present = %d, want 0 (the unsendable entry released)", n)
	}
	if f.result(good[0]).ServerState != state.ServerInProgress {
		t.Fatal("good_0 not sent")
	}
}
