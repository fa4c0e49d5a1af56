package e2e

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/boincapp"
	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/passwd"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/boinctest"
)

// The old BOINC project of TestRealBOINCClientImport: one volunteer, one
// host attached to it, one app with one version, one job whose instance is
// on that host. Ids are not 1 to show they are kept.
const (
	rcImpUserID   = 3
	rcImpHostID   = 7
	rcImpAppID    = 2
	rcImpPlatID   = 4
	rcImpAVID     = 5
	rcImpWUID     = 11
	rcImpResultID = 21
	rcImpSeqno    = 41 // the host's rpc_seqno, the client's too
	rcImpEmail    = "imported.volunteer@example.org"
	rcImpPassword = "a volunteer's old password"
	rcImpAuth     = "7f3c1c0b2a4e4d5f8a9b0c1d2e3f4a5b"
	rcImpCPID     = "0d4c5e6f7a8b9c0d1e2f3a4b5c6d7e8f" // the client's host_cpid
	rcImpXCPID    = "1e2d3c4b5a69788796a5b4c3d2e1f001" // the user's cross_project_id
	rcImpUserCr   = 1234.5
	rcImpHostCr   = 500.25
	rcImpJob      = "old_boinc_wu_1"
	rcImpTask     = rcImpJob + "_0"
	rcImpRounds   = 2000000 // about a tenth of a second of the app's work
	rcImpNewJobs  = 2
	rcImpTimeout  = 4 * time.Minute
	// rcImpDeadline is the task's deadline from now: under a day, so the
	// client reports the task as soon as its outputs are uploaded
	// (PROTOCOL.md §9.3) rather than an hour later.
	rcImpDeadline = 20 * time.Hour
)

// TestRealBOINCClientImport moves a BOINC project with a task in flight
// over to our server and checks that the real BOINC client (7.20) carries
// on as if nothing happened. The old project is a BOINC database in the
// fixture schema, written row by row as BOINC holds them (the app
// version's document with the code signature of the boinc_demo program, an
// in-progress instance whose outputs carry no upload certificate, as in a
// project made by make_project, the job's input in the old download
// directory's fan-out), and the client's data directory as a 7.20 client
// attached to it has it (account file, client_state.xml with the project,
// its host id and rpc_seqno, the app, the version, the job and the task, one
// input yet to download). `taskctl import boinc` imports it, our daemons
// start on the old URLs, and the client:
//   - downloads the missing input, runs the task, uploads both outputs
//     (without certificates: under the import's permits) and reports it;
//   - keeps its host id (no host row is added) and its rpc_seqno goes on
//     from the old one;
//   - gets the task validated and credited: the user's and host's imported
//     credit grow, and the assimilated output is the app's;
//   - fetches and completes new work submitted with taskctl;
//   - and BOINC Manager's attach by e-mail and password (boinccmd
//     --lookup_account) returns the imported account key for the password
//     the volunteer had on the old project (its md5 hash as BOINC stored it).
func TestRealBOINCClientImport(t *testing.T) {
	boinc, app := realClientPrereqs(t)
	begin := time.Now()
	bin := buildPrograms(t)
	rp := newRealProject(t, bin)
	rp.app = app
	rp.noUpThrottle = true
	defer rp.stopAll()
	imp := &rcImport{rp: rp, now: time.Now().Unix()}

	oldDSN := imp.oldProject()
	imp.clientState()
	out := rp.taskctl("import", "boinc", "--from", oldDSN, "--boinc-project-dir", rp.dir,
		"--boinc-download-url", rp.urlBase+"/download")
	t.Logf("taskctl import boinc:\n%s", out)
	if !strings.Contains(out, "without an upload certificate, accepted under a permit until their deadline plus the upload grace: 2") {
		t.Fatalf("taskctl import boinc did not report the permits of the task's two outputs:\n%s", out)
	}
	verify := rp.taskctl("import", "boinc", "--from", oldDSN, "--verify")
	t.Logf("taskctl import boinc --verify:\n%s", verify)

	rp.startDaemonList([]realDaemon{
		{name: "feeder", args: []string{"--listen", rp.listenAddr(), "--sleep", "200ms", "--tables-interval", "1s"}},
		{name: "scheduler", args: []string{"--addr", rp.schedAdr, "--listen", rp.listenAddr(), "--url-base", rp.urlBase,
			"--project-name", "Old BOINC project", "--request-delay", realClientReqDelay.String()}},
		{name: "transitioner", args: []string{"--listen", rp.listenAddr(), "--sleep", "300ms"}},
		{name: "validator", args: []string{"--listen", rp.listenAddr(), "--sleep", "300ms"}},
		{name: "assimilator", args: []string{"--listen", rp.listenAddr(), "--sleep", "300ms", "--results-dir", "results"}},
	})
	rp.users = []realUser{{email: rcImpEmail, auth: rcImpAuth, id: rcImpUserID}}
	rp.startClient(boinc, 0)

	ctx, cancel := context.WithTimeout(context.Background(), rcImpTimeout)
	defer cancel()
	st, err := store.Open(ctx, rp.dsn, store.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatalf("open project database: %v", err)
	}
	defer st.Close()

	// The imported task: reported, valid, credited.
	imported := imp.waitFor(ctx, st, "the imported task reported, valid and credited", func(p rcImpProgress) bool {
		r, ok := p.tasks[rcImpTask]
		return ok && r.ValidateState == int(state.ValidateValid) && r.Credit > 0 && p.userCredit > rcImpUserCr && p.hostCredit > rcImpHostCr
	})
	r := imported.tasks[rcImpTask]
	if r.HostID != rcImpHostID || r.Outcome != int(state.OutcomeSuccess) {
		t.Errorf("imported task %s: host %d outcome %d, want host %d (the client's) and success", rcImpTask, r.HostID, r.Outcome, rcImpHostID)
	}
	t.Logf("%4.0fs imported task valid, credit %.3g; user credit %.8g -> %.8g, host credit %.8g -> %.8g",
		time.Since(begin).Seconds(), r.Credit, rcImpUserCr, imported.userCredit, rcImpHostCr, imported.hostCredit)
	imp.checkUploads()

	// New work: submitted now, fetched by the same host.
	imp.submitNewJobs()
	imp.update()
	done := imp.waitFor(ctx, st, "the new jobs completed by the imported host", func(p rcImpProgress) bool {
		n := 0
		for name, r := range p.tasks {
			if name != rcImpTask && r.HostID == rcImpHostID && r.ValidateState == int(state.ValidateValid) && r.Credit > 0 {
				n++
			}
		}
		return n >= rcImpNewJobs && p.assimilated >= rcImpNewJobs+1
	})
	if done.userCredit <= imported.userCredit || done.hostCredit <= imported.hostCredit {
		t.Errorf("credit after the new jobs: user %.6g host %.6g, want above %.6g and %.6g", done.userCredit, done.hostCredit, imported.userCredit, imported.hostCredit)
	}
	if done.hosts != 1 {
		t.Errorf("%d host rows, want 1: the client must keep its imported host id %d", done.hosts, rcImpHostID)
	}
	imp.checkHost(ctx, st)
	imp.checkAssimilated()
	imp.checkClientLog()
	imp.checkLookupAccount(ctx)
	t.Logf("real BOINC client after the import: done in %s (from the start of the test)", time.Since(begin).Round(time.Second))
}

