package scheduler

import (
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/row"
)

func TestRPCSeqnoGoingBackMakesNewHost(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const cpid = "00112233445566778899aabbccddeeff"
	a := f.rpc(request{cpid: cpid}).HostID
	for seq := 0; seq <= 2; seq++ {
		// seqno 0 twice: a reply lost before the client counted it.
		if rep := f.rpc(request{hostID: a, seqno: seq, cpid: cpid}); rep.HostID != 0 {
			t.Fatalf("RPC with hostid %d seqno %d: reply hostid = %d, want none (same host)", a, seq, rep.HostID)
		}
	}
	if h, _ := f.st.HostGet(f.ctx, a); h.RPCSeqno != 2 {
		t.Fatalf("host %d rpc_seqno = %d, want 2", a, h.RPCSeqno)
	}

	// A copy of the client from when its seqno was 1.
	b := f.rpc(request{hostID: a, seqno: 1, cpid: cpid}).HostID
	if b == 0 || b == a {
		t.Fatalf("RPC with hostid %d and seqno 1 < stored 2: reply hostid = %d, want a new host", a, b)
	}
	hb, err := f.st.HostGet(f.ctx, b)
	if err != nil || hb.UserID != f.user.ID || hb.RPCSeqno != 0 {
		t.Fatalf("clone's new host = %+v, %v; want user %d, rpc_seqno 0", hb, err, f.user.ID)
	}
	if ha, _ := f.st.HostGet(f.ctx, a); ha.RPCSeqno != 2 {
		t.Fatalf("original host after the clone's RPC: rpc_seqno %d, want 2 (untouched)", ha.RPCSeqno)
	}
	// The clone, now with its own id and seqno restarted, is that host.
	if rep := f.rpc(request{hostID: b, seqno: 0, cpid: "ffeeddccbbaa99887766554433221100"}); rep.HostID != 0 {
		t.Fatalf("clone's next RPC with hostid %d seqno 0: reply hostid = %d, want none", b, rep.HostID)
	}
	// And the original goes on as before.
	if rep := f.rpc(request{hostID: a, seqno: 3, cpid: cpid}); rep.HostID != 0 {
		t.Fatalf("original's RPC with seqno 3: reply hostid = %d, want none", rep.HostID)
	}
	if n := f.count(`SELECT COUNT(*) FROM host`); n != 2 {
		t.Fatalf("hosts = %d, want 2", n)
	}
}

func TestHostComingBackWithoutIDKeepsItsID(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const cpid = "2f5059bf76b7983d47a6084575a9b1cc"
	a := f.rpc(request{cpid: cpid, ncpus: 2}).HostID
	f.rpc(request{hostID: a, seqno: 5, cpid: cpid})

	// Detached and attached again: no host id, same cpid.
	f.now.Add(3600)
	rep := f.rpc(request{cpid: cpid, ncpus: 4})
	if rep.HostID != a {
		t.Fatalf("RPC with hostid 0 and the cpid of host %d: reply hostid = %d, want %d", a, rep.HostID, a)
	}
	h, _ := f.st.HostGet(f.ctx, a)
	if h.RPCSeqno != 0 || h.PNCPUs != 4 || h.RPCTime != t0+3600 {
		t.Fatalf("host after coming back = %+v, want rpc_seqno 0, p_ncpus 4, rpc_time %d", h, t0+3600)
	}
	// An id that names no host, with the cpid: the same host too.
	if rep := f.rpc(request{hostID: 99999, cpid: cpid}); rep.HostID != a {
		t.Fatalf("RPC with unknown hostid and the cpid of host %d: reply hostid = %d, want %d", a, rep.HostID, a)
	}
	if n := f.count(`SELECT COUNT(*) FROM host`); n != 1 {
		t.Fatalf("hosts = %d, want 1", n)
	}

	// Another computer of the same user, and another user's computer with
	// the same cpid (cpids are client-chosen, so not proof of anything):
	// new hosts.
	if rep := f.rpc(request{cpid: "99999999999999999999999999999999"}); rep.HostID == 0 || rep.HostID == a {
		t.Fatalf("RPC with another cpid: reply hostid = %d, want a new host", rep.HostID)
	}
	bob := f.newUser("bob")
	rep = f.rpc(request{auth: bob.Authenticator, cpid: cpid})
	if rep.HostID == 0 || rep.HostID == a {
		t.Fatalf("bob's RPC with alice's cpid: reply hostid = %d, want a new host", rep.HostID)
	}
	if h, _ := f.st.HostGet(f.ctx, rep.HostID); h.UserID != bob.ID {
		t.Fatalf("bob's host = %+v, want userid %d", h, bob.ID)
	}
	if h, _ := f.st.HostGet(f.ctx, a); h.UserID != f.user.ID {
		t.Fatalf("alice's host after bob's RPC = %+v", h)
	}
}

