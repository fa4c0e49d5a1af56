package e2e

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/boincapp"
	"github.com/taskserver/taskserver/internal/demoapp"
	"github.com/taskserver/taskserver/internal/jobs"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// Settings of the real-client run. The jobs are tiny (the demo app takes
// milliseconds), so the time goes into the client's own pacing: attach,
// request_delay, work-fetch checks and the back-off after a task error.
const (
	realClientJobs      = 6                // jobs that succeed; plus one that fails
	realClientWantBoth  = 3                // jobs both clients must have completed
	realClientTimeout   = 8 * time.Minute  // give up after this long
	realClientPoll      = 3 * time.Second  // DB poll interval
	realClientDelay     = 5 * time.Minute  // job deadline: short, so the client reports at once (PROTOCOL.md §9.3)
	realClientReqDelay  = 5 * time.Second  // scheduler request_delay
	realClientStopGrace = 15 * time.Second // SIGTERM to SIGKILL
	realClientPlatform  = "x86_64-pc-linux-gnu"
	realClientVersion   = 100
	realClientFailJob   = "rc_fail"
	realClientJobPrefix = "rc_job_"
	realClientShared    = "rc_shared" // the shared, sticky input's staged name
	// realClientRounds is the app's work per job (--rounds): about a second.
	realClientRounds = 20000000
	// realClientTrickleWait is how long the app waits for a trickle-down
	// (--trickle-wait); one comes after two trickle-ups, some 10 s apart
	// when the machine is idle. The app stops waiting as soon as one comes,
	// so the bound only matters on a loaded machine (CI runs every package
	// at once under -race), where a round of client RPC, trickle handler
	// pass and client RPC has taken over a minute.
	realClientTrickleWait = 180
	// realClientUpThrottle limits client0's uploads (bytes/s) until the
	// test restarts it in the middle of a "log" upload, so that upload is
	// resumed.
	realClientUpThrottle = 20000
	// realClientResumed is what the app writes to stderr (the result's
	// stderr_out) when it resumes from a checkpoint.
	realClientResumed = "boinc_demo: resumed from the checkpoint"
	// realClientTrickleEcho starts each trickle-down the test's trickle
	// handler sends back.
	realClientTrickleEcho = "echo of trickle-up"
)

// The app's templates, in BOINC's format: the job's own input ("in",
// copied into the slot), the shared sticky file ("shared"), the gzip'd
// parameters ("params"), the command line; two outputs, "out" (validated)
// and "log" (about 300 KB, not validated).
var (
	realClientInputTemplate = fmt.Sprintf(`<input_template>
<file_info>
    <number>0</number>
</file_info>
<file_info>
    <number>1</number>
    <sticky/>
    <no_delete/>
</file_info>
<file_info>
    <number>2</number>
    <gzip/>
</file_info>
<workunit>
    <file_ref>
        <file_number>0</file_number>
        <open_name>%s</open_name>
        <copy_file/>
    </file_ref>
    <file_ref>
        <file_number>1</file_number>
        <open_name>%s</open_name>
    </file_ref>
    <file_ref>
        <file_number>2</file_number>
        <open_name>%s</open_name>
    </file_ref>
    <command_line>--rounds %d --trickle-wait %d</command_line>
</workunit>
</input_template>
`, boincapp.InName, boincapp.SharedName, boincapp.ParamsName, realClientRounds, realClientTrickleWait)
	realClientOutputTemplate = fmt.Sprintf(`<output_template>
<file_info>
    <name><OUTFILE_0/></name>
    <generated_locally/>
    <upload_when_present/>
    <max_nbytes>4096</max_nbytes>
    <url><UPLOAD_URL/></url>
</file_info>
<file_info>
    <name><OUTFILE_1/></name>
    <generated_locally/>
    <upload_when_present/>
    <max_nbytes>2000000</max_nbytes>
    <url><UPLOAD_URL/></url>
</file_info>
<result>
    <file_ref>
        <file_name><OUTFILE_0/></file_name>
        <open_name>%s</open_name>
        <copy_file/>
    </file_ref>
    <file_ref>
        <file_name><OUTFILE_1/></file_name>
        <open_name>%s</open_name>
        <no_validate/>
    </file_ref>
</result>
</output_template>
`, boincapp.OutName, boincapp.LogName)
)