// rcImport is one run of TestRealBOINCClientImport.
type rcImport struct {
	rp  *realProject
	now int64
	// appFile is the app version's file, as the old project named it;
	// codeSignKey the project's code-signing public key, in BOINC's text.
	appFile, appSig, codeSignKey string
	// inputs: the physical names of the job's three inputs, by open name.
	inputs map[string]string
	// deadline is the task's report deadline.
	deadline int64
}

func (imp *rcImport) masterURL() string { return imp.rp.urlBase + "/" }

// oldProject makes the BOINC project: its keys and files in the project
// directory (which our project keeps: download and upload directories
// are where config.xml put them), its database. It returns the database's
// DSN.
func (imp *rcImport) oldProject() string {
	rp, t := imp.rp, imp.rp.t
	// The old project's code-signing key; ours is the same (key_dir kept).
	offline := t.TempDir()
	rp.taskctl("keys", "generate", "--code-sign-out", offline)
	k, err := keys.ReadPrivateFile(filepath.Join(offline, "code_sign_private"))
	if err != nil {
		t.Fatalf("read the code-signing key: %v", err)
	}
	pub, err := os.ReadFile(filepath.Join(rp.dir, "keys", "code_sign_public"))
	if err != nil {
		t.Fatalf("read the code-signing public key: %v", err)
	}
	imp.codeSignKey = strings.TrimSpace(string(pub))
	appBytes, err := os.ReadFile(rp.app)
	if err != nil {
		t.Fatalf("read the app: %v", err)
	}
	if imp.appSig, err = keys.Sign(k, appBytes); err != nil {
		t.Fatalf("sign the app: %v", err)
	}

	// update_versions puts app files in the download directory as they
	// are; create_work puts inputs in its fan-out (uldl_dir_fanout 1024).
	download := filepath.Join(rp.dir, "download")
	imp.appFile = fmt.Sprintf("%s_1.00_%s", demoapp.AppName, realClientPlatform)
	imp.write(filepath.Join(download, imp.appFile), appBytes, 0o755)
	imp.inputs = map[string]string{
		boincapp.InName:     rcImpJob + "_in",
		boincapp.SharedName: "old_boinc_shared_db",
		boincapp.ParamsName: rcImpJob + "_params",
	}
	for open, name := range imp.inputs {
		imp.write(filepath.Join(download, boinctest.Hash(name, 1024), name), imp.inputBytes(open), 0o644)
	}

	dsn, _ := boinctest.NewDatabase(t)
	imp.deadline = imp.now + int64(rcImpDeadline/time.Second)
	sent := imp.now - 600
	ctx := context.Background()
	insert := func(table string, cols map[string]any) {
		if err := boinctest.Insert(ctx, dsn, table, cols); err != nil {
			t.Fatalf("old project: %v", err)
		}
	}
	created := imp.now - 86400*90
	insert("platform", map[string]any{"id": rcImpPlatID, "create_time": created, "name": realClientPlatform, "user_friendly_name": "Linux on x86_64"})
	insert("app", map[string]any{"id": rcImpAppID, "create_time": created, "name": demoapp.AppName, "user_friendly_name": "BOINC demo"})
	insert("app_version", map[string]any{"id": rcImpAVID, "create_time": created, "appid": rcImpAppID, "version_num": realClientVersion,
		"platformid": rcImpPlatID, "xml_doc": imp.versionDoc(len(appBytes))})
	insert("user", map[string]any{"id": rcImpUserID, "create_time": created, "email_addr": rcImpEmail, "name": "Imported Volunteer",
		"authenticator": rcImpAuth, "total_credit": rcImpUserCr, "expavg_credit": 12.5, "expavg_time": float64(imp.now - 3600), "teamid": 0,
		"cross_project_id": rcImpXCPID, "passwd_hash": passwd.ClientHash(rcImpPassword, rcImpEmail), "email_validated": 1,
		"global_prefs": realClientPrefs(0)})
	insert("host", map[string]any{"id": rcImpHostID, "create_time": created + 60, "userid": rcImpUserID, "rpc_seqno": rcImpSeqno,
		"rpc_time": sent, "total_credit": rcImpHostCr, "expavg_credit": 3.5, "expavg_time": float64(imp.now - 3600), "timezone": 0,
		"domain_name": "volunteer-pc", "on_frac": 0.9, "active_frac": 0.9, "p_ncpus": 2, "p_vendor": "GenuineIntel", "p_model": "old CPU",
		"p_fpops": 3e9, "p_iops": 9e9, "p_membw": 1e9, "os_name": "Linux Debian", "os_version": "6.1.0", "m_nbytes": 8e9, "m_cache": 8e6,
		"m_swap": 2e9, "d_total": 5e11, "d_free": 2e11, "n_bwup": 1e6, "n_bwdown": 5e6, "credit_per_cpu_sec": 0, "venue": "",
		"nresults_today": 1, "avg_turnaround": 4000,
		// BOINC's scheduler stores the md5 of the client's cpid and the
		// user's e-mail address (handle_request.cpp).
		"host_cpid": md5Hex(rcImpCPID + rcImpEmail), "external_ip_addr": "127.0.0.1", "product_name": ""})
	insert("workunit", map[string]any{"id": rcImpWUID, "create_time": sent - 60, "appid": rcImpAppID, "name": rcImpJob, "xml_doc": imp.workunitDoc(),
		"batch": 0, "rsc_fpops_est": 1e9, "rsc_fpops_bound": 1e14, "rsc_memory_bound": 1e8, "rsc_disk_bound": 1e9, "need_validate": 0,
		"canonical_resultid": 0, "canonical_credit": 0, "transition_time": imp.deadline, "delay_bound": int64(rcImpDeadline / time.Second),
		"error_mask": 0, "file_delete_state": 0, "assimilate_state": 0, "hr_class": 0, "opaque": 0, "min_quorum": 1, "target_nresults": 1,
		"max_error_results": 3, "max_total_results": 6, "max_success_results": 3, "result_template_file": "templates/boinc_demo_out",
		"priority": 0})
	insert("result", map[string]any{"id": rcImpResultID, "create_time": sent - 60, "workunitid": rcImpWUID, "server_state": int(state.ServerInProgress),
		"outcome": 0, "client_state": 0, "hostid": rcImpHostID, "userid": rcImpUserID, "report_deadline": imp.deadline, "sent_time": sent,
		"received_time": 0, "name": rcImpTask, "cpu_time": 0, "xml_doc_in": imp.resultDoc(), "xml_doc_out": "", "stderr_out": "", "batch": 0,
		"file_delete_state": 0, "validate_state": 0, "claimed_credit": 0, "granted_credit": 0, "opaque": 0, "random": 4711,
		"app_version_num": realClientVersion, "appid": rcImpAppID, "exit_status": 0, "teamid": 0, "priority": 0, "elapsed_time": 0,
		"flops_estimate": 3e9, "app_version_id": rcImpAVID})
	return dsn
}

