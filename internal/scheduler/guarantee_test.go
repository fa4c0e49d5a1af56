package scheduler

import (
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

// TestNeverTwoInstancesToOneUserEvenAfterItsInstanceFailed: the promise is
// one instance of a job per user ever, not one at a time. After the user's
// instance failed, neither the host that failed it nor another of the
// user's hosts gets the job's other instance; another user does.
func TestNeverTwoInstancesToOneUserEvenAfterItsInstanceFailed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	wu, ids := f.addJob("wu", job{instances: 2})
	// The walk starts at a random cache slot: either instance may go.
	sent := f.rpc(request{workSecs: 1e4, instances: 1})
	if len(sent.Results) != 1 {
		t.Fatalf("sending 1: got %v (%q)", resultNames(sent), messages(sent))
	}
	hostA, failed, other := sent.HostID, ids[0], ids[1]
	if sent.Results[0].Name == "wu_1" {
		failed, other = ids[1], ids[0]
	}
	f.now.Add(60)
	rep := f.rpc(request{hostID: hostA, results: []string{errorReport(sent.Results[0].Name)}})
	if !acked(rep, sent.Results[0].Name) {
		t.Fatalf("error report: acks %+v, want %s acked", rep.ResultAcks, sent.Results[0].Name)
	}
	if r := f.result(failed); r.ServerState != state.ServerOver || r.Outcome != state.OutcomeClientError {
		t.Fatalf("failed instance recorded as %v/%v, want over/client error", r.ServerState, r.Outcome)
	}

	for _, tc := range []struct {
		what string
		req  request
	}{
		{"the host whose instance failed", request{hostID: hostA, workSecs: 1000, instances: 1}},
		{"another host of the same user", request{workSecs: 1000, instances: 1}},
	} {
		rep := f.rpc(tc.req)
		if len(rep.Results) != 0 {
			t.Fatalf("%s asked for work: got %v, want nothing (the job was sent to this user before)", tc.what, resultNames(rep))
		}
		if !strings.Contains(messages(rep), "already been sent to your account") {
			t.Errorf("%s: messages %q, want the one-per-user reason", tc.what, messages(rep))
		}
	}
	if r := f.result(other); r.ServerState != state.ServerUnsent {
		t.Fatalf("second instance after the owner's hosts asked = %v, want still unsent", r.ServerState)
	}
	if n := f.cached(); n != 1 {
		t.Fatalf("cache slots present = %d, want the second instance left for other users", n)
	}

	bob := f.newUser("bob")
	rep = f.rpc(request{auth: bob.Authenticator, workSecs: 1000, instances: 1})
	if names := resultNames(rep); len(names) != 1 || names[0] != f.result(other).Name {
		t.Fatalf("another user's host: got %v, want [%s]", names, f.result(other).Name)
	}
	if n := f.count(`SELECT COUNT(*) FROM result WHERE workunitid = ? AND userid = ?`, wu, f.user.ID); n != 1 {
		t.Fatalf("instances of the job sent to %s = %d, want 1", f.user.Name, n)
	}
}

// TestRepeatedReportAfterValidationMovesNoCredit: a client whose ack was
// lost reports the result again, possibly after the validator granted its
// credit. The repeat is acked (so the client stops) and changes neither the
// instance, nor the job (no second trigger, so no second validation or
// assimilation), nor anyone's credit.
func TestRepeatedReportAfterValidationMovesNoCredit(t *testing.T) {
	t.Parallel()
	f := setup(t)
	wu, ids := f.addJob("wu", job{})
	host := f.sendTo(1)
	f.now.Add(60)
	if rep := f.rpc(request{hostID: host, results: []string{successReport("wu_0")}}); !acked(rep, "wu_0") {
		t.Fatalf("first report: acks %+v, want wu_0 acked", rep.ResultAcks)
	}
	// The transitioner asks for validation; the validator's write makes the
	// instance valid and canonical, credits its user and host, and hands
	// the job to the assimilator.
	if _, err := f.st.DB().ExecContext(f.ctx, `UPDATE workunit SET need_validate = 1 WHERE id = ?`, wu); err != nil {
		t.Fatal(err)
	}
	const credit = 7.5
	conflicts, err := f.st.WorkunitValidateBatch(f.ctx, store.WorkunitValidateBatchParams{Now: f.now.Load(),
		Jobs: []store.WorkunitValidateParams{{ID: wu, CanonicalResultID: ids[0], CanonicalCredit: credit,
			Results: []store.ResultValidation{{ID: ids[0], UserID: f.user.ID, HostID: host,
				ValidateState: state.ValidateValid, Outcome: state.OutcomeSuccess, GrantedCredit: credit}}}}})
	if err != nil || len(conflicts) > 0 {
		t.Fatalf("WorkunitValidateBatch = conflicts %v, %v", conflicts, err)
	}
	uc, hc := f.userHostCredit(host)
	if uc != credit || hc != credit {
		t.Fatalf("credit after validation = %g / %g, want %g / %g", uc, hc, credit, credit)
	}
	beforeResult, beforeJob := f.result(ids[0]), f.workunit(wu)

	f.now.Add(600)
	for _, report := range []string{successReport("wu_0"), errorReport("wu_0")} {
		rep := f.rpc(request{hostID: host, results: []string{report}})
		if !acked(rep, "wu_0") {
			t.Fatal("repeated report not acked: the client would report it forever")
		}
		if r := f.result(ids[0]); r != beforeResult {
			t.Fatalf("repeated report changed the instance:\n got %+v\nwant %+v", r, beforeResult)
		}
		if w := f.workunit(wu); w != beforeJob {
			t.Fatalf("repeated report changed the job:\n got %+v\nwant %+v", w, beforeJob)
		}
		if uc, hc := f.userHostCredit(host); uc != credit || hc != credit {
			t.Fatalf("credit after a repeated report = %g / %g, want still %g / %g", uc, hc, credit, credit)
		}
	}
}

// userHostCredit returns the total credit of the fixture's user and of host.
func (f *fixture) userHostCredit(host int64) (user, hostCredit float64) {
	f.t.Helper()
	if err := f.st.DB().GetContext(f.ctx, &user, `SELECT total_credit FROM user WHERE id = ?`, f.user.ID); err != nil {
		f.t.Fatal(err)
	}
	if err := f.st.DB().GetContext(f.ctx, &hostCredit, `SELECT total_credit FROM host WHERE id = ?`, host); err != nil {
		f.t.Fatal(err)
	}
	return user, hostCredit
}
