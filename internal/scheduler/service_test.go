package scheduler

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/shmcache"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var uploadKey = sync.OnceValues(keys.Generate)

const (
	platformName = "x86_64-pc-linux-gnu"
	t0           = int64(1_800_000_000)
)

// fixture is a project with one app on one platform, a feeder-side cache
// file and a scheduler serving over HTTP, with a fake clock.
type fixture struct {
	t      testing.TB
	ctx    context.Context
	st     *store.Store
	svc    *Service
	srv    *httptest.Server
	feeder *shmcache.Cache
	reg    *prometheus.Registry
	now    atomic.Int64
	key    *rsa.PrivateKey
	appID  int64
	avID   int64
	user   row.User
}

// Options are a test scheduler's Config and Deps in one, so that a setup
// mod sets either.
type Options struct {
	Config
	Deps
}

// testConfig is the scheduler flags' defaults with quarantine and spot
// checks off, a fan-out of 16 and a request delay of 7 s.
func testConfig() Config {
	return Config{URLBase: "http://127.0.0.1:8080", Fanout: 16, UploadGrace: DefaultUploadGrace, RequestDelay: 7 * time.Second,
		MaxResultsPerRPC: 10, MaxInProgressPerCPU: 4, ARTrustValid: 10, MaxBodyBytes: protocol.DefaultMaxBodyBytes, CommitLanes: 1}
}