func (imp *rcImport) write(path string, b []byte, mode os.FileMode) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		imp.rp.t.Fatal(err)
	}
	if err := os.WriteFile(path, b, mode); err != nil {
		imp.rp.t.Fatal(err)
	}
}

// inputBytes is the content of the imported job's input of open name.
func (imp *rcImport) inputBytes(open string) []byte {
	switch open {
	case boincapp.InName:
		return boincapp.Input(rcImpJob)
	case boincapp.SharedName:
		return boincapp.Shared()
	}
	return boincapp.Params(rcImpJob)
}

// versionDoc is app_version.xml_doc as update_versions writes it: the
// file's URL under the download URL, no md5 (the signature stands for it).
func (imp *rcImport) versionDoc(nbytes int) string {
	return fmt.Sprintf(`<file_info>
    <name>%[1]s</name>
    <url>%[2]s/download/%[1]s</url>
    <executable/>
    <file_signature>
%[3]s</file_signature>
    <nbytes>%[4]d.000000</nbytes>
</file_info>
<app_version>
    <app_name>%[5]s</app_name>
    <version_num>%[6]d</version_num>
    <api_version>7.20.0</api_version>
    <file_ref>
        <file_name>%[1]s</file_name>
        <main_program/>
    </file_ref>
</app_version>
`, imp.appFile, imp.rp.urlBase, imp.appSig, nbytes, demoapp.AppName, realClientVersion)
}