func TestForeignHostIDDoesNotReuseByCPID(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const cpid = "2f5059bf76b7983d47a6084575a9b1cc"
	a := f.rpc(request{cpid: cpid}).HostID
	bob := f.newUser("bob")
	bobs := f.rpc(request{auth: bob.Authenticator, cpid: cpid}).HostID
	// Bob names alice's host: he gets a host of his own even though he has
	// one with this cpid, as BOINC does for an inconsistent id.
	rep := f.rpc(request{auth: bob.Authenticator, hostID: a, cpid: cpid})
	if rep.HostID == 0 || rep.HostID == a || rep.HostID == bobs {
		t.Fatalf("bob naming alice's host %d: reply hostid = %d, want a new host (not %d or %d)", a, rep.HostID, a, bobs)
	}
}

func TestReplyHeaderFields(t *testing.T) {
	t.Parallel()
	f := setup(t, func(o *Options) {
		o.NextRPCDelay = 90 * time.Minute
		o.ReportImmediately = true
	})
	f.addJob("wua", job{})
	rep := f.rpc(request{workSecs: 100, instances: 1})
	if rep.MasterURL != "http://127.0.0.1:8080/" {
		t.Errorf("master_url = %q, want the URL base with a slash", rep.MasterURL)
	}
	if rep.NextRPCDelay != 5400 {
		t.Errorf("next_rpc_delay = %v, want 5400", rep.NextRPCDelay)
	}
	if rep.HostID == 0 || rep.UserID != f.user.ID || rep.UserCreateTime != 5 || rep.HostCreateTime != t0 {
		t.Errorf("hostid %d userid %d user_create_time %d host_create_time %d, want a host, user %d, 5, %d",
			rep.HostID, rep.UserID, rep.UserCreateTime, rep.HostCreateTime, f.user.ID, t0)
	}
	if len(rep.Results) != 1 || rep.Results[0].ReportImmediately == nil {
		t.Fatalf("results = %+v, want one with <report_immediately/>", rep.Results)
	}

	// Defaults: no next_rpc_delay, results without report_immediately.
	g := setup(t)
	g.addJob("wua", job{})
	code, body := g.post(request{auth: g.user.Authenticator, workSecs: 100, instances: 1}.body())
	if code != 200 || strings.Contains(body, "next_rpc_delay") || strings.Contains(body, "report_immediately") ||
		!strings.Contains(body, "<result>") {
		t.Fatalf("reply with defaults = %d, want a result and neither next_rpc_delay nor report_immediately:\n%s", code, body)
	}
}

// TestImportedHostComingBackWithoutIDKeepsItsID: a host imported from a
// BOINC project holds the cpid as BOINC's scheduler stored it (the md5 of
// the client's cpid and the user's e-mail address); its client, attached
// again and so without its host id, still gets that host back.
func TestImportedHostComingBackWithoutIDKeepsItsID(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const cpid = "6a1f0e0f3c8d4b2aa9e1d3c5b7f90123"
	imported, err := f.st.HostInsert(f.ctx, row.Host{CreateTime: t0 - 86400, UserID: f.user.ID, RPCSeqno: 40,
		HostCPID: storedHostCPID(cpid, f.user.EmailAddr)})
	if err != nil {
		t.Fatal(err)
	}
	if rep := f.rpc(request{cpid: cpid}); rep.HostID != imported {
		t.Fatalf("RPC with hostid 0 and the cpid of imported host %d: reply hostid = %d, want %d", imported, rep.HostID, imported)
	}
	// Another user quoting the cpid gets a host of his own.
	bob := f.newUser("bob")
	if rep := f.rpc(request{auth: bob.Authenticator, cpid: cpid}); rep.HostID == 0 || rep.HostID == imported {
		t.Fatalf("bob's RPC with the imported host's cpid: reply hostid = %d, want a new host", rep.HostID)
	}
	if n := f.count(`SELECT COUNT(*) FROM host`); n != 2 {
		t.Fatalf("hosts = %d, want 2 (the imported one and bob's)", n)
	}
}
