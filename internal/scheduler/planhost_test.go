package scheduler

import (
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
)

// hardwareRequest is a request from host hostID (0: new) with CPU
// features, client 7.20.2 and, unless coprocs is "-", that <coprocs>.
func hardwareRequest(f *fixture, hostID int64, seqno int, cpid, coprocs string) string {
	body := request{auth: f.user.Authenticator, hostID: hostID, seqno: seqno, cpid: cpid, ncpus: 8}.body()
	body = strings.Replace(body, "</host_info>", "    <p_features>fpu  sse2 avx2\tfma</p_features>\n</host_info>", 1)
	body = strings.Replace(body, "<rpc_seqno>", `<core_client_major_version>7</core_client_major_version>
    <core_client_minor_version>20</core_client_minor_version>
    <core_client_release>2</core_client_release>
    <rpc_seqno>`, 1)
	if coprocs != "-" {
		body = strings.Replace(body, "</scheduler_request>", coprocs+"</scheduler_request>", 1)
	}
	return body
}

const nvidiaCoprocs = `<coprocs>
<coproc_cuda>
   <count>1</count>
   <name>NVIDIA GeForce RTX 3070</name>
   <available_ram>8000000000</available_ram>
   <have_cuda>1</have_cuda>
   <req_secs>3600</req_secs>
   <req_instances>1</req_instances>
   <peak_flops>20000000000000</peak_flops>
   <cudaVersion>12020</cudaVersion>
   <drvVersion>53518</drvVersion>
   <major>8</major>
   <minor>6</minor>
</coproc_cuda>
</coprocs>
`