// inputOrder is the order of the job's inputs in its documents.
var inputOrder = []string{boincapp.InName, boincapp.SharedName, boincapp.ParamsName}

// inputURL is where the old project serves an input: its fan-out
// directory under the download URL.
func (imp *rcImport) inputURL(name string) string {
	return imp.rp.urlBase + "/download/" + boinctest.Hash(name, 1024) + "/" + name
}

// workunitDoc is workunit.xml_doc as create_work writes it.
func (imp *rcImport) workunitDoc() string {
	var b strings.Builder
	for _, open := range inputOrder {
		name, data := imp.inputs[open], imp.inputBytes(open)
		fmt.Fprintf(&b, "<file_info>\n    <name>%s</name>\n    <url>%s</url>\n    <md5_cksum>%s</md5_cksum>\n    <nbytes>%d</nbytes>\n</file_info>\n",
			name, imp.inputURL(name), md5Hex(string(data)), len(data))
	}
	fmt.Fprintf(&b, "<workunit>\n    <command_line>--rounds %d --trickle-wait 0</command_line>\n", rcImpRounds)
	for _, open := range inputOrder {
		fmt.Fprintf(&b, "    <file_ref>\n        <file_name>%s</file_name>\n        <open_name>%s</open_name>\n", imp.inputs[open], open)
		if open == boincapp.InName {
			b.WriteString("        <copy_file/>\n")
		}
		b.WriteString("    </file_ref>\n")
	}
	b.WriteString("</workunit>\n")
	return b.String()
}

// rcImpOutputs are the task's outputs: physical suffix, open name,
// max_nbytes, validated.
var rcImpOutputs = []struct {
	open      string
	maxNbytes int
	validate  bool
}{
	{boincapp.OutName, 4096, true},
	{boincapp.LogName, 2000000, false},
}

// resultDoc is result.xml_doc_in as create_work writes it in a project made
// by make_project (dont_generate_upload_certificates): no <xml_signature>.
func (imp *rcImport) resultDoc() string {
	var b strings.Builder
	for i, o := range rcImpOutputs {
		fmt.Fprintf(&b, "<file_info>\n    <name>%s_%d</name>\n    <generated_locally/>\n    <upload_when_present/>\n    <max_nbytes>%d</max_nbytes>\n    <url>%s/file_upload_handler</url>\n</file_info>\n",
			rcImpTask, i, o.maxNbytes, imp.rp.urlBase)
	}
	fmt.Fprintf(&b, "<result>\n    <name>%s</name>\n    <wu_name>%s</wu_name>\n", rcImpTask, rcImpJob)
	for i, o := range rcImpOutputs {
		fmt.Fprintf(&b, "    <file_ref>\n        <file_name>%s_%d</file_name>\n        <open_name>%s</open_name>\n", rcImpTask, i, o.open)
		if o.open == boincapp.OutName {
			b.WriteString("        <copy_file/>\n")
		} else {
			b.WriteString("        <no_validate/>\n")
		}
		b.WriteString("    </file_ref>\n")
	}
	b.WriteString("</result>\n")
	return b.String()
}