func setup(t testing.TB, mods ...func(*Options)) *fixture {
	t.Helper()
	f := &fixture{t: t, ctx: context.Background(), st: storetest.New(t), reg: prometheus.NewRegistry()}
	f.now.Store(t0)
	var err error
	if f.key, err = uploadKey(); err != nil {
		t.Fatal(err)
	}
	pid := storetest.Platform(f.t, f.st, storetest.PlatformOptions{CreateTime: 1, Name: platformName, UserFriendlyName: "Linux"}).ID
	f.appID = storetest.App(f.t, f.st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo app", Weight: 1}).ID
	f.avID = storetest.AppVersion(f.t, f.st, storetest.AppVersionOptions{CreateTime: 1, App: f.appID, VersionNum: 100, Platform: pid}).ID
	f.user = f.newUser("alice")

	path := filepath.Join(t.TempDir(), "cache")
	if f.feeder, err = shmcache.Create(path, 64); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.feeder.Close() })
	f.publishTables()
	src := NewCacheFile(path)
	t.Cleanup(func() { src.Close() })

	opts := Options{Config: testConfig(), Deps: Deps{
		Store:     f.st,
		Cache:     src,
		UploadKey: f.key,
		Metrics:   NewMetrics(f.reg),
		Now:       func() time.Time { return time.Unix(f.now.Load(), 0) },
	}}
	opts.ProjectName = "Test Project"
	for _, m := range mods {
		m(&opts)
	}
	if f.svc, err = New(opts.Config, opts.Deps); err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(f.svc)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) publishTables() {
	f.t.Helper()
	ps, err1 := f.st.PlatformList(f.ctx)
	as, err2 := f.st.AppList(f.ctx)
	vs, err3 := f.st.AppVersionList(f.ctx)
	if err1 != nil || err2 != nil || err3 != nil {
		f.t.Fatal(err1, err2, err3)
	}
	if err := f.feeder.SetTables(shmcache.Tables{Platforms: ps, Apps: as, AppVersions: vs}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) newUser(name string) row.User {
	f.t.Helper()
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return storetest.User(f.t, f.st, storetest.UserOptions{CreateTime: 5, EmailAddr: name + "@example.org", Name: name,
		Authenticator: hex.EncodeToString(b)})
}

// job describes a job to create; zero fields get defaults.
type job struct {
	instances  int
	fpops      float64
	memory     float64
	disk       float64
	delayBound int64
	// replicationQuorum makes an adaptive replication job: min_quorum and
	// target_nresults 1, raised to this when replicated.
	replicationQuorum int
	// sendFlags is each instance's send_flags, also in its cache entry.
	sendFlags int
	// hrClass is the job's hr_class, also in its cache entries.
	hrClass int
	// xmlDoc replaces the job's description when set.
	xmlDoc string
	// outputs, when set, are the output files of the instance named
	// rname, instead of one "out".
	outputs func(rname string) []jobxml.OutputFile
}

// addJob creates a job with its instances UNSENT and puts them in the cache.
func (f *fixture) addJob(name string, j job) (int64, []int64) {
	f.t.Helper()
	if j.instances == 0 {
		j.instances = 1
	}
	if j.fpops == 0 {
		j.fpops = 1e10 // 10 s on a 1 GFLOPS host
	}
	if j.delayBound == 0 {
		j.delayBound = 3600
	}
	doc, err := jobxml.FormatWorkunit(jobxml.Workunit{CommandLine: "--rounds 3",
		Inputs: []jobxml.InputFile{{Name: name + "_in", OpenName: "in", Nbytes: 18, MD5: "eae797ff01dd963522f1b6a54ac3242a", CopyFile: true}}})
	if err != nil {
		f.t.Fatal(err)
	}
	if j.xmlDoc != "" {
		doc = j.xmlDoc
	}
	target := j.instances
	if j.replicationQuorum > 0 {
		target = 1
	}
	wuID := storetest.Job(f.t, f.st, storetest.JobOptions{CreateTime: 1, App: f.appID, Name: name, XMLDoc: doc,
		RscFpopsEst: j.fpops, RscFpopsBound: 10 * j.fpops, RscMemoryBound: j.memory, RscDiskBound: j.disk,
		DelayBound: j.delayBound, TransitionTime: state.NoTransition, MinQuorum: 1, TargetNResults: target,
		MaxErrorResults: 3, MaxTotalResults: 6, MaxSuccessResults: 3, ReplicationQuorum: j.replicationQuorum,
		HRClass: j.hrClass}).ID
	var ids []int64
	for i := 0; i < j.instances; i++ {
		rname := fmt.Sprintf("%s_%d", name, i)
		outs := storetest.Outputs(rname, []string{"out"}, 1e5)
		if j.outputs != nil {
			outs = j.outputs(rname)
		}
		in, err := jobxml.FormatResult(outs)
		if err != nil {
			f.t.Fatal(err)
		}
		id := storetest.Instance(f.t, f.st, storetest.InstanceOptions{CreateTime: 1, Job: wuID, ServerState: state.ServerUnsent,
			Name: rname, XMLDocIn: in, App: f.appID, SendFlags: j.sendFlags}).ID
		ids = append(ids, id)
		f.fill(shmcache.Entry{ResultID: id, WorkunitID: wuID, AppID: f.appID, RscFpopsEst: j.fpops,
			RscMemoryBound: j.memory, RscDiskBound: j.disk, DelayBound: j.delayBound, HRClass: int32(j.hrClass),
			Flags: int32(j.sendFlags)})
	}
	return wuID, ids
}

func (f *fixture) fill(e shmcache.Entry) {
	f.t.Helper()
	for i := 0; i < f.feeder.NSlots(); i++ {
		if st, _ := f.feeder.Slot(i); st == shmcache.SlotEmpty && f.feeder.Fill(i, e) {
			return
		}
	}
	f.t.Fatal("cache full")
}

func (f *fixture) cached() int {
	n := 0
	for i := 0; i < f.feeder.NSlots(); i++ {
		if st, _ := f.feeder.Slot(i); st == shmcache.SlotPresent {
			n++
		}
	}
	return n
}

// request is a scheduler request to build; zero fields get a 1-CPU,
// 1 GFLOPS host that wants no work.
type request struct {
	auth      string
	hostID    int64
	seqno     int
	workSecs  float64
	instances float64
	platform  string
	ncpus     int
	fpops     float64
	memory    float64
	diskFree  float64
	dontSend  bool
	results   []string // <result> elements
	// hostFiles are the sticky files the client lists after its reports.
	hostFiles []protocol.HostFile
	hasOther  bool
	other     []string // names in <other_results>
	// cpid is the host_cpid; empty gets a fresh one, so that requests
	// without a host id are new computers rather than one coming back.
	cpid string
	// osName is the host's os_name; empty is "Linux Debian".
	osName string
	// vendor and model are the host's p_vendor and p_model.
	vendor, model string
}

func (r request) body() string {
	if r.platform == "" {
		r.platform = platformName
	}
	if r.ncpus == 0 {
		r.ncpus = 1
	}
	if r.fpops == 0 {
		r.fpops = 1e9
	}
	if r.cpid == "" {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		r.cpid = hex.EncodeToString(b)
	}
	if r.osName == "" {
		r.osName = "Linux Debian"
	}
	dont := 0
	if r.dontSend {
		dont = 1
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<scheduler_request>
    <authenticator>%s</authenticator>
    <hostid>%d</hostid>
    <rpc_seqno>%d</rpc_seqno>
    <dont_send_work>%d</dont_send_work>
    <work_req_seconds>%f</work_req_seconds>
    <cpu_req_secs>%f</cpu_req_secs>
    <cpu_req_instances>%f</cpu_req_instances>
    <platform_name>%s</platform_name>
<time_stats>
    <on_frac>1.000000</on_frac>
    <active_frac>1.000000</active_frac>
</time_stats>
<host_info>
    <domain_name>vm</domain_name>
    <host_cpid>%s</host_cpid>
    <p_ncpus>%d</p_ncpus>
    <p_fpops>%f</p_fpops>
    <m_nbytes>%f</m_nbytes>
    <d_free>%f</d_free>
    <os_name>%s</os_name>
    <p_vendor>%s</p_vendor>
    <p_model>%s</p_model>
</host_info>
`, r.auth, r.hostID, r.seqno, dont, r.workSecs, r.workSecs, r.instances, r.platform, r.cpid, r.ncpus, r.fpops, r.memory, r.diskFree,
		r.osName, r.vendor, r.model)
	for _, res := range r.results {
		b.WriteString(res)
	}
	// As client/cs_scheduler.cpp writes them.
	for _, f := range r.hostFiles {
		fmt.Fprintf(&b, "    <file_info>\n        <name>%s</name>\n        <nbytes>%f</nbytes>\n        <status>%d</status>\n    </file_info>\n",
			f.Name, f.Nbytes, f.Status)
	}
	if r.hasOther || len(r.other) > 0 {
		b.WriteString("<other_results>\n")
		for _, n := range r.other {
			fmt.Fprintf(&b, "    <other_result>\n        <name>%s</name>\n        <app_version>0</app_version>\n    </other_result>\n", n)
		}
		b.WriteString("</other_results>\n")
	}
	b.WriteString("</scheduler_request>\n")
	return b.String()
}

// successReport is a <result> as the client reports a finished task.
func successReport(name string) string {
	return fmt.Sprintf(`<result>
    <name>%s</name>
    <final_cpu_time>12.500000</final_cpu_time>
    <final_elapsed_time>13.000000</final_elapsed_time>
    <exit_status>0</exit_status>
    <state>5</state>
    <platform>x86_64-pc-linux-gnu</platform>
    <version_num>100</version_num>
    <app_version_num>100</app_version_num>
<stderr_out>
<core_client_version>7.20.5</core_client_version>
<![CDATA[
<stderr_txt>
all fine
</stderr_txt>
]]>
</stderr_out>
<file_info>
    <name>%s_0</name>
    <nbytes>23.000000</nbytes>
    <max_nbytes>100000.000000</max_nbytes>
    <md5_cksum>cc4b471dacedcb39d73c6fa176272933</md5_cksum>
    <upload_url>http://127.0.0.1:8080/file_upload_handler</upload_url>
</file_info>
</result>
`, name, name)
}

// errorReport is a <result> for a task whose app exited 3.
func errorReport(name string) string {
	return fmt.Sprintf(`<result>
    <name>%s</name>
    <final_cpu_time>1.000000</final_cpu_time>
    <final_elapsed_time>1.500000</final_elapsed_time>
    <exit_status>3</exit_status>
    <state>3</state>
<stderr_out>
<core_client_version>7.20.5</core_client_version>
<![CDATA[
<message>
process exited with code 3 (0x3, -253)</message>
]]>
</stderr_out>
</result>
`, name)
}

func (f *fixture) post(body string) (int, string) {
	f.t.Helper()
	resp, err := http.Post(f.srv.URL+"/scheduler", "application/x-www-form-urlencoded", strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// rpc posts r and parses the reply, which must be HTTP 200.
func (f *fixture) rpc(r request) *protocol.SchedulerReply {
	f.t.Helper()
	if r.auth == "" {
		r.auth = f.user.Authenticator
	}
	code, body := f.post(r.body())
	if code != http.StatusOK {
		f.t.Fatalf("POST /scheduler = %d %q, want 200", code, body)
	}
	rep, err := protocol.ParseSchedulerReply(strings.NewReader(body))
	if err != nil {
		f.t.Fatalf("ParseSchedulerReply: %v\n%s", err, body)
	}
	return rep
}

func (f *fixture) result(id int64) row.Result {
	f.t.Helper()
	r, err := f.st.ResultGet(f.ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

func (f *fixture) workunit(id int64) row.Workunit {
	f.t.Helper()
	wu, err := f.st.WorkunitGet(f.ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return wu
}

func (f *fixture) count(query string, args ...any) int {
	f.t.Helper()
	var n int
	if err := f.st.DB().GetContext(f.ctx, &n, query, args...); err != nil {
		f.t.Fatalf("%s: %v", query, err)
	}
	return n
}

func acked(rep *protocol.SchedulerReply, name string) bool {
	for _, a := range rep.ResultAcks {
		if strings.TrimSpace(a.Name) == name {
			return true
		}
	}
	return false
}

func resultNames(rep *protocol.SchedulerReply) []string {
	var out []string
	for _, r := range rep.Results {
		out = append(out, r.Name)
	}
	return out
}

func messages(rep *protocol.SchedulerReply) string {
	var out []string
	for _, m := range rep.Messages {
		out = append(out, m.Priority+": "+strings.TrimSpace(m.Text))
	}
	return strings.Join(out, "; ")
}

func TestNewHostGetsHostID(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rep := f.rpc(request{ncpus: 4, fpops: 3e9, memory: 8e9, diskFree: 5e10, cpid: "2f5059bf76b7983d47a6084575a9b1cc"})
	if rep.HostID <= 0 {
		t.Fatalf("first RPC: reply hostid = %d, want a new host id", rep.HostID)
	}
	if rep.ProjectName != "Test Project" || rep.RequestDelay != 7 || rep.UserID != f.user.ID || rep.UserName != "alice" {
		t.Fatalf("reply header = project %q delay %v user %d %q", rep.ProjectName, rep.RequestDelay, rep.UserID, rep.UserName)
	}
	h, err := f.st.HostGet(f.ctx, rep.HostID)
	if err != nil || h.UserID != f.user.ID || h.PNCPUs != 4 || h.PFpops != 3e9 || h.MNbytes != 8e9 || h.DFree != 5e10 ||
		h.RPCTime != t0 || h.HostCPID != fmt.Sprintf("%x", md5.Sum([]byte("2f5059bf76b7983d47a6084575a9b1cc"+f.user.EmailAddr))) ||
		h.OSName != "Linux Debian" {
		t.Fatalf("new host row = %+v, %v", h, err)
	}

	// The same host again: no new host, the row updated.
	f.now.Add(100)
	rep2 := f.rpc(request{hostID: rep.HostID, seqno: 1, ncpus: 8, fpops: 3e9})
	if rep2.HostID != 0 {
		t.Fatalf("second RPC with hostid %d: reply hostid = %d, want none", rep.HostID, rep2.HostID)
	}
	h, _ = f.st.HostGet(f.ctx, rep.HostID)
	if h.PNCPUs != 8 || h.RPCSeqno != 1 || h.RPCTime != t0+100 {
		t.Fatalf("host after second RPC = %+v, want p_ncpus 8, rpc_seqno 1, rpc_time %d", h, t0+100)
	}
	if n := f.count(`SELECT COUNT(*) FROM host`); n != 1 {
		t.Fatalf("hosts after two RPCs of one host = %d, want 1", n)
	}

	// Another user naming this host gets a host of their own.
	bob := f.newUser("bob")
	rep3 := f.rpc(request{auth: bob.Authenticator, hostID: rep.HostID})
	if rep3.HostID <= 0 || rep3.HostID == rep.HostID {
		t.Fatalf("other user's RPC naming host %d: reply hostid = %d, want a new host", rep.HostID, rep3.HostID)
	}
	if h2, _ := f.st.HostGet(f.ctx, rep3.HostID); h2.UserID != bob.ID {
		t.Fatalf("new host of bob = %+v, want userid %d", h2, bob.ID)
	}
	if h, _ = f.st.HostGet(f.ctx, rep.HostID); h.UserID != f.user.ID || h.RPCTime != t0+100 {
		t.Fatalf("alice's host after bob's RPC = %+v, want untouched", h)
	}
}

func TestBadAuthenticatorChangesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, ids := f.addJob("wu", job{})
	for _, auth := range []string{"nope", " ", strings.ToUpper(f.user.Authenticator), f.user.Authenticator + "x"} {
		rep := f.rpc(request{auth: auth, workSecs: 1000, instances: 1, results: []string{successReport("wu_0")}})
		if len(rep.Messages) != 1 || rep.Messages[0].Priority != "notice" ||
			!strings.Contains(rep.Messages[0].Text, "Invalid or missing account key") {
			t.Fatalf("RPC with authenticator %q: messages = %q, want the invalid-key notice", auth, messages(rep))
		}
		if rep.RequestDelay <= 0 || rep.HostID != 0 || len(rep.Results) != 0 || len(rep.ResultAcks) != 0 {
			t.Fatalf("RPC with authenticator %q: reply = %+v, want only a notice and a delay", auth, rep)
		}
	}
	if n := f.count(`SELECT COUNT(*) FROM host`); n != 0 {
		t.Fatalf("hosts after bad RPCs = %d, want 0", n)
	}
	if r := f.result(ids[0]); r.ServerState != state.ServerUnsent {
		t.Fatalf("result after bad RPCs = %+v, want unsent", r)
	}
	if got := testutil.ToFloat64(f.svc.m.requests.WithLabelValues(outcomeBadAuthenticator)); got != 4 {
		t.Fatalf("requests_total{bad_authenticator} = %v, want 4", got)
	}
}

func TestWorkRequestSendsResults(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var wus, ids []int64
	for i := 0; i < 3; i++ {
		wu, rs := f.addJob(fmt.Sprintf("wu%d", i), job{delayBound: 3600 + int64(i)})
		wus, ids = append(wus, wu), append(ids, rs...)
	}
	rep := f.rpc(request{workSecs: 1000, instances: 1})
	if len(rep.Results) != 3 {
		t.Fatalf("work request for 1000 s of 10 s jobs: results = %v (messages %q), want all 3", resultNames(rep), messages(rep))
	}
	hostID := rep.HostID
	for i, id := range ids {
		r := f.result(id)
		if r.ServerState != state.ServerInProgress || r.HostID != hostID || r.UserID != f.user.ID || r.SentTime != t0 ||
			r.ReportDeadline != t0+3600+int64(i) || r.AppVersionID != f.avID || r.AppVersionNum != 100 {
			t.Fatalf("sent result %d = %+v, want in progress on host %d, user %d, deadline %d", id, r, hostID, f.user.ID, t0+3600+int64(i))
		}
		if wu := f.workunit(wus[i]); wu.TransitionTime != r.ReportDeadline {
			t.Fatalf("workunit %d transition_time = %d, want the deadline %d", wus[i], wu.TransitionTime, r.ReportDeadline)
		}
	}
	if n := f.count(`SELECT COUNT(*) FROM workunit_user WHERE userid = ?`, f.user.ID); n != 3 {
		t.Fatalf("workunit_user rows = %d, want 3", n)
	}
	if n := f.cached(); n != 0 {
		t.Fatalf("cache slots still present after sending = %d, want 0", n)
	}

	// The reply describes everything the client needs.
	if len(rep.Apps) != 1 || rep.Apps[0].Name != "demo" || len(rep.AppVersions) != 1 ||
		rep.AppVersions[0].AppName != "demo" || rep.AppVersions[0].VersionNum != 100 || rep.AppVersions[0].Platform != platformName {
		t.Fatalf("reply apps %+v, app versions %+v; want one of each for demo 100", rep.Apps, rep.AppVersions)
	}
	files := map[string]protocol.FileInfo{}
	for _, fi := range rep.FileInfos {
		files[fi.Name] = fi
	}
	for i, res := range rep.Results {
		var r row.Result
		for _, id := range ids {
			if x := f.result(id); x.Name == res.Name {
				r = x
			}
		}
		if r.ID == 0 || res.Platform != platformName || res.VersionNum != 100 || int64(res.ReportDeadline) != r.ReportDeadline {
			t.Fatalf("reply result %d = %+v, want name of a sent result, platform, version 100, deadline", i, res)
		}
		wuName := strings.TrimSuffix(res.Name, "_0")
		if res.WUName != wuName || len(res.FileRefs) != 1 || res.FileRefs[0].FileName != res.Name+"_0" ||
			res.FileRefs[0].OpenName != "out" || res.FileRefs[0].CopyFile == nil {
			t.Fatalf("reply result %+v: want wu_name %s and one output file_ref with open_name and copy_file", res, wuName)
		}
		out, ok := files[res.Name+"_0"]
		if !ok || len(out.URLs) != 1 || out.URLs[0] != "http://127.0.0.1:8080/file_upload_handler" || out.MaxNbytes != 1e5 {
			t.Fatalf("output file_info of %s = %+v, want the upload URL and max_nbytes", res.Name, out)
		}
		if e := mustExpiry(t, out.XMLSignature); e != r.ReportDeadline+3600 {
			t.Fatalf("certificate of %s expires at %d, want the report deadline %d plus the default grace", out.Name, e, r.ReportDeadline)
		}
		if err := keys.Verify(&f.key.PublicKey, []byte(keys.UploadCertificate(out.Name, out.MaxNbytes, r.ReportDeadline+3600)), out.XMLSignature); err != nil {
			t.Fatalf("xml_signature of %s does not verify: %v\n%s", out.Name, err, out.XMLSignature)
		}
		in, ok := files[wuName+"_in"]
		if !ok || len(in.URLs) != 1 || !strings.HasPrefix(in.URLs[0], "http://127.0.0.1:8080/download/") ||
			!strings.HasSuffix(in.URLs[0], "/"+wuName+"_in") || in.MD5Cksum != "eae797ff01dd963522f1b6a54ac3242a" || in.Nbytes != 18 {
			t.Fatalf("input file_info of %s = %+v", wuName, in)
		}
	}
	for _, wu := range rep.Workunits {
		if wu.AppName != "demo" || wu.RscFpopsEst != 1e10 || wu.RscFpopsBound != 1e11 || wu.CommandLine != "--rounds 3" ||
			len(wu.FileRefs) != 1 || wu.FileRefs[0].OpenName != "in" || wu.FileRefs[0].CopyFile == nil {
			t.Fatalf("reply workunit = %+v", wu)
		}
	}
	if got := testutil.ToFloat64(f.svc.m.resultsSent); got != 3 {
		t.Fatalf("results_sent_total = %v, want 3", got)
	}
	if got := testutil.ToFloat64(f.svc.m.claims.WithLabelValues(claimOK)); got != 3 {
		t.Fatalf("cache_claims_total{ok} = %v, want 3", got)
	}

	// Nothing left: the reply says so.
	rep = f.rpc(request{hostID: hostID, workSecs: 1000, instances: 1})
	if len(rep.Results) != 0 || len(rep.Messages) != 1 || rep.Messages[0].Priority != "low" {
		t.Fatalf("work request on an empty cache: results %v, messages %q; want none and a low message", resultNames(rep), messages(rep))
	}
	if got := testutil.ToFloat64(f.svc.m.noWork.WithLabelValues(reasonNoCachedWork)); got != 1 {
		t.Fatalf("no_work_total{no_cached_work} = %v, want 1", got)
	}
}

func TestSendStopsAtRequestAndLimits(t *testing.T) {
	t.Parallel()
	f := setup(t, func(o *Options) { o.MaxResultsPerRPC = 3; o.MaxInProgressPerCPU = 2 })
	for i := 0; i < 8; i++ {
		f.addJob(fmt.Sprintf("wu%d", i), job{fpops: 1e11}) // 100 s each
	}
	// 150 s wanted: two 100 s jobs cover it.
	rep := f.rpc(request{workSecs: 150, ncpus: 4})
	if len(rep.Results) != 2 {
		t.Fatalf("request for 150 s of 100 s jobs: got %v, want 2 results", resultNames(rep))
	}
	host, held := rep.HostID, resultNames(rep)
	// Lots wanted: the per-RPC cap.
	rep = f.rpc(request{hostID: host, workSecs: 1e5, ncpus: 4, other: held})
	if len(rep.Results) != 3 {
		t.Fatalf("request for lots with max 3 per RPC: got %v, want 3 results", resultNames(rep))
	}
	held = append(held, resultNames(rep)...)
	// 5 held, limit 2 per CPU × 4 CPUs = 8: 3 more.
	rep = f.rpc(request{hostID: host, workSecs: 1e5, ncpus: 4, other: held})
	if len(rep.Results) != 3 {
		t.Fatalf("request with 5 held and a limit of 8: got %v, want 3 results", resultNames(rep))
	}
	held = append(held, resultNames(rep)...)
	rep = f.rpc(request{hostID: host, workSecs: 1e5, ncpus: 4, other: held})
	if len(rep.Results) != 0 || !strings.Contains(messages(rep), "limit") {
		t.Fatalf("request with 8 held and a limit of 8: got %v, messages %q; want none and the limit message", resultNames(rep), messages(rep))
	}
}

func TestInProgressLimit(t *testing.T) {
	t.Parallel()
	f := setup(t, func(o *Options) { o.MaxInProgressPerCPU = 2 })
	for i := 0; i < 5; i++ {
		f.addJob(fmt.Sprintf("wu%d", i), job{})
	}
	rep := f.rpc(request{workSecs: 1e4})
	if len(rep.Results) != 2 {
		t.Fatalf("1-CPU host with limit 2 per CPU: got %v, want 2", resultNames(rep))
	}
	rep2 := f.rpc(request{hostID: rep.HostID, workSecs: 1e4, other: resultNames(rep)})
	if len(rep2.Results) != 0 || !strings.Contains(messages(rep2), "limit") {
		t.Fatalf("host at its limit: got %v, messages %q; want none and the limit message", resultNames(rep2), messages(rep2))
	}
	if got := testutil.ToFloat64(f.svc.m.noWork.WithLabelValues(reasonInProgressLimit)); got != 1 {
		t.Fatalf("no_work_total{in_progress_limit} = %v, want 1", got)
	}
}

func TestNoWorkReasons(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.addJob("big", job{memory: 4e9, disk: 1e6})
	rep := f.rpc(request{workSecs: 100, memory: 2e9, diskFree: 1e10})
	if len(rep.Results) != 0 || !strings.Contains(messages(rep), "memory") {
		t.Fatalf("job needing 4 GB on a 2 GB host: got %v, messages %q", resultNames(rep), messages(rep))
	}
	if rep.Overloaded != nil {
		t.Errorf("no work for the host: reply says <overloaded/>, want it only when the server is busy")
	}
	rep = f.rpc(request{hostID: rep.HostID, workSecs: 100, memory: 2e9, platform: "sparc-sun-solaris"})
	if len(rep.Results) != 0 || !strings.Contains(messages(rep), "platform") {
		t.Fatalf("unknown platform: got %v, messages %q", resultNames(rep), messages(rep))
	}
	rep = f.rpc(request{hostID: rep.HostID, workSecs: 100, memory: 2e9, dontSend: true})
	if len(rep.Results) != 0 || len(rep.Messages) != 0 {
		t.Fatalf("dont_send_work: got %v, messages %q; want nothing", resultNames(rep), messages(rep))
	}
	rep = f.rpc(request{hostID: rep.HostID, workSecs: 100, memory: 8e9, fpops: 1e5})
	if len(rep.Results) != 0 || !strings.Contains(messages(rep), "deadline") {
		t.Fatalf("very slow host: got %v, messages %q", resultNames(rep), messages(rep))
	}
	for _, r := range []string{reasonMemory, reasonPlatform, reasonDeadline} {
		if got := testutil.ToFloat64(f.svc.m.noWork.WithLabelValues(r)); got != 1 {
			t.Errorf("no_work_total{%s} = %v, want 1", r, got)
		}
	}
	if n := f.cached(); n != 1 {
		t.Fatalf("cache slots present after refusals = %d, want the job still there", n)
	}
}

func TestNeverTwoInstancesToOneUser(t *testing.T) {
	t.Parallel()
	f := setup(t)
	wu, ids := f.addJob("wu", job{instances: 3})
	repA := f.rpc(request{workSecs: 1000, instances: 1})
	if len(repA.Results) != 1 {
		t.Fatalf("host A: got %v, want exactly one instance of the job", resultNames(repA))
	}
	repB := f.rpc(request{workSecs: 1000, instances: 1}) // a second host of the same user
	if repB.HostID == repA.HostID || len(repB.Results) != 0 {
		t.Fatalf("host B of the same user: host %d got %v, want a new host and nothing", repB.HostID, resultNames(repB))
	}
	if !strings.Contains(messages(repB), "already been sent to your account") {
		t.Fatalf("host B messages = %q, want the one-per-user reason", messages(repB))
	}
	if n := f.cached(); n != 2 {
		t.Fatalf("cache slots present after host B = %d, want the 2 other instances left for other users", n)
	}
	bob := f.newUser("bob")
	repC := f.rpc(request{auth: bob.Authenticator, workSecs: 1000, instances: 1})
	if len(repC.Results) != 1 {
		t.Fatalf("another user's host: got %v, want one instance", resultNames(repC))
	}
	if n := f.count(`SELECT COUNT(*) FROM result WHERE workunitid = ? AND server_state = ?`, wu, state.ServerInProgress); n != 2 {
		t.Fatalf("instances in progress = %d, want 2 (one per user)", n)
	}
	_ = ids
}

func TestNeverTwoInstancesToOneUserConcurrently(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const jobs, instances, hosts = 4, 4, 8
	for i := 0; i < jobs; i++ {
		f.addJob(fmt.Sprintf("wu%d", i), job{instances: instances})
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, hosts)
	for h := 0; h < hosts; h++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := http.Post(f.srv.URL+"/scheduler", "text/xml",
				strings.NewReader(request{auth: f.user.Authenticator, workSecs: 1e4, instances: 4, ncpus: 4}.body()))
			if err != nil {
				errs <- err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("status %d", resp.StatusCode)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent RPC: %v", err)
	}
	if n := f.count(`SELECT COUNT(*) FROM (SELECT workunitid FROM result WHERE userid = ? AND server_state = ?
		GROUP BY workunitid HAVING COUNT(*) > 1) d`, f.user.ID, state.ServerInProgress); n != 0 {
		t.Fatalf("%d jobs have two instances sent to one user by %d racing hosts", n, hosts)
	}
	if n := f.count(`SELECT COUNT(*) FROM result WHERE server_state = ?`, state.ServerInProgress); n != jobs {
		t.Fatalf("instances sent to the user's hosts = %d, want one of each of the %d jobs", n, jobs)
	}
	if n := f.cached(); n != jobs*(instances-1) {
		t.Fatalf("cache slots present = %d, want %d left for other users", n, jobs*(instances-1))
	}
}

// sendTo gives a new host of the fixture's user the jobs in the cache and
// returns its host id.
func (f *fixture) sendTo(n int) int64 {
	f.t.Helper()
	rep := f.rpc(request{workSecs: 1e4, instances: float64(n)})
	if len(rep.Results) != n {
		f.t.Fatalf("sending %d: got %v (%q)", n, resultNames(rep), messages(rep))
	}
	return rep.HostID
}

func TestReportRecordsOutcomeOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	wuA, a := f.addJob("wua", job{})
	wuB, b := f.addJob("wub", job{})
	host := f.sendTo(2)

	f.now.Add(600)
	rep := f.rpc(request{hostID: host, results: []string{successReport("wua_0"), errorReport("wub_0")}})
	if !acked(rep, "wua_0") || !acked(rep, "wub_0") {
		t.Fatalf("report: acks = %+v, want both", rep.ResultAcks)
	}
	ra := f.result(a[0])
	if ra.ServerState != state.ServerOver || ra.Outcome != state.OutcomeSuccess || ra.ClientState != state.ClientFilesUploaded ||
		ra.ExitStatus != 0 || ra.CPUTime != 12.5 || ra.ElapsedTime != 13 || ra.ReceivedTime != t0+600 ||
		ra.ValidateState != state.ValidateInit || !strings.Contains(ra.StderrOut, "all fine") ||
		!strings.Contains(ra.XMLDocOut, "<name>wua_0_0</name>") || !strings.Contains(ra.XMLDocOut, "cc4b471dacedcb39d73c6fa176272933") {
		t.Fatalf("successful report recorded as %+v", ra)
	}
	rb := f.result(b[0])
	if rb.ServerState != state.ServerOver || rb.Outcome != state.OutcomeClientError || rb.ExitStatus != 3 ||
		rb.ClientState != state.ClientComputeError || !strings.Contains(rb.StderrOut, "exited with code 3") {
		t.Fatalf("error report recorded as %+v", rb)
	}
	for _, wu := range []int64{wuA, wuB} {
		if got := f.workunit(wu).TransitionTime; got != t0+600 {
			t.Fatalf("workunit %d transition_time after report = %d, want now (%d)", wu, got, t0+600)
		}
	}

	// Reported again (the ack was lost): acked, nothing changes.
	f.now.Add(600)
	rep = f.rpc(request{hostID: host, results: []string{errorReport("wua_0"), successReport("wub_0")}})
	if !acked(rep, "wua_0") || !acked(rep, "wub_0") {
		t.Fatalf("second report: acks = %+v, want both", rep.ResultAcks)
	}
	if r := f.result(a[0]); r != ra {
		t.Fatalf("second report changed result:\n got %+v\nwant %+v", r, ra)
	}
	if r := f.result(b[0]); r != rb {
		t.Fatalf("second report changed result:\n got %+v\nwant %+v", r, rb)
	}
	if got := f.workunit(wuA).TransitionTime; got != t0+600 {
		t.Fatalf("second report moved transition_time to %d", got)
	}
	for outcome, want := range map[string]float64{reportSuccess: 1, reportClientError: 1, reportIgnored: 2} {
		if got := testutil.ToFloat64(f.svc.m.resultsReported.WithLabelValues(outcome)); got != want {
			t.Errorf("results_reported_total{%s} = %v, want %v", outcome, got, want)
		}
	}
}

func TestReportOfUploadFailureIsClientError(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, a := f.addJob("wua", job{})
	host := f.sendTo(1)
	report := strings.Replace(successReport("wua_0"), "</file_info>", "<error_msg>\npermanent upload error\n</error_msg>\n</file_info>", 1)
	rep := f.rpc(request{hostID: host, results: []string{report}})
	if !acked(rep, "wua_0") {
		t.Fatal("report not acked")
	}
	if r := f.result(a[0]); r.Outcome != state.OutcomeClientError || r.ServerState != state.ServerOver {
		t.Fatalf("state 5 with an upload error_msg recorded as %+v, want client error", r)
	}
}

func TestForeignAndUnknownReportsChangeNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	wu, a := f.addJob("wua", job{})
	f.sendTo(1)
	before, beforeWU := f.result(a[0]), f.workunit(wu)

	bob := f.newUser("bob")
	f.now.Add(60)
	rep := f.rpc(request{auth: bob.Authenticator, results: []string{successReport("wua_0"), successReport("nosuch")}})
	if !acked(rep, "wua_0") || !acked(rep, "nosuch") {
		t.Fatalf("foreign and unknown reports: acks = %+v, want both acked", rep.ResultAcks)
	}
	if r := f.result(a[0]); r != before {
		t.Fatalf("foreign report changed the result:\n got %+v\nwant %+v", r, before)
	}
	if w := f.workunit(wu); w != beforeWU {
		t.Fatalf("foreign report changed the workunit:\n got %+v\nwant %+v", w, beforeWU)
	}
	// Another host of the same user is not foreign: as in BOINC, its report
	// is recorded, as its own (TestRestoredClientReportsAreAccepted).
	rep = f.rpc(request{results: []string{successReport("wua_0")}})
	if r := f.result(a[0]); !acked(rep, "wua_0") || r.Outcome != state.OutcomeSuccess || r.HostID != rep.HostID {
		t.Fatalf("report from another host of the owner: acked %v, result %+v; want recorded on host %d",
			acked(rep, "wua_0"), r, rep.HostID)
	}
}

// failingStore makes chosen methods fail, as a database in trouble would.
type failingStore struct {
	*store.Store
	failReport bool
	failAuth   bool
}

func (s *failingStore) SchedulerCommit(ctx context.Context, b store.SchedBatch) (store.SchedOutcome, error) {
	if s.failReport && len(b.Reports) > 0 {
		return store.SchedOutcome{}, fmt.Errorf("commit: %w", io.ErrUnexpectedEOF)
	}
	return s.Store.SchedulerCommit(ctx, b)
}

func (s *failingStore) UserHostGet(ctx context.Context, auth string, hostID int64) (row.User, row.Host, bool, error) {
	if s.failAuth {
		return row.User{}, row.Host{}, false, fmt.Errorf("lookup: %w", io.ErrUnexpectedEOF)
	}
	return s.Store.UserHostGet(ctx, auth, hostID)
}

func (s *failingStore) UserHostHeldGet(ctx context.Context, auth string, hostID int64, limit int) (store.UserHostHeld, error) {
	if s.failAuth {
		return store.UserHostHeld{}, fmt.Errorf("lookup: %w", io.ErrUnexpectedEOF)
	}
	return s.Store.UserHostHeldGet(ctx, auth, hostID, limit)
}

func TestFailedReportIsNotAcked(t *testing.T) {
	t.Parallel()
	fs := &failingStore{}
	f := setup(t, func(o *Options) { fs.Store = o.Store.(*store.Store); o.Store = fs })
	_, a := f.addJob("wua", job{})
	host := f.sendTo(1)
	f.addJob("wub", job{})
	fs.failReport = true
	// The reports are written with the host row and the first sends: a
	// failed write is a 503, with nothing acked and nothing sent.
	code, body := f.post(request{auth: f.user.Authenticator, hostID: host, workSecs: 100,
		results: []string{successReport("wua_0"), successReport("nosuch")}}.body())
	if code != http.StatusServiceUnavailable || strings.Contains(body, "result_ack") || strings.Contains(body, "<result>") {
		t.Fatalf("RPC whose report failed = %d %q, want 503 with no ack and no work", code, body)
	}
	if n := f.count(`SELECT COUNT(*) FROM result WHERE server_state = ?`, state.ServerInProgress); n != 1 {
		t.Fatalf("results in progress after a failed commit = %d, want 1 (nothing sent)", n)
	}
	if r := f.result(a[0]); r.ServerState != state.ServerInProgress {
		t.Fatalf("failed report changed the result: %+v", r)
	}
	fs.failReport = false
	rep := f.rpc(request{hostID: host, results: []string{successReport("wua_0")}})
	if !acked(rep, "wua_0") || f.result(a[0]).Outcome != state.OutcomeSuccess {
		t.Fatalf("report retried: acked %v, result %+v", acked(rep, "wua_0"), f.result(a[0]))
	}
}

func TestDatabaseDownIs503(t *testing.T) {
	t.Parallel()
	fs := &failingStore{failAuth: true}
	f := setup(t, func(o *Options) { fs.Store = o.Store.(*store.Store); o.Store = fs })
	code, body := f.post(request{auth: f.user.Authenticator, results: []string{successReport("x")}}.body())
	if code != http.StatusServiceUnavailable || strings.Contains(body, "result_ack") {
		t.Fatalf("RPC with the database down = %d %q, want 503 and no ack", code, body)
	}
	if got := testutil.ToFloat64(f.svc.m.requests.WithLabelValues(outcomeUnavailable)); got != 1 {
		t.Fatalf("requests_total{unavailable} = %v, want 1", got)
	}
}

func TestLostResultsAreResent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, a := f.addJob("wua", job{})
	_, b := f.addJob("wub", job{delayBound: 100})
	host := f.sendTo(2)

	// No <other_results>: the client said nothing about what it has.
	rep := f.rpc(request{hostID: host})
	if len(rep.Results) != 0 {
		t.Fatalf("RPC without other_results resent %v", resultNames(rep))
	}
	// It lists only wua_0: wub_0 is lost and resent, with its deadline.
	rep = f.rpc(request{hostID: host, other: []string{"wua_0"}})
	if names := resultNames(rep); len(names) != 1 || names[0] != "wub_0" {
		t.Fatalf("host listing only wua_0: resent %v, want [wub_0]", names)
	}
	if int64(rep.Results[0].ReportDeadline) != f.result(b[0]).ReportDeadline || len(rep.Workunits) != 1 || rep.Workunits[0].Name != "wub" ||
		len(rep.FileInfos) != 2 {
		t.Fatalf("resent reply = results %+v workunits %+v file_infos %+v", rep.Results, rep.Workunits, rep.FileInfos)
	}
	// An empty <other_results>: both lost, both resent.
	rep = f.rpc(request{hostID: host, hasOther: true})
	if len(rep.Results) != 2 {
		t.Fatalf("host listing nothing: resent %v, want both", resultNames(rep))
	}
	// Past wub_0's deadline it is not resent.
	f.now.Add(200)
	rep = f.rpc(request{hostID: host, hasOther: true})
	if names := resultNames(rep); len(names) != 1 || names[0] != "wua_0" {
		t.Fatalf("after wub_0's deadline: resent %v, want [wua_0]", names)
	}
	// A result being reported is not lost.
	rep = f.rpc(request{hostID: host, hasOther: true, results: []string{successReport("wua_0")}})
	if len(rep.Results) != 0 || !acked(rep, "wua_0") {
		t.Fatalf("report with empty other_results: resent %v, acks %+v", resultNames(rep), rep.ResultAcks)
	}
	if got := testutil.ToFloat64(f.svc.m.resultsResent); got != 4 {
		t.Fatalf("results_resent_total = %v, want 4", got)
	}
	if r := f.result(a[0]); r.ServerState != state.ServerOver {
		t.Fatalf("wua_0 after report = %+v", r)
	}
}

func TestLostResultOfFinishedJobIsNotResent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	wuDone, _ := f.addJob("wudone", job{})
	f.addJob("wuopen", job{})
	host := f.sendTo(2)
	if _, err := f.st.DB().Exec(`UPDATE workunit SET canonical_resultid = 999 WHERE id = ?`, wuDone); err != nil {
		t.Fatal(err)
	}
	rep := f.rpc(request{hostID: host, hasOther: true})
	if names := resultNames(rep); len(names) != 1 || names[0] != "wuopen_0" {
		t.Fatalf("host that lost both: resent %v, want only [wuopen_0] (wudone has a canonical result)", names)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	f := setup(t, func(o *Options) { o.MaxBodyBytes = 4096 })
	for _, tt := range []struct {
		name  string
		body  string
		delay time.Duration
	}{
		{"not XML", "hello", malformedDelay},
		{"cut off", "<scheduler_request><authenticator>x</authenticator>", malformedDelay},
		{"too large", "<scheduler_request>" + strings.Repeat("<x>1</x>", 1000) + "</scheduler_request>", tooLargeDelay},
		{"too deep", "<scheduler_request>" + strings.Repeat("<a>", 100) + strings.Repeat("</a>", 100) + "</scheduler_request>",
			malformedDelay},
	} {
		// Answered as BOINC answers: a reply the client reads, with a
		// message and a delay (TestMalformedRequestGetsSchedulerReply).
		// The delay is the refusal's: a request let through would get
		// another (the invalid-key notice's, for these).
		rep := f.postReply(tt.body)
		if len(rep.Messages) == 0 || rep.RequestDelay != tt.delay.Seconds() {
			t.Errorf("%s: reply %+v, want a message and request_delay %v", tt.name, rep, tt.delay.Seconds())
		}
	}
	for outcome, want := range map[string]float64{outcomeBadRequest: 3, outcomeTooLarge: 1, outcomeBadAuthenticator: 0} {
		if got := testutil.ToFloat64(f.svc.m.requests.WithLabelValues(outcome)); got != want {
			t.Errorf("requests_total{%s} = %v, want %v", outcome, got, want)
		}
	}
	resp, err := http.Get(f.srv.URL + "/scheduler")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /scheduler = %d, want 405", resp.StatusCode)
	}
	if n := f.count(`SELECT COUNT(*) FROM host`); n != 0 {
		t.Fatalf("hosts after bad requests = %d", n)
	}
}

func TestOddClientTextIsStored(t *testing.T) {
	t.Parallel()
	f := setup(t)
	body := strings.Replace(request{auth: f.user.Authenticator}.body(), "<domain_name>vm</domain_name>",
		"<domain_name>v\xffm"+strings.Repeat("é", 300)+"</domain_name>", 1)
	code, out := f.post(body)
	if code != http.StatusOK {
		t.Fatalf("host_info with invalid UTF-8 and a long name = %d %q, want 200", code, out)
	}
	rep, err := protocol.ParseSchedulerReply(strings.NewReader(out))
	if err != nil || rep.HostID == 0 {
		t.Fatalf("reply = %+v, %v", rep, err)
	}
	if h, _ := f.st.HostGet(f.ctx, rep.HostID); !strings.HasPrefix(h.DomainName, "v\uFFFDm") {
		t.Fatalf("domain_name stored as %q", h.DomainName)
	}
	rep = f.rpc(request{hostID: rep.HostID, results: []string{successReport("bad\xffname"), successReport(strings.Repeat("n", 300))}})
	if len(rep.ResultAcks) != 2 {
		t.Fatalf("reports with impossible names: acks %+v, want both acked", rep.ResultAcks)
	}
	code, out = f.post(request{auth: "k\xff"}.body())
	if code != http.StatusOK || !strings.Contains(out, "Invalid or missing account key") {
		t.Fatalf("authenticator with invalid UTF-8 = %d %q, want the notice", code, out)
	}
}

func mustExpiry(t *testing.T, xmlSignature string) int64 {
	t.Helper()
	e, err := keys.UploadExpiry(xmlSignature)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
