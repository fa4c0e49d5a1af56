package scheduler

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/state"
)

func names(els []protocol.NameElement) []string {
	var out []string
	for _, e := range els {
		out = append(out, strings.TrimSpace(e.Name))
	}
	slices.Sort(out)
	return out
}

func TestUnneededResultsAreAborted(t *testing.T) {
	t.Parallel()
	f := setup(t)
	wu := map[string]int64{}
	res := map[string]int64{}
	for _, n := range []string{"wua", "wub", "wuc", "wud", "wue", "wug", "wuh"} {
		j := job{}
		if n == "wuc" {
			j.delayBound = 100
		}
		id, ids := f.addJob(n, j)
		wu[n], res[n] = id, ids[0]
	}
	rep := f.rpc(request{workSecs: 1e5, instances: 7, ncpus: 8})
	if len(rep.Results) != 7 {
		t.Fatalf("sending 7: got %v (%q)", resultNames(rep), messages(rep))
	}
	host := rep.HostID
	// Another host (of another user) holds wuf_0.
	f.addJob("wuf", job{})
	bob := f.newUser("bob")
	if rep := f.rpc(request{auth: bob.Authenticator, workSecs: 1e4, instances: 1}); len(rep.Results) != 1 {
		t.Fatalf("sending wuf_0 to bob: got %v (%q)", resultNames(rep), messages(rep))
	}
	// wuh_0 was reported and recorded; its ack was lost.
	f.now.Add(200)
	if rep := f.rpc(request{hostID: host, results: []string{successReport("wuh_0")}}); !acked(rep, "wuh_0") {
		t.Fatalf("report of wuh_0 not acked: %+v", rep.ResultAcks)
	}

	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := f.st.DB().ExecContext(f.ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// wub_0 was cancelled, wuc_0 timed out (its deadline is past), wud's
	// job has its canonical result, wue's job failed for good.
	exec(`UPDATE result SET server_state = ?, outcome = ? WHERE id = ?`, state.ServerOver, state.OutcomeDidntNeed, res["wub"])
	exec(`UPDATE result SET server_state = ?, outcome = ? WHERE id = ?`, state.ServerOver, state.OutcomeNoReply, res["wuc"])
	exec(`UPDATE workunit SET canonical_resultid = ? WHERE id = ?`, res["wud"]+1000, wu["wud"])
	exec(`UPDATE workunit SET error_mask = ? WHERE id = ?`, state.ErrTooManyErrorResults, wu["wue"])
	// wug_0 is reported in the same request that lists it (the client
	// reports a batch and still lists the rest).
	before := f.result(res["wua"])

	rep = f.rpc(request{hostID: host, ncpus: 8,
		results: []string{successReport("wug_0")},
		other:   []string{"wua_0", "wub_0", "wuc_0", "wud_0", "wue_0", "wuf_0", "wug_0", "wuh_0", "nosuch", "wub_0"}})
	if got, want := names(rep.ResultAborts), []string{"nosuch", "wub_0", "wuc_0", "wuf_0"}; !slices.Equal(got, want) {
		t.Errorf("result_abort = %v, want %v", got, want)
	}
	if got, want := names(rep.ResultAbortsINS), []string{"wud_0", "wue_0"}; !slices.Equal(got, want) {
		t.Errorf("result_abort_if_not_started = %v, want %v", got, want)
	}
	if !acked(rep, "wug_0") {
		t.Errorf("wug_0 reported and listed: acks = %+v, want it acked", rep.ResultAcks)
	}
	if len(rep.Results) != 0 {
		t.Errorf("results sent = %v, want none (wua_0 is listed, so not lost)", resultNames(rep))
	}
	if r := f.result(res["wua"]); r != before {
		t.Errorf("wua_0 changed:\n got %+v\nwant %+v", r, before)
	}
	for kind, want := range map[string]float64{abortNow: 4, abortIfNotStarted: 2} {
		if got := testutil.ToFloat64(f.svc.m.resultsAborted.WithLabelValues(kind)); got != want {
			t.Errorf("results_aborted_total{kind=%q} = %v, want %v", kind, got, want)
		}
	}

	// Asked again, the host is told the same about wud_0 and wue_0 (it may
	// have run them meanwhile) and nothing about wua_0.
	rep = f.rpc(request{hostID: host, ncpus: 8, other: []string{"wua_0", "wud_0", "wue_0"}})
	if len(rep.ResultAborts) != 0 || len(rep.Results) != 0 ||
		!slices.Equal(names(rep.ResultAbortsINS), []string{"wud_0", "wue_0"}) {
		t.Fatalf("listing wua_0, wud_0, wue_0: aborts %v, if_not_started %v, results %v; want only wud_0 and wue_0 if not started",
			names(rep.ResultAborts), names(rep.ResultAbortsINS), resultNames(rep))
	}
}