// TestRealBOINCClient runs the whole server against two real BOINC clients
// (Debian boinc-client 7.20.5), each attached with its own account through
// an account file, running a real BOINC-API application (boinc_demo, C++
// on Debian's libboinc-app-dev), and checks that jobs flow all the way:
// signed app download; three inputs (the job's own, one shared by every
// job and sticky, one gzip'd) and a command line, as the app's BOINC
// templates describe; compute; two outputs uploaded (one of about 300 KB);
// report; validation with a quorum of two hosts; credit; assimilation with
// both outputs; that a job whose app fails comes back as a client error
// and is retried; and that the sticky file is downloaded once per client.
//
// It runs when `boinc` is on PATH, or always with TASKSERVER_REAL_CLIENT=1
// (then a missing client or app is a failure). `make test-client` installs
// the client, builds the app and runs it.
func TestRealBOINCClient(t *testing.T) {
	boinc, app := realClientPrereqs(t)
	bin := buildPrograms(t)
	rp := newRealProject(t, bin)
	rp.app = app
	defer rp.stopAll() // also on t.Fatal: clients first, then daemons

	rp.setup()
	rp.startDaemons()
	for i := range rp.users {
		rp.startClient(boinc, i)
	}

	ctx, cancel := context.WithTimeout(context.Background(), realClientTimeout)
	defer cancel()
	st, err := store.Open(ctx, rp.dsn, store.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatalf("open project database: %v", err)
	}
	defer st.Close()

	start := time.Now()
	var last realProgress
	for {
		pg, err := rp.progress(ctx, st)
		if err != nil {
			t.Logf("%4.0fs progress unavailable: %v", time.Since(start).Seconds(), err)
		} else {
			if pg.String() != last.String() {
				t.Logf("%4.0fs %s", time.Since(start).Seconds(), pg)
			}
			last = pg
			if pg.done() {
				break
			}
		}
		if rp.restarted == "" {
			rp.restartDuringUpload(boinc)
		}
		if p := rp.exited(); p != nil {
			rp.dumpLogs()
			t.Fatalf("%s exited during the run: %v (log %s)", p.name, p.err, p.log)
		}
		select {
		case <-ctx.Done():
			rp.dumpLogs()
			t.Fatalf("after %s: want >= %d jobs completed by both clients (valid, credited, assimilated with the right output) and the FAIL job reported as a client error and retried; got %s\nproblems: %s",
				realClientTimeout, realClientWantBoth, last, strings.Join(last.problems, "; "))
		case <-time.After(realClientPoll):
		}
	}
	if len(last.problems) > 0 {
		rp.dumpLogs()
		t.Errorf("wrong results: %s", strings.Join(last.problems, "; "))
	}
	rp.checkSticky(last)
	rp.checkResumed(ctx, st)
	rp.checkCheckpoints()
	rp.checkGzip(ctx, st)
	rp.checkLookupAccount(ctx)
	fmt.Printf("real BOINC client: %d jobs completed\n", last.bothDone)
	t.Logf("real BOINC client: %d jobs completed (by both clients) in %s", last.bothDone, time.Since(start).Round(time.Second))
}

// realProject is one project with its daemons and clients.
type realProject struct {
	t        *testing.T
	bin      string
	dir      string // project directory
	dsn      string
	config   string
	urlBase  string // http://127.0.0.1:PORT, the master URL without the slash
	schedAdr string
	app      string // the BOINC-API application's program
	users    []realUser
	// sharedFile is the physical name of the shared, sticky input.
	sharedFile string
	// restarted names the output client0 was uploading when the test
	// restarted it ("" before).
	restarted string
	daemons   []*realProc
	clients   []*realProc
	stopped   bool
	// ccOptions holds, by client, extra elements for the <options> of its
	// cc_config.xml (a coprocessor, a CPU count).
	ccOptions map[int]string
	// noUpThrottle starts client0 without the upload limit that
	// restartDuringUpload needs.
	noUpThrottle bool
	// useCoprocs lists the clients started without --no_gpus, which
	// makes a client exclude every coprocessor, those declared in
	// cc_config.xml too.
	useCoprocs map[int]bool
	// ports are the ports listenAddr gave out, none twice.
	ports map[int]bool
}

type realUser struct {
	email, auth string
	id          int64
	dataDir     string
	guiPort     int
}

// realClientPassword is the password the operator gives the first
// account, with which its volunteer attaches by e-mail and password.
const realClientPassword = "operator-set pw"

func newRealProject(t *testing.T, bin string) *realProject {
	dir := t.TempDir()
	// TASKSERVER_REAL_CLIENT_KEEP=1 keeps the project and the clients' data
	// directories (logs, client_state.xml) for a look after the run.
	if os.Getenv("TASKSERVER_REAL_CLIENT_KEEP") == "1" {
		var err error
		if dir, err = os.MkdirTemp("", "taskserver-realclient-"); err != nil {
			t.Fatalf("make project directory: %v", err)
		}
		t.Logf("project and client directories kept in %s", dir)
	}
	port := realFreePort(t)
	rp := &realProject{
		t:        t,
		bin:      bin,
		dir:      dir,
		dsn:      storetest.NewDatabase(t),
		config:   filepath.Join(dir, "project.yaml"),
		urlBase:  fmt.Sprintf("http://127.0.0.1:%d", port),
		schedAdr: fmt.Sprintf("127.0.0.1:%d", port),
		ports:    map[int]bool{port: true},
	}
	for _, d := range []string{"download", "upload", "results", "archives", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatalf("make project directory: %v", err)
		}
	}
	shm := filepath.Join(dir, "shm-cache")
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		// t.TempDir's last element is only a counter ("002"): the port
		// makes the name unique among concurrent runs on one machine.
		shm = filepath.Join("/dev/shm", fmt.Sprintf("taskserver-rc-%d-%s", port, filepath.Base(dir)))
		t.Cleanup(func() { _ = os.Remove(shm); _ = os.Remove(shm + ".lock") })
	}
	conf := fmt.Sprintf(`# Real-client test project; keys are flag names.
db-dsn: %q
project-dir: %q
download-dir: download
upload-dir: upload
shm-path: %q
log-level: debug
app: %s
url-base: %q
`, rp.dsn, dir, shm, demoapp.AppName, rp.urlBase)
	if err := os.WriteFile(rp.config, []byte(conf), 0o600); err != nil {
		t.Fatalf("write project config: %v", err)
	}
	return rp
}