// clientState writes the client's data directory as a 7.20 client attached
// to the old project has it (client/cs_statefile.cpp, client_types.cpp,
// result.cpp, project.cpp write these elements): the project with its
// scheduler URL (BOINC's /cgi), the user's and host's ids and credit, the
// host's rpc_seqno and cpid; the app, the version's file (downloaded and
// verified) and the version; the job with two inputs present and one yet
// to download; the task, waiting for that download. The account file is
// written by startClient.
func (imp *rcImport) clientState() {
	rp := imp.rp
	dir := filepath.Join(rp.dir, "client0")
	proj := filepath.Join(dir, "projects", strings.TrimSuffix(strings.TrimPrefix(accountFileName(imp.masterURL()), "account_"), ".xml"))
	appBytes, err := os.ReadFile(rp.app)
	if err != nil {
		rp.t.Fatal(err)
	}
	imp.write(filepath.Join(proj, imp.appFile), appBytes, 0o755)
	for _, open := range []string{boincapp.SharedName, boincapp.ParamsName} {
		imp.write(filepath.Join(proj, imp.inputs[open]), imp.inputBytes(open), 0o644)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<client_state>
<host_info>
    <timezone>0</timezone>
    <domain_name>volunteer-pc</domain_name>
    <ip_addr>127.0.0.1</ip_addr>
    <host_cpid>%s</host_cpid>
    <p_ncpus>2</p_ncpus>
    <p_vendor>GenuineIntel</p_vendor>
    <p_model>old CPU</p_model>
    <p_fpops>3000000000.000000</p_fpops>
    <p_iops>9000000000.000000</p_iops>
    <p_membw>1000000000.000000</p_membw>
    <p_calculated>%d.000000</p_calculated>
    <m_nbytes>8000000000.000000</m_nbytes>
    <m_cache>8000000.000000</m_cache>
    <m_swap>2000000000.000000</m_swap>
    <d_total>500000000000.000000</d_total>
    <d_free>200000000000.000000</d_free>
    <os_name>Linux Debian</os_name>
    <os_version>6.1.0</os_version>
</host_info>
<platform_name>%s</platform_name>
<core_client_major_version>7</core_client_major_version>
<core_client_minor_version>20</core_client_minor_version>
<core_client_release>5</core_client_release>
<project>
    <master_url>%s</master_url>
    <project_name>Old BOINC project</project_name>
    <symstore></symstore>
    <user_name>Imported Volunteer</user_name>
    <team_name></team_name>
    <host_venue></host_venue>
    <email_hash>%s</email_hash>
    <cross_project_id>%s</cross_project_id>
    <external_cpid></external_cpid>
    <cpid_time>%d.000000</cpid_time>
    <user_total_credit>%f</user_total_credit>
    <user_expavg_credit>12.500000</user_expavg_credit>
    <user_create_time>%d.000000</user_create_time>
    <rpc_seqno>%d</rpc_seqno>
    <userid>%d</userid>
    <teamid>0</teamid>
    <hostid>%d</hostid>
    <host_total_credit>%f</host_total_credit>
    <host_expavg_credit>3.500000</host_expavg_credit>
    <host_create_time>%d.000000</host_create_time>
    <nrpc_failures>0</nrpc_failures>
    <master_fetch_failures>0</master_fetch_failures>
    <min_rpc_time>0.000000</min_rpc_time>
    <next_rpc_time>0.000000</next_rpc_time>
    <rec>0.000000</rec>
    <rec_time>%d.000000</rec_time>
    <resource_share>100.000000</resource_share>
    <duration_correction_factor>1.000000</duration_correction_factor>
    <sched_rpc_pending>0</sched_rpc_pending>
    <send_time_stats_log>0</send_time_stats_log>
    <send_job_log>0</send_job_log>
    <njobs_success>3</njobs_success>
    <njobs_error>0</njobs_error>
    <elapsed_time>12.000000</elapsed_time>
    <last_rpc_time>%d.000000</last_rpc_time>
    <scheduler_url>%scgi</scheduler_url>
    <code_sign_key>
%s
</code_sign_key>
</project>
<app>
    <name>%s</name>
    <user_friendly_name>BOINC demo</user_friendly_name>
    <non_cpu_intensive>0</non_cpu_intensive>
</app>
`, rcImpCPID, imp.now-86400*30, realClientPlatform, imp.masterURL(), md5Hex(rcImpEmail), rcImpXCPID, imp.now-86400*90,
		rcImpUserCr, imp.now-86400*90, rcImpSeqno, rcImpUserID, rcImpHostID, rcImpHostCr, imp.now-86400*90+60, imp.now-600,
		imp.now-600, imp.masterURL(), imp.codeSignKey, demoapp.AppName)
	// The version's file: downloaded and its signature checked.
	fmt.Fprintf(&b, `<file>
    <name>%[1]s</name>
    <nbytes>%[2]d.000000</nbytes>
    <max_nbytes>0.000000</max_nbytes>
    <status>1</status>
    <executable/>
    <signature_required/>
    <file_signature>
%[3]s
</file_signature>
    <download_url>%[4]s/download/%[1]s</download_url>
</file>
`, imp.appFile, len(appBytes), strings.TrimSpace(imp.appSig), rp.urlBase)
	// The inputs: "in" yet to download (status 0), the others here.
	for _, open := range inputOrder {
		name, data := imp.inputs[open], imp.inputBytes(open)
		status := 1
		if open == boincapp.InName {
			status = 0
		}
		fmt.Fprintf(&b, "<file>\n    <name>%s</name>\n    <nbytes>%d.000000</nbytes>\n    <max_nbytes>0.000000</max_nbytes>\n    <md5_cksum>%s</md5_cksum>\n    <status>%d</status>\n    <download_url>%s</download_url>\n</file>\n",
			name, len(data), md5Hex(string(data)), status, imp.inputURL(name))
	}
	// The outputs: not made yet; no upload certificate.
	for i, o := range rcImpOutputs {
		fmt.Fprintf(&b, "<file>\n    <name>%s_%d</name>\n    <nbytes>0.000000</nbytes>\n    <max_nbytes>%d.000000</max_nbytes>\n    <status>0</status>\n    <upload_url>%s/file_upload_handler</upload_url>\n</file>\n",
			rcImpTask, i, o.maxNbytes, rp.urlBase)
	}
	fmt.Fprintf(&b, `<app_version>
    <app_name>%[1]s</app_name>
    <version_num>%[2]d</version_num>
    <platform>%[3]s</platform>
    <api_version>7.20.0</api_version>
    <avg_ncpus>1.000000</avg_ncpus>
    <flops>3000000000.000000</flops>
    <file_ref>
        <file_name>%[4]s</file_name>
        <main_program/>
    </file_ref>
</app_version>
<workunit>
    <name>%[5]s</name>
    <app_name>%[1]s</app_name>
    <version_num>%[2]d</version_num>
    <rsc_fpops_est>1000000000.000000</rsc_fpops_est>
    <rsc_fpops_bound>100000000000000.000000</rsc_fpops_bound>
    <rsc_memory_bound>100000000.000000</rsc_memory_bound>
    <rsc_disk_bound>1000000000.000000</rsc_disk_bound>
    <command_line>
--rounds %[6]d --trickle-wait 0
    </command_line>
`, demoapp.AppName, realClientVersion, realClientPlatform, imp.appFile, rcImpJob, rcImpRounds)
	for _, open := range inputOrder {
		fmt.Fprintf(&b, "    <file_ref>\n        <file_name>%s</file_name>\n        <open_name>%s</open_name>\n", imp.inputs[open], open)
		if open == boincapp.InName {
			b.WriteString("        <copy_file/>\n")
		}
		b.WriteString("    </file_ref>\n")
	}
	fmt.Fprintf(&b, `</workunit>
<result>
    <name>%s</name>
    <final_cpu_time>0.000000</final_cpu_time>
    <final_elapsed_time>0.000000</final_elapsed_time>
    <exit_status>0</exit_status>
    <state>1</state>
    <platform>%s</platform>
    <version_num>%d</version_num>
    <wu_name>%s</wu_name>
    <report_deadline>%d.000000</report_deadline>
    <received_time>%d.000000</received_time>
`, rcImpTask, realClientPlatform, realClientVersion, rcImpJob, imp.deadline, imp.now-600)
	for i, o := range rcImpOutputs {
		fmt.Fprintf(&b, "    <file_ref>\n        <file_name>%s_%d</file_name>\n        <open_name>%s</open_name>\n", rcImpTask, i, o.open)
		if o.open == boincapp.OutName {
			b.WriteString("        <copy_file/>\n")
		}
		b.WriteString("    </file_ref>\n")
	}
	b.WriteString("</result>\n</client_state>\n")
	imp.write(filepath.Join(dir, "client_state.xml"), []byte(b.String()), 0o644)
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// rcImpTaskRow is an instance as the test reads it.
type rcImpTaskRow struct {
	Name          string  `db:"name"`
	HostID        int64   `db:"hostid"`
	ServerState   int     `db:"server_state"`
	Outcome       int     `db:"outcome"`
	ValidateState int     `db:"validate_state"`
	Credit        float64 `db:"granted_credit"`
}

// rcImpProgress is what the database says.
type rcImpProgress struct {
	hosts                  int
	userCredit, hostCredit float64
	tasks                  map[string]rcImpTaskRow
	assimilated            int
}

func (p rcImpProgress) String() string {
	var ts []string
	for _, r := range p.tasks {
		ts = append(ts, fmt.Sprintf("%s: host %d %s outcome %d validate %d credit %.3g", r.Name, r.HostID,
			state.ServerState(r.ServerState), r.Outcome, r.ValidateState, r.Credit))
	}
	return fmt.Sprintf("hosts %d, user credit %.6g, host credit %.6g, assimilated %d, tasks [%s]",
		p.hosts, p.userCredit, p.hostCredit, p.assimilated, strings.Join(ts, "; "))
}

// progress reads the project: read-only queries, so they live here.
func (imp *rcImport) progress(ctx context.Context, st *store.Store) (rcImpProgress, error) {
	p := rcImpProgress{tasks: map[string]rcImpTaskRow{}}
	db := st.DB()
	if err := db.GetContext(ctx, &p.hosts, `SELECT COUNT(*) FROM host`); err != nil {
		return p, err
	}
	if err := db.GetContext(ctx, &p.userCredit, `SELECT total_credit FROM user WHERE id = ?`, rcImpUserID); err != nil {
		return p, err
	}
	if err := db.GetContext(ctx, &p.hostCredit, `SELECT total_credit FROM host WHERE id = ?`, rcImpHostID); err != nil {
		return p, err
	}
	if err := db.GetContext(ctx, &p.assimilated, `SELECT COUNT(*) FROM workunit WHERE assimilate_state = ?`, int(state.AssimilateDone)); err != nil {
		return p, err
	}
	var rows []rcImpTaskRow
	if err := db.SelectContext(ctx, &rows, `SELECT name, hostid, server_state, outcome, validate_state, granted_credit FROM result`); err != nil {
		return p, err
	}
	for _, r := range rows {
		p.tasks[r.Name] = r
	}
	return p, nil
}

// waitFor polls the project until ok, failing the test after the timeout
// or if a program exits.
func (imp *rcImport) waitFor(ctx context.Context, st *store.Store, what string, ok func(rcImpProgress) bool) rcImpProgress {
	rp, t := imp.rp, imp.rp.t
	last := ""
	for {
		p, err := imp.progress(ctx, st)
		if err == nil {
			if s := p.String(); s != last {
				t.Logf("%s", s)
				last = s
			}
			if ok(p) {
				return p
			}
		}
		if p := rp.exited(); p != nil {
			rp.dumpLogs()
			t.Fatalf("%s exited while waiting for %s: %v (log %s)", p.name, what, p.err, p.log)
		}
		select {
		case <-ctx.Done():
			rp.dumpLogs()
			t.Fatalf("after %s: not %s; last: %s", rcImpTimeout, what, last)
		case <-time.After(time.Second):
		}
	}
}

// checkUploads checks the task's outputs arrived without certificates,
// under the import's permits, and that the client downloaded the missing
// input from the old URL and nothing else it held.
func (imp *rcImport) checkUploads() {
	rp, t := imp.rp, imp.rp.t
	root, err := os.OpenRoot(filepath.Join(rp.dir, "upload"))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for i, o := range rcImpOutputs {
		name := fmt.Sprintf("%s_%d", rcImpTask, i)
		p, ok, err := outputfile.FindPermit(root, 1024, name)
		if err != nil || !ok || p.MaxNbytes != int64(o.maxNbytes) || p.Expires != imp.deadline+3600 {
			t.Errorf("permit of %s = %+v, %v, %v; want max_nbytes %d, expiry the deadline %d plus the default grace", name, p, ok, err, o.maxNbytes, imp.deadline)
		}
	}
	b, err := os.ReadFile(rp.clients[0].log)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	for i := range rcImpOutputs {
		name := fmt.Sprintf("%s_%d", rcImpTask, i)
		if !strings.Contains(log, "Finished upload of "+name) {
			t.Errorf("client's event log has no \"Finished upload of %s\"", name)
		}
	}
	if want := "Started download of " + imp.inputs[boincapp.InName]; !strings.Contains(log, want) {
		t.Errorf("client's event log has no %q: the input it lacked was not downloaded", want)
	}
	for _, name := range []string{imp.appFile, imp.inputs[boincapp.SharedName], imp.inputs[boincapp.ParamsName]} {
		if strings.Contains(log, "Started download of "+name+"\n") {
			t.Errorf("the client downloaded %s again, which it held", name)
		}
	}
}

// submitNewJobs submits jobs of the imported app as an operator does after
// the move: the app's templates (the real-client test's, whose command line
// each job replaces with a short one), its shared input, the jobs.
func (imp *rcImport) submitNewJobs() {
	rp, t := imp.rp, imp.rp.t
	files := t.TempDir()
	write := func(name string, b []byte) string {
		path := filepath.Join(files, name)
		imp.write(path, b, 0o644)
		return path
	}
	rp.taskctl("app", "templates", "--app", demoapp.AppName,
		"--input-template", write("input_template.xml", []byte(realClientInputTemplate)),
		"--output-template", write("output_template.xml", []byte(realClientOutputTemplate)))
	rp.taskctl("file", "stage", realClientShared, write("shared", boincapp.Shared()))
	for i := range rcImpNewJobs {
		name := fmt.Sprintf("after_import_%d", i)
		rp.taskctl("job", "submit", "--app", demoapp.AppName, "--name", name,
			"--input", write(name+"_in", boincapp.Input(name)), "--input", "shared:"+realClientShared, "--input", write(name+"_params", boincapp.Params(name)),
			"--command-line", fmt.Sprintf("--rounds %d --trickle-wait 0", rcImpRounds),
			"--min-quorum", "1", "--target-nresults", "1", "--delay-bound", realClientDelay.String(),
			"--rsc-fpops-est", "1e9", "--rsc-fpops-bound", "1e14")
	}
}

// update is the volunteer's "Update": a scheduler request now, whatever
// back-off the client's earlier requests for work that found none left.
func (imp *rcImport) update() {
	if _, err := imp.boinccmd(context.Background(), "--project", imp.masterURL(), "update"); err != nil {
		imp.rp.t.Logf("boinccmd update: %v", err)
	}
}

func (imp *rcImport) boinccmd(ctx context.Context, args ...string) (string, error) {
	u := imp.rp.users[0]
	auth, err := os.ReadFile(filepath.Join(u.dataDir, "gui_rpc_auth.cfg"))
	if err != nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(cctx, "boinccmd", append([]string{"--host", fmt.Sprintf("127.0.0.1:%d", u.guiPort),
		"--passwd", strings.TrimSpace(string(auth))}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("boinccmd %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// checkHost checks the host row kept the client's identity: its id, an
// rpc_seqno gone on from the imported one, the client's cpid.
func (imp *rcImport) checkHost(ctx context.Context, st *store.Store) {
	t := imp.rp.t
	var h struct {
		UserID int64  `db:"userid"`
		Seqno  int64  `db:"rpc_seqno"`
		CPID   string `db:"host_cpid"`
	}
	if err := st.DB().GetContext(ctx, &h, `SELECT userid, rpc_seqno, host_cpid FROM host WHERE id = ?`, rcImpHostID); err != nil {
		t.Fatalf("read host %d: %v", rcImpHostID, err)
	}
	if h.UserID != rcImpUserID || h.Seqno <= rcImpSeqno {
		t.Errorf("host %d: user %d rpc_seqno %d, want user %d and rpc_seqno above the imported %d", rcImpHostID, h.UserID, h.Seqno, rcImpUserID, rcImpSeqno)
	}
	b, err := os.ReadFile(filepath.Join(imp.rp.users[0].dataDir, "client_state.xml"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{fmt.Sprintf("<hostid>%d</hostid>", rcImpHostID), "<host_cpid>" + rcImpCPID + "</host_cpid>"} {
		if !strings.Contains(s, want) {
			t.Errorf("client_state.xml after the run has no %s: the client changed its identity", want)
		}
	}
	m := regexp.MustCompile(`<rpc_seqno>(\d+)</rpc_seqno>`).FindStringSubmatch(s)
	if m == nil {
		t.Errorf("client_state.xml has no rpc_seqno")
	} else if n, _ := strconv.Atoi(m[1]); n <= rcImpSeqno {
		t.Errorf("client's rpc_seqno %d, want it gone on from %d (a new host id restarts it at 0)", n, rcImpSeqno)
	}
	t.Logf("host %d: rpc_seqno %d in the database, host_cpid %s", rcImpHostID, h.Seqno, h.CPID)
}

// checkAssimilated checks the imported job's assimilated output is what
// the app computes from its inputs.
func (imp *rcImport) checkAssimilated() {
	t := imp.rp.t
	got, err := os.ReadFile(filepath.Join(imp.rp.dir, "results", rcImpJob, boincapp.OutName))
	if err != nil {
		t.Fatalf("imported job's assimilated output: %v", err)
	}
	want := boincapp.Output(boincapp.Input(rcImpJob), boincapp.Shared(), boincapp.Params(rcImpJob), rcImpRounds)
	if string(got) != string(want) {
		t.Errorf("imported job's assimilated %q = %q, want %q", boincapp.OutName, got, want)
	}
}

// checkClientLog checks the client took its state file as written: no
// complaint about a part of it, no upload refused.
func (imp *rcImport) checkClientLog() {
	b, err := os.ReadFile(imp.rp.clients[0].log)
	if err != nil {
		imp.rp.t.Fatal(err)
	}
	for _, bad := range []string{"in state file", "discarding", "Can't", "permanent upload error", "Error reported by file upload server",
		"Missing code sign key signature", "signature verification"} {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, bad) {
				imp.rp.t.Errorf("client's event log: %s", line)
			}
		}
	}
}

// checkLookupAccount attaches as BOINC Manager does with e-mail and
// password: the client sends md5(password + e-mail), which the imported
// user's BOINC password hash is; the imported account key must come back,
// and none for a wrong password.
func (imp *rcImport) checkLookupAccount(ctx context.Context) {
	t := imp.rp.t
	lookup := func(password string) string {
		out, err := imp.boinccmd(ctx, "--lookup_account", imp.masterURL(), rcImpEmail, password)
		if err != nil {
			t.Fatalf("%v", err)
		}
		return out
	}
	if out := lookup(rcImpPassword); !strings.Contains(out, "account key: "+rcImpAuth) {
		imp.rp.dumpLogs()
		t.Fatalf("boinccmd --lookup_account with the volunteer's old password = %q, want account key %s", out, rcImpAuth)
	} else {
		t.Logf("boinccmd --lookup_account with the old password: %s", strings.TrimSpace(out))
	}
	if out := lookup("not the password"); strings.Contains(out, "account key:") {
		t.Fatalf("boinccmd --lookup_account with a wrong password = %q, want no account key", out)
	}
}