// The scheduler records what the host has: CPU features, client version
// and coprocessors (without the request's asks); a request without
// <coprocs> keeps them, one with an empty <coprocs> clears them.
func TestRecordHostHardware(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const cpid = "0a0b0c0d0e0f00112233445566778899"
	post := func(body string) {
		t.Helper()
		if code, out := f.post(body); code != 200 {
			t.Fatalf("POST /scheduler = %d %q", code, out)
		}
	}
	post(hardwareRequest(f, 0, 0, cpid, nvidiaCoprocs))
	var id int64
	if err := f.st.DB().QueryRowContext(f.ctx, `SELECT id FROM host WHERE host_cpid = ?`, storedHostCPID(cpid, f.user.EmailAddr)).Scan(&id); err != nil {
		t.Fatal(err)
	}
	h, err := f.st.HostGet(f.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if h.PFeatures != "fpu sse2 avx2 fma" || h.ClientVersion != 72002 {
		t.Errorf("new host: p_features %q client_version %d, want \"fpu sse2 avx2 fma\" and 72002", h.PFeatures, h.ClientVersion)
	}
	cs, err := protocol.DecodeCoprocs(h.Coprocs)
	if err != nil || len(cs) != 1 || cs[0].Type != protocol.ResourceNVIDIA || cs[0].PeakFlops != 2e13 || cs[0].DriverVersion != 53518 ||
		cs[0].ComputeCapability != 806 || cs[0].ReqSecs != 0 || strings.Contains(h.Coprocs, "ReqSecs") {
		t.Fatalf("new host: coprocs %q (%+v, %v), want the NVIDIA GPU without the request's asks", h.Coprocs, cs, err)
	}

	// No <coprocs>: what was stored stays.
	post(hardwareRequest(f, id, 1, cpid, "-"))
	if h2, _ := f.st.HostGet(f.ctx, id); h2.Coprocs != h.Coprocs || h2.RPCSeqno != 1 {
		t.Errorf("after a request without <coprocs>: coprocs %q seqno %d, want %q and 1", h2.Coprocs, h2.RPCSeqno, h.Coprocs)
	}
	// The GPU gone: none.
	post(hardwareRequest(f, id, 2, cpid, "<coprocs>\n</coprocs>\n"))
	if h3, _ := f.st.HostGet(f.ctx, id); h3.Coprocs != "" || h3.PFeatures != h.PFeatures {
		t.Errorf("after an empty <coprocs>: coprocs %q p_features %q, want none and unchanged features", h3.Coprocs, h3.PFeatures)
	}
}

func TestPlanHost(t *testing.T) {
	t.Parallel()
	stored := protocol.EncodeCoprocs([]protocol.Coproc{{Type: protocol.ResourceAMD, Count: 2, PeakFlops: 5e12}})
	h := row.Host{UserID: 3, OSName: "Linux Debian", OSVersion: "6.1.0", PVendor: "AuthenticAMD", PModel: "Ryzen",
		PFeatures: "sse2 avx2", PNCPUs: 8, PFpops: 4e9, MNbytes: 16e9, ClientVersion: 72002, Coprocs: stored}

	// No request: what the row says.
	ph := planHost(h, nil)
	if ph.NCPUs != 8 || ph.MemBytes != 16e9 || ph.UserID != 3 || ph.PFeatures != "sse2 avx2" || ph.ClientVersion != 72002 ||
		ph.PFpops != 4e9 || ph.OSVersion != "6.1.0" || len(ph.Coprocs) != 1 || ph.Coprocs[0].Type != protocol.ResourceAMD {
		t.Errorf("planHost(row) = %+v", ph)
	}
	// The request's coprocessors, with their asks, win over the stored.
	req := &protocol.SchedulerRequest{Coprocs: &protocol.Coprocs{NVIDIA: &protocol.CoprocNVIDIA{Count: 1, PeakFlops: 1e13, ReqSecs: 60}}}
	if ph := planHost(h, req); len(ph.Coprocs) != 1 || ph.Coprocs[0].Type != protocol.ResourceNVIDIA || ph.Coprocs[0].ReqSecs != 60 {
		t.Errorf("planHost with <coprocs> = %+v, want the request's NVIDIA GPU with its asks", ph.Coprocs)
	}
	// A request without <coprocs>: the stored ones.
	if ph := planHost(h, &protocol.SchedulerRequest{}); len(ph.Coprocs) != 1 || ph.Coprocs[0].Type != protocol.ResourceAMD {
		t.Errorf("planHost without <coprocs> = %+v, want the stored AMD GPU", ph.Coprocs)
	}
	// The volunteer's working preferences limit CPUs and memory; a venue's
	// values are not the working ones.
	req = &protocol.SchedulerRequest{}
	req.WorkingGlobalPreferences.Inner = `<global_preferences>
<venue name="home"><max_ncpus_pct>10</max_ncpus_pct></venue>
<max_ncpus_pct>50.000000</max_ncpus_pct>
<ram_max_used_busy_pct>50</ram_max_used_busy_pct>
<ram_max_used_idle_pct>90</ram_max_used_idle_pct>
</global_preferences>`
	if ph := planHost(h, req); ph.NCPUs != 4 || ph.MemBytes != 0.9*16e9 {
		t.Errorf("planHost with preferences: %d CPUs, %g bytes; want 4 and %g", ph.NCPUs, ph.MemBytes, 0.9*16e9)
	}
	req.WorkingGlobalPreferences.Inner = `<max_ncpus_pct>1</max_ncpus_pct><ram_max_used_busy_pct>50</ram_max_used_busy_pct>`
	if ph := planHost(h, req); ph.NCPUs != 1 || ph.MemBytes != 16e9 {
		t.Errorf("planHost with 1%% of CPUs and one RAM preference: %d CPUs, %g bytes; want 1 and all", ph.NCPUs, ph.MemBytes)
	}
	// Stored text that does not decode is no coprocessor.
	h.Coprocs = "{"
	if ph := planHost(h, nil); ph.Coprocs != nil {
		t.Errorf("planHost with bad stored coprocs = %+v, want none", ph.Coprocs)
	}
}

func TestFeaturesFitTheColumn(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("avx512f ", 200) // 1600 bytes
	got := features(long)
	if len(got) > maxPFeatures || strings.HasSuffix(got, " ") || !strings.HasSuffix(got, "avx512f") {
		t.Errorf("features(1600 bytes) = %d bytes ending %q, want at most %d of whole words", len(got), got[max(len(got)-10, 0):], maxPFeatures)
	}
	if got := features(strings.Repeat("x", 2000)); got != "" {
		t.Errorf("features(one 2000-byte word) = %d bytes, want none", len(got))
	}
	if got := features(" a\tb\n c "); got != "a b c" {
		t.Errorf("features = %q, want \"a b c\"", got)
	}
}

func TestClientVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		maj, minor, rel, want int
	}{{7, 20, 2, 72002}, {8, 0, 4, 80004}, {0, 0, 0, 0}, {7, 100, 0, 0}, {-1, 2, 3, 0}} {
		req := &protocol.SchedulerRequest{CoreClientMajorVersion: tc.maj, CoreClientMinorVersion: tc.minor, CoreClientRelease: tc.rel}
		if got := clientVersion(req); got != tc.want {
			t.Errorf("clientVersion(%d.%d.%d) = %d, want %d", tc.maj, tc.minor, tc.rel, got, tc.want)
		}
	}
}