// taskctl runs the operator tool on the project and returns its stdout.
func (rp *realProject) taskctl(args ...string) string {
	rp.t.Helper()
	cmd := exec.Command(filepath.Join(rp.bin, "taskctl"), append([]string{"--config", rp.config}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		rp.t.Fatalf("taskctl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// setup makes the keys, the catalog with the signed app version, two
// accounts, the shared input and the jobs.
func (rp *realProject) setup() {
	t := rp.t
	// The code-signing private key is kept out of the project, as an
	// operator keeps it off the server.
	offline := t.TempDir()
	rp.taskctl("keys", "generate", "--code-sign-out", offline)
	rp.taskctl("platform", "add", "--name", realClientPlatform)
	rp.taskctl("app", "add", "--name", demoapp.AppName)
	rp.taskctl("app-version", "add", "--app", demoapp.AppName, "--platform", realClientPlatform,
		"--version-num", strconv.Itoa(realClientVersion), "--file", rp.app,
		"--code-sign-key", filepath.Join(offline, "code_sign_private"))

	for i := 0; i < 2; i++ {
		email := fmt.Sprintf("realclient%d@example.org", i)
		auth := strings.TrimSpace(rp.taskctl("user", "create", "--email", email, "--name", fmt.Sprintf("realclient%d", i)))
		if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(auth) {
			t.Fatalf("taskctl user create printed %q, want a 32-hex-digit authenticator", auth)
		}
		rp.users = append(rp.users, realUser{email: email, auth: auth})
	}
	rp.taskctl("user", "set", "--email", rp.users[0].email, "--password", realClientPassword)

	// The app's BOINC templates, the shared input and the jobs, as an
	// operator who knows create_work makes them.
	files := t.TempDir()
	write := func(name string, b []byte) string {
		path := filepath.Join(files, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatalf("write %s: %v", name, err)
		}
		return path
	}
	rp.taskctl("app", "templates", "--app", demoapp.AppName,
		"--input-template", write("input_template.xml", []byte(realClientInputTemplate)),
		"--output-template", write("output_template.xml", []byte(realClientOutputTemplate)))
	staged := rp.taskctl("file", "stage", realClientShared, write("shared", boincapp.Shared()))
	rp.sharedFile = jobs.SharedName(realClientShared, fmt.Sprintf("%x", md5.Sum(boincapp.Shared())))
	if !strings.Contains(staged, rp.sharedFile) {
		t.Fatalf("taskctl file stage printed %q, want the physical name %s", staged, rp.sharedFile)
	}
	submit := func(name string, in []byte) {
		args := []string{"job", "submit", "--app", demoapp.AppName, "--name", name,
			"--input", write(name+"_in", in), "--input", "shared:" + realClientShared, "--input", write(name+"_params", boincapp.Params(name)),
			"--delay-bound", realClientDelay.String(), "--rsc-fpops-est", "1e9", "--rsc-fpops-bound", "1e14"} // the client aborts a task past bound/flops seconds: room for --trickle-wait
		if rounds := realClientRoundsOf(name); rounds != realClientRounds {
			args = append(args, "--command-line", fmt.Sprintf("--rounds %d --trickle-wait %d", rounds, realClientTrickleWait))
		}
		rp.taskctl(args...)
	}
	for i := 0; i < realClientJobs; i++ {
		name := fmt.Sprintf("%s%d", realClientJobPrefix, i)
		submit(name, boincapp.Input(name))
	}
	// The failing job last: a task error makes the client wait 1-2 minutes
	// before its next request (PROTOCOL.md §9.4), so it should not be the
	// first job a client gets.
	submit(realClientFailJob, append([]byte("FAIL: this job's app exits 3\n"), boincapp.Input(realClientFailJob)...))
}

// realClientRoundsOf is job's --rounds: the input template's, except for
// the last job, whose own command line replaces the template's.
func realClientRoundsOf(job string) int64 {
	if job == fmt.Sprintf("%s%d", realClientJobPrefix, realClientJobs-1) {
		return realClientRounds / 2
	}
	return realClientRounds
}

// realDaemon is one daemon process to start: name names its log; program
// is the daemon's binary ("" for name).
type realDaemon struct {
	name, program string
	args          []string
}

// listenAddr returns a free loopback address for a daemon's --listen, a
// port it has not given out before: the daemons are listed before any of
// them binds, and a port found free and closed can come back from the
// kernel on the next call (two daemons were once given the same one).
func (rp *realProject) listenAddr() string {
	for {
		if p := realFreePort(rp.t); !rp.ports[p] {
			rp.ports[p] = true
			return fmt.Sprintf("127.0.0.1:%d", p)
		}
	}
}

// startDaemons starts every daemon on the project. db_purge keeps finished
// jobs for an hour so the test can still read them.
func (rp *realProject) startDaemons() {
	listen := rp.listenAddr
	rp.startDaemonList([]realDaemon{
		{name: "feeder", args: []string{"--listen", listen(), "--sleep", "200ms", "--tables-interval", "1s"}},
		{name: "scheduler", args: []string{"--addr", rp.schedAdr, "--listen", listen(), "--url-base", rp.urlBase, "--project-name", "Real client test",
			"--request-delay", realClientReqDelay.String()}},
		{name: "transitioner", args: []string{"--listen", listen(), "--sleep", "300ms"}},
		{name: "validator", args: []string{"--listen", listen(), "--sleep", "300ms"}},
		{name: "assimilator", args: []string{"--listen", listen(), "--sleep", "300ms", "--results-dir", "results"}},
		{name: "file_deleter", args: []string{"--listen", listen(), "--sleep", "500ms"}},
		{name: "trickle_handler", args: []string{"--listen", listen(), "--sleep", "300ms", "--handler-cmd", rp.trickleEchoCommand()}},
		{name: "db_purge", args: []string{"--listen", listen(), "--sleep", "1s", "--archive-dir", "archives", "--min-age", "1h"}},
	})
}

// startDaemonList starts daemons in order, waiting for the feeder's cache
// and the scheduler's port.
func (rp *realProject) startDaemonList(daemons []realDaemon) {
	for _, s := range daemons {
		program := s.program
		if program == "" {
			program = s.name
		}
		p := rp.start(s.name, filepath.Join(rp.bin, program), "", append([]string{"--config", rp.config}, s.args...)...)
		rp.daemons = append(rp.daemons, p)
		switch program {
		case "feeder":
			shm := rp.configValue("shm-path")
			rp.waitFor(p, "its cache file", func() bool { _, err := os.Stat(shm); return err == nil })
		case "scheduler":
			rp.waitFor(p, "listening on "+rp.schedAdr, func() bool {
				c, err := net.DialTimeout("tcp", rp.schedAdr, 200*time.Millisecond)
				if err == nil {
					c.Close()
				}
				return err == nil
			})
		}
	}
}

// trickleEchoCommand writes the trickle handler's command: it answers each
// trickle-up with a trickle-down to the same task, naming the message and
// the task, which the app writes into its "log".
func (rp *realProject) trickleEchoCommand() string {
	path := filepath.Join(rp.dir, "trickle-echo.sh")
	script := `#!/bin/sh
printf '` + realClientTrickleEcho + ` %s from %s\n' "$TASKSERVER_TRICKLE_ID" "$TASKSERVER_TRICKLE_RESULT_NAME" >"$TASKSERVER_TRICKLE_REPLY"
`
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		rp.t.Fatalf("write the trickle handler's command: %v", err)
	}
	return path
}

// addConfig appends key: value to the project configuration, read by every
// program that has the flag.
func (rp *realProject) addConfig(key, value string) {
	f, err := os.OpenFile(rp.config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		rp.t.Fatalf("open project config: %v", err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "%s: %q\n", key, value); err != nil {
		rp.t.Fatalf("write project config: %v", err)
	}
}

func (rp *realProject) configValue(key string) string {
	b, err := os.ReadFile(rp.config)
	if err != nil {
		rp.t.Fatalf("read project config: %v", err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + `: "(.*)"$`).FindSubmatch(b)
	if m == nil {
		rp.t.Fatalf("project config has no %s", key)
	}
	v, err := strconv.Unquote(`"` + string(m[1]) + `"`)
	if err != nil {
		rp.t.Fatalf("project config %s: %v", key, err)
	}
	return v
}

func (rp *realProject) waitFor(p *realProc, what string, ok func() bool) {
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if !p.running() {
			rp.dumpLogs()
			rp.t.Fatalf("%s exited before %s: %v", p.name, what, p.err)
		}
		if time.Now().After(deadline) {
			rp.dumpLogs()
			rp.t.Fatalf("%s: not %s after 30s", p.name, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// accountFileName is the client's name for a project's account file: the
// master URL without its scheme, every character but letters, digits, '.',
// '-' and '_' turned into '_', one trailing '_' dropped (PROTOCOL.md §2.1).
func accountFileName(masterURL string) string {
	s := masterURL
	if i := strings.Index(s, "://"); i >= 0 {
		s = s[i+3:]
	}
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	s = strings.TrimSuffix(string(b), "_")
	return "account_" + s + ".xml"
}

// startClient prepares client i's data directory (configuration, run-always
// preferences, the account file that attaches it) and starts it.
func (rp *realProject) startClient(boinc string, i int) {
	t := rp.t
	u := &rp.users[i]
	u.dataDir = filepath.Join(rp.dir, fmt.Sprintf("client%d", i))
	if err := os.MkdirAll(u.dataDir, 0o755); err != nil {
		t.Fatalf("make client data directory: %v", err)
	}
	master := rp.urlBase + "/"
	upLimit := 0 // none
	if i == 0 && !rp.noUpThrottle {
		upLimit = realClientUpThrottle // until restartDuringUpload
	}
	files := map[string]string{
		// no_info_fetch: no lookups at boinc.berkeley.edu.
		"cc_config.xml": `<cc_config>
<log_flags>
<sched_ops/>
<sched_op_debug/>
<file_xfer/>
<file_xfer_debug/>
<task/>
<task_debug/>
<checkpoint_debug/>
<trickle_debug/>
<unparsed_xml/>
</log_flags>
<options>
<no_info_fetch>1</no_info_fetch>
` + rp.ccOptions[i] + `</options>
</cc_config>
`,
		"global_prefs_override.xml": realClientPrefs(upLimit),
		accountFileName(master):     fmt.Sprintf("<account>\n<master_url>%s</master_url>\n<authenticator>%s</authenticator>\n</account>\n", master, u.auth),
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(u.dataDir, name), []byte(text), 0o600); err != nil {
			t.Fatalf("write client file: %v", err)
		}
	}
	u.guiPort = realFreePort(t)
	rp.clients = append(rp.clients, rp.runClient(boinc, i))
}

// runClient starts client i on its data directory.
func (rp *realProject) runClient(boinc string, i int) *realProc {
	u := rp.users[i]
	args := []string{"--dir", u.dataDir, "--gui_rpc_port", strconv.Itoa(u.guiPort), "--skip_cpu_benchmarks"}
	if !rp.useCoprocs[i] {
		args = append(args, "--no_gpus")
	}
	return rp.start(fmt.Sprintf("client%d", i), boinc, u.dataDir, args...)
}

// realClientPrefs are the volunteer's preferences: compute always,
// checkpoint every second, small work buffer; uploads limited to
// upBytesSec bytes/s if > 0.
func realClientPrefs(upBytesSec int) string {
	// The machine is busy with the server itself: without
	// suspend_cpu_usage 0 the client suspends computing.
	return `<global_preferences>
<run_on_batteries>1</run_on_batteries>
<run_if_user_active>1</run_if_user_active>
<run_gpu_if_user_active>1</run_gpu_if_user_active>
<suspend_cpu_usage>0</suspend_cpu_usage>
<idle_time_to_run>0</idle_time_to_run>
<cpu_usage_limit>100</cpu_usage_limit>
<max_ncpus_pct>100</max_ncpus_pct>
<work_buf_min_days>0.01</work_buf_min_days>
<work_buf_additional_days>0.01</work_buf_additional_days>
<disk_min_free_gb>0.1</disk_min_free_gb>
<disk_max_used_pct>90</disk_max_used_pct>
<disk_interval>1</disk_interval>
<network_wifi_only>0</network_wifi_only>
<max_bytes_sec_up>` + strconv.Itoa(upBytesSec) + `</max_bytes_sec_up>
</global_preferences>
`
}

// restartDuringUpload stops client0 a few seconds into its first upload
// of a "log" output (throttled, so it takes some 15 s) and starts it again
// without the limit: the client asks the server how much of the file it
// has (<get_file_size>) and resumes the upload there, and restarts its
// running tasks, which resume from their checkpoints.
func (rp *realProject) restartDuringUpload(boinc string) {
	t := rp.t
	b, err := os.ReadFile(rp.clients[0].log)
	if err != nil {
		t.Fatalf("read client0's event log: %v", err)
	}
	m := regexp.MustCompile(`Started upload of (` + regexp.QuoteMeta(realClientJobPrefix) + `\d+_\d+_1)\n`).FindSubmatch(b)
	if m == nil {
		return
	}
	time.Sleep(4 * time.Second)
	if err := rp.clients[0].stop(); err != nil {
		t.Fatalf("stop client0: %v", err)
	}
	if err := os.WriteFile(filepath.Join(rp.users[0].dataDir, "global_prefs_override.xml"), []byte(realClientPrefs(0)), 0o600); err != nil {
		t.Fatalf("write client0's preferences: %v", err)
	}
	rp.clients[0] = rp.runClient(boinc, 0)
	rp.restarted = string(m[1])
	t.Logf("restarted client0 while it uploaded %s", rp.restarted)
}

// checkResumed checks what the restart of client0 must have caused: an
// upload resumed past its start (with file_xfer_debug the client logs each
// upload's starting offset) and a task resumed from its checkpoint (the
// app says so on stderr, which comes back as the result's stderr_out).
func (rp *realProject) checkResumed(ctx context.Context, st *store.Store) {
	t := rp.t
	if rp.restarted == "" {
		t.Errorf("client0 was never seen uploading a %q output, so it was not restarted", boincapp.LogName)
		return
	}
	b, err := os.ReadFile(rp.clients[0].log)
	if err != nil {
		t.Fatalf("read client0's event log: %v", err)
	}
	resumed := false
	for _, m := range regexp.MustCompile(`\[fxd\] starting upload, upload_offset (\d+)`).FindAllStringSubmatch(string(b), -1) {
		if n, _ := strconv.Atoi(m[1]); n > 0 {
			resumed = true
			t.Logf("client0 resumed an upload at byte %d", n)
			break
		}
	}
	if !resumed {
		t.Errorf("client0, restarted while uploading %s, resumed no upload past its start (no \"upload_offset N\" > 0 in its event log)", rp.restarted)
	}
	var n int
	if err := st.DB().GetContext(ctx, &n, `SELECT COUNT(*) FROM result WHERE stderr_out LIKE ?`, "%"+realClientResumed+"%"); err != nil {
		t.Fatalf("read results' stderr: %v", err)
	}
	if n == 0 {
		t.Errorf("no result's stderr_out says %q: no task resumed from its checkpoint after client0's restart", realClientResumed)
	} else {
		t.Logf("%d tasks resumed from their checkpoints", n)
	}
}

// checkLookupAccount asks the first client, as BOINC Manager's "attach
// with e-mail and password" does, to look up its account with the password
// the operator set (taskctl user set --password): it must get the account
// key; with another password it must not.
func (rp *realProject) checkLookupAccount(ctx context.Context) {
	t := rp.t
	u := rp.users[0]
	cmdPath, err := exec.LookPath("boinccmd")
	if err != nil {
		t.Logf("boinccmd not on PATH: lookup_account through the real client not checked")
		return
	}
	auth, err := os.ReadFile(filepath.Join(u.dataDir, "gui_rpc_auth.cfg"))
	if err != nil {
		t.Fatalf("read client0's GUI RPC password: %v", err)
	}
	lookup := func(password string) string {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		out, err := exec.CommandContext(cctx, cmdPath, "--host", fmt.Sprintf("127.0.0.1:%d", u.guiPort),
			"--passwd", strings.TrimSpace(string(auth)), "--lookup_account", rp.urlBase+"/", u.email, password).CombinedOutput()
		if err != nil {
			t.Fatalf("boinccmd --lookup_account: %v\n%s", err, out)
		}
		return string(out)
	}
	out := lookup(realClientPassword)
	if !strings.Contains(out, "account key: "+u.auth) {
		rp.dumpLogs()
		t.Fatalf("boinccmd --lookup_account with the password taskctl set = %q, want account key %s", out, u.auth)
	}
	t.Logf("boinccmd --lookup_account with the password taskctl set: %s", strings.TrimSpace(out))
	if out := lookup("wrong password"); strings.Contains(out, "account key:") {
		t.Fatalf("boinccmd --lookup_account with a wrong password = %q, want no account key", out)
	}
}

// realProc is a daemon or client run by the test.
type realProc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func (p *realProc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// start runs program detached in its own session (the client must not hold
// the test's output open: PROTOCOL.md §12), stdin /dev/null, output to
// logs/name.log.
func (rp *realProject) start(name, program, dir string, args ...string) *realProc {
	t := rp.t
	logPath := filepath.Join(rp.dir, "logs", name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("open log of %s: %v", name, err)
	}
	cmd := exec.Command(program, args...)
	cmd.Dir = dir
	cmd.Stdin = nil // /dev/null
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &realProc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p
}

// stop sends SIGTERM, then SIGKILL after the grace period.
func (p *realProc) stop() error {
	if p.running() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(realClientStopGrace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.New("did not stop after SIGTERM; killed")
	}
}

// stopAll stops the clients, then the daemons in reverse start order.
func (rp *realProject) stopAll() {
	if rp.stopped {
		return
	}
	rp.stopped = true
	all := append(append([]*realProc{}, rp.clients...), reversed(rp.daemons)...)
	for _, p := range all {
		if err := p.stop(); err != nil {
			rp.t.Logf("stop %s: %v", p.name, err)
		}
	}
	// A client's app may still be running in its slot: the client kills its
	// tasks on exit, so by now nothing of ours is left.
}

func reversed(ps []*realProc) []*realProc {
	out := make([]*realProc, 0, len(ps))
	for i := len(ps) - 1; i >= 0; i-- {
		out = append(out, ps[i])
	}
	return out
}

// exited returns a program that stopped while it should be running.
func (rp *realProject) exited() *realProc {
	for _, p := range append(append([]*realProc{}, rp.daemons...), rp.clients...) {
		if !p.running() {
			return p
		}
	}
	return nil
}

// dumpLogs prints the tail of every daemon's and client's log and each
// client's event log and state file.
func (rp *realProject) dumpLogs() {
	tail := func(path string, n int) {
		b, err := os.ReadFile(path)
		if err != nil {
			return
		}
		if len(b) > n {
			b = b[len(b)-n:]
		}
		rp.t.Logf("---- %s (tail)\n%s", path, b)
	}
	files, _ := filepath.Glob(filepath.Join(rp.dir, "logs", "*.log"))
	for _, f := range files {
		tail(f, 6000)
	}
	for _, u := range rp.users {
		if u.dataDir == "" {
			continue
		}
		tail(filepath.Join(u.dataDir, "stdoutdae.txt"), 8000)
		tail(filepath.Join(u.dataDir, "client_state.xml"), 4000)
	}
}

// realProgress is what the database says about the jobs.
type realProgress struct {
	hosts         int
	results       map[string]int // by server state
	bothDone      int            // jobs assimilated with both users' results valid and credited
	failErrors    int            // client-error results of the FAIL job
	failInstances int
	userCredit    [2]float64
	assimilated   int
	problems      []string
	failRetried   bool
	userJobs      [2]int // jobs with a valid result of the user's client
	// trickles counts the trickle-up messages stored (msg_from_host), of
	// which tricklesUnhandled the trickle handler has not handled yet.
	trickles, tricklesUnhandled int
}

func (p realProgress) String() string {
	return fmt.Sprintf("hosts %d, results %v, jobs done by both clients %d/%d, assimilated %d, FAIL job: %d client errors in %d instances, user credit %.3g/%.3g, trickle-ups %d (%d unhandled)",
		p.hosts, p.results, p.bothDone, realClientJobs, p.assimilated, p.failErrors, p.failInstances, p.userCredit[0], p.userCredit[1],
		p.trickles, p.tricklesUnhandled)
}

func (p realProgress) done() bool {
	return p.bothDone >= realClientWantBoth && p.failErrors >= 1 && p.failRetried &&
		p.userCredit[0] > 0 && p.userCredit[1] > 0 && p.trickles > 0 && p.tricklesUnhandled == 0
}

// progress reads the jobs' state: read-only queries, so they live here
// rather than in the store package.
func (rp *realProject) progress(ctx context.Context, st *store.Store) (realProgress, error) {
	pg := realProgress{results: map[string]int{}}
	db := st.DB()
	if err := db.GetContext(ctx, &pg.hosts, `SELECT COUNT(*) FROM host`); err != nil {
		return pg, err
	}
	if len(rp.users) == 2 && rp.users[0].id == 0 {
		for i := range rp.users {
			if err := db.GetContext(ctx, &rp.users[i].id, `SELECT id FROM user WHERE email_addr = ?`, rp.users[i].email); err != nil {
				return pg, err
			}
		}
	}
	for i := range rp.users {
		if err := db.GetContext(ctx, &pg.userCredit[i], `SELECT total_credit FROM user WHERE id = ?`, rp.users[i].id); err != nil {
			return pg, err
		}
	}
	var trickles []struct {
		Result  string `db:"result_name"`
		N       int    `db:"n"`
		Handled int    `db:"handled"`
	}
	if err := db.SelectContext(ctx, &trickles, `SELECT result_name, COUNT(*) AS n, SUM(handled) AS handled FROM msg_from_host GROUP BY result_name`); err != nil {
		return pg, err
	}
	tricklesOf := map[string]int{} // trickle-ups stored, by task
	for _, m := range trickles {
		tricklesOf[m.Result] = m.N
		pg.trickles += m.N
		pg.tricklesUnhandled += m.N - m.Handled
	}
	var rows []struct {
		WU            string  `db:"wu_name"`
		WUID          int64   `db:"wu_id"`
		Canonical     int64   `db:"canonical_resultid"`
		Assimilate    int     `db:"assimilate_state"`
		ID            int64   `db:"id"`
		Name          string  `db:"name"`
		ServerState   int     `db:"server_state"`
		Outcome       int     `db:"outcome"`
		ValidateState int     `db:"validate_state"`
		HostID        int64   `db:"hostid"`
		UserID        int64   `db:"userid"`
		Credit        float64 `db:"granted_credit"`
		ExitStatus    int     `db:"exit_status"`
	}
	err := db.SelectContext(ctx, &rows, `SELECT w.name AS wu_name, w.id AS wu_id, w.canonical_resultid, w.assimilate_state,
		r.id, r.name, r.server_state, r.outcome, r.validate_state, r.hostid, r.userid, r.granted_credit, r.exit_status
		FROM workunit w JOIN result r ON r.workunitid = w.id ORDER BY r.id`)
	if err != nil {
		return pg, err
	}
	type job struct {
		canonical   string // the canonical instance's name
		assimilated bool
		okUsers     map[int64]bool // users with a valid, credited result
		okHosts     map[int64]bool
	}
	jobs := map[string]*job{}
	for _, r := range rows {
		pg.results[state.ServerState(r.ServerState).String()]++
		j := jobs[r.WU]
		if j == nil {
			j = &job{assimilated: r.Assimilate == int(state.AssimilateDone), okUsers: map[int64]bool{}, okHosts: map[int64]bool{}}
			jobs[r.WU] = j
		}
		if r.ID == r.Canonical {
			j.canonical = r.Name
		}
		if r.WU == realClientFailJob {
			pg.failInstances++
			if r.ServerState == int(state.ServerOver) && r.Outcome == int(state.OutcomeClientError) {
				pg.failErrors++
				if r.ExitStatus != 3 {
					pg.problems = append(pg.problems, fmt.Sprintf("FAIL job result %d: exit_status %d, want 3", r.ID, r.ExitStatus))
				}
			}
			if r.Outcome == int(state.OutcomeSuccess) {
				pg.problems = append(pg.problems, fmt.Sprintf("FAIL job result %d: outcome success, want client error", r.ID))
			}
			continue
		}
		if r.Outcome == int(state.OutcomeSuccess) && r.ValidateState == int(state.ValidateValid) && r.Credit > 0 {
			j.okUsers[r.UserID] = true
			j.okHosts[r.HostID] = true
		}
	}
	// Retried: an instance beyond the first two exists, created after an
	// error came back.
	pg.failRetried = pg.failInstances > 2 && pg.failErrors >= 1
	for name, j := range jobs {
		if name == realClientFailJob {
			continue
		}
		if j.assimilated {
			pg.assimilated++
			if problem := rp.checkAssimilated(name, j.canonical, tricklesOf[j.canonical]); problem != "" {
				pg.problems = append(pg.problems, problem)
				continue
			}
		}
		if j.assimilated && len(j.okUsers) >= 2 && len(j.okHosts) >= 2 &&
			j.okUsers[rp.users[0].id] && j.okUsers[rp.users[1].id] {
			pg.bothDone++
		}
		for i, u := range rp.users {
			if j.okUsers[u.id] {
				pg.userJobs[i]++
			}
		}
	}
	return pg, nil
}

// checkAssimilated checks the assimilated outputs of job: both delivered,
// "out" what the app must compute, "log" at least boincapp.LogSize bytes
// and telling that every trickle-up the canonical instance sent was stored
// once (trickles, the msg_from_host rows of the instance) and that the
// trickle handler's answer reached the app. It returns a problem, or "".
func (rp *realProject) checkAssimilated(job, canonical string, trickles int) string {
	// The copy handler delivers each output as <results>/<job>/<open name>.
	read := func(logical string) ([]byte, string) {
		b, err := os.ReadFile(filepath.Join(rp.dir, "results", job, logical))
		if err != nil {
			return nil, fmt.Sprintf("job %s assimilated but its output %q is missing: %v", job, logical, err)
		}
		return b, ""
	}
	out, problem := read(boincapp.OutName)
	if problem != "" {
		return problem
	}
	if want := boincapp.Output(boincapp.Input(job), boincapp.Shared(), boincapp.Params(job), realClientRoundsOf(job)); !bytes.Equal(out, want) {
		return fmt.Sprintf("job %s: assimilated %q = %q, want %q", job, boincapp.OutName, out, want)
	}
	log, problem := read(boincapp.LogName)
	if problem != "" {
		return problem
	}
	if len(log) < boincapp.LogSize {
		return fmt.Sprintf("job %s: assimilated %q has %d bytes, want at least %d", job, boincapp.LogName, len(log), boincapp.LogSize)
	}
	// The log's second and third lines: "trickle-ups sent: N" and
	// "trickle-down: TEXT".
	lines := strings.SplitN(string(log), "\n", 4)
	var sent int
	if _, err := fmt.Sscanf(lines[1], "trickle-ups sent: %d", &sent); err != nil || sent < 1 {
		return fmt.Sprintf("job %s: log line %q: want the app's count of trickle-ups, at least 1", job, lines[1])
	}
	// The client loses a message the app sent just before the client
	// stopped (the app writes trickle_up.xml and signals; the client moves
	// the file only when it reads the signal), so what counts is what the
	// clients put in their requests: each of those stored once.
	reported := rp.clientTrickles(canonical)
	if trickles != reported || trickles > sent {
		return fmt.Sprintf("job %s: instance %s: the app sent %d trickle-ups, the clients reported %d, %d stored (msg_from_host): want each reported one stored once",
			job, canonical, sent, reported, trickles)
	}
	if want := "trickle-down: " + realClientTrickleEcho + " "; !strings.HasPrefix(lines[2], want) || !strings.HasSuffix(lines[2], " from "+canonical) {
		return fmt.Sprintf("job %s: log line %q: want the trickle handler's answer to %s (%s N from %s)", job, lines[2], canonical, realClientTrickleEcho, canonical)
	}
	return ""
}

// clientTrickles counts the trickle-up messages of task the clients put in
// their scheduler requests: with trickle_debug on, a client logs "[trickle]
// read trickle file .../trickle_up_<task>_<time>.xml" (".sent" appended
// once it was sent, and read again until the project acknowledges it).
func (rp *realProject) clientTrickles(task string) int {
	files := map[string]bool{}
	for i := range rp.users {
		b, err := os.ReadFile(filepath.Join(rp.dir, "logs", fmt.Sprintf("client%d.log", i)))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			_, path, ok := strings.Cut(line, "[trickle] read trickle file ")
			if !ok {
				continue
			}
			name := strings.TrimSuffix(filepath.Base(strings.TrimSpace(path)), ".sent")
			if strings.HasPrefix(name, "trickle_up_"+task+"_") {
				files[fmt.Sprintf("%d/%s", i, name)] = true
			}
		}
	}
	return len(files)
}

// checkSticky checks that each client, having run two jobs or more,
// downloaded the shared, sticky input once (its event log, with file_xfer
// on, says "Started download of" a file once per download) and holds it as
// sticky (client_state.xml marks its <file> <sticky/>): a file that is not
// sticky is deleted as soon as no job of the host uses it, and downloaded
// again for the next job.
func (rp *realProject) checkSticky(pg realProgress) {
	t := rp.t
	for i, u := range rp.users {
		if pg.userJobs[i] < 2 {
			t.Errorf("client%d completed %d jobs, want 2 or more to see the sticky input kept", i, pg.userJobs[i])
			continue
		}
		b, err := os.ReadFile(rp.clients[i].log)
		if err != nil {
			t.Fatalf("read client%d's event log: %v", i, err)
		}
		if n := strings.Count(string(b), "Started download of "+rp.sharedFile+"\n"); n != 1 {
			t.Errorf("client%d downloaded the sticky input %s %d times in %d jobs, want once", i, rp.sharedFile, n, pg.userJobs[i])
		} else {
			t.Logf("client%d downloaded the sticky input %s once and ran %d jobs", i, rp.sharedFile, pg.userJobs[i])
		}
		if b, err = os.ReadFile(filepath.Join(u.dataDir, "client_state.xml")); err != nil {
			t.Fatalf("read client%d's state: %v", i, err)
		}
		sticky := false
		for _, f := range strings.Split(string(b), "<file>")[1:] {
			f, _, _ = strings.Cut(f, "</file>")
			if strings.Contains(f, "<name>"+rp.sharedFile+"</name>") {
				sticky = strings.Contains(f, "<sticky/>")
			}
		}
		if !sticky {
			t.Errorf("client%d's client_state.xml has no <file> %s marked <sticky/>", i, rp.sharedFile)
		}
	}
}

// checkCheckpoints checks that the app checkpointed on the real client:
// with checkpoint_debug on, the client logs each checkpoint the app
// reports (boinc_checkpoint_completed), at the period of the volunteer's
// disk_interval preference (1 s here).
func (rp *realProject) checkCheckpoints() {
	for _, c := range rp.clients {
		b, err := os.ReadFile(c.log)
		if err != nil {
			rp.t.Fatalf("read %s's event log: %v", c.name, err)
		}
		re := regexp.MustCompile(`\[checkpoint\] result (` + regexp.QuoteMeta(realClientJobPrefix) + `\S+) checkpointed`)
		if m := re.FindAllStringSubmatch(string(b), -1); len(m) == 0 {
			rp.t.Errorf("%s's event log has no checkpoint of the app (\"[checkpoint] result %s... checkpointed\")", c.name, realClientJobPrefix)
		} else {
			rp.t.Logf("%s: the app checkpointed %d times (first: %s)", c.name, len(m), m[0][1])
		}
	}
}

// checkGzip checks that the clients downloaded each job's "params" (stored
// gzip'd) from the gzip'd copy's URL: with file_xfer_debug on, the event
// log gives the URL of every download. (That the client unzipped it shows
// in the digest of "out", which covers "params".)
func (rp *realProject) checkGzip(ctx context.Context, st *store.Store) {
	t := rp.t
	var logs string
	for _, c := range rp.clients {
		b, err := os.ReadFile(c.log)
		if err != nil {
			t.Fatalf("read %s's event log: %v", c.name, err)
		}
		logs += string(b)
	}
	downloads := 0
	for i := 0; i < realClientJobs; i++ {
		job := fmt.Sprintf("%s%d", realClientJobPrefix, i)
		wu, err := st.WorkunitGetByName(ctx, job)
		if err != nil {
			t.Fatalf("read job %s: %v", job, err)
		}
		doc, err := jobxml.ParseWorkunit(wu.XMLDoc)
		if err != nil {
			t.Fatalf("job %s: %v", job, err)
		}
		for _, f := range doc.Inputs {
			if f.OpenName != boincapp.ParamsName {
				continue
			}
			if f.GzippedNbytes <= 0 {
				t.Errorf("job %s: %q (%s) has no gzip'd copy", job, f.OpenName, f.Name)
			}
			for _, m := range regexp.MustCompile(`URL: \S*/`+regexp.QuoteMeta(f.Name)+`(\S*)\n`).FindAllStringSubmatch(logs, -1) {
				downloads++
				if m[1] != ".gz" {
					t.Errorf("job %s: a client downloaded %q from %s, want its gzip'd copy %s.gz", job, f.OpenName, strings.TrimSpace(strings.TrimPrefix(m[0], "URL: ")), f.Name)
				}
			}
		}
	}
	if downloads == 0 {
		t.Errorf("no download of a job's %q in the clients' event logs", boincapp.ParamsName)
	}
}

func realFreePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
