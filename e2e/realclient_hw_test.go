package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/boincapp"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
)

// Settings of the real-hardware run. Three apps, each with one version,
// route the work by plan class: "asic" needs the coprocessor client0
// declares; "mt" (two threads) and "quota" need three CPUs or more, which
// only client1 (told it has four) has. The jobs wait (the app's
// --trickle-wait, with no trickle handler to answer) rather than compute,
// so a virtual CPU costs the machine nothing and timings are wall-clock.
const (
	rcHWTimeout  = 6 * time.Minute
	rcHWPoll     = time.Second
	rcHWNudge    = 10 * time.Second // a volunteer's "Update" this often once the late quota job is in
	rcHWCoproc   = "miner_asic"
	rcHWAppAsic  = "asic"
	rcHWAppMT    = "mt"
	rcHWAppQuota = "quota"
	// rcHWDailyQuota is the scheduler's and validator's --daily-result-quota:
	// one error takes a host from 2 to 1 job a day.
	rcHWDailyQuota = 2
	// rcHWAsicJobs fit client0's first day: a quota of rcHWDailyQuota per
	// instance of its one coprocessor (BOINC itself scales an "other"
	// coprocessor's quota by the CPUs, which allows more), and valid
	// results raise it no higher.
	rcHWAsicJobs = 2
	rcHWMTJobs   = 2
	// rcHWSlowWait is how long the quota app's good jobs run (seconds): long
	// enough that the failing job sent with them is reported, the quota
	// seen at one and the late job refused before any of them is (some
	// 15 s on an idle machine).
	rcHWSlowWait  = 45
	rcHWFailJob   = "quota_fail"
	rcHWSlowJob   = "quota_slow_"
	rcHWAfterJob  = "quota_after"
	rcHWSlowJobs  = 2
	rcHWMTThreads = 2
)

// rcHWPlanClasses is the project's plan_class_spec.xml.
var rcHWPlanClasses = fmt.Sprintf(`<plan_classes>
<plan_class>
    <name>asic</name>
    <gpu_type>%s</gpu_type>
    <cpu_frac>0.1</cpu_frac>
</plan_class>
<plan_class>
    <name>mt</name>
    <min_ncpus>3</min_ncpus>
    <max_threads>%d</max_threads>
    <avg_ncpus>%d</avg_ncpus>
</plan_class>
<plan_class>
    <name>quad</name>
    <min_ncpus>3</min_ncpus>
</plan_class>
</plan_classes>
`, rcHWCoproc, rcHWMTThreads, rcHWMTThreads)

// rcHWCCOptions are the clients' cc_config.xml options: client0 has a
// "miner_asic" coprocessor (BOINC's "other" coprocessors: lib/cc_config.cpp
// reads <coproc> in <options> with lib/coproc.cpp's COPROC::parse) and two
// CPUs; client1 no coprocessor and four CPUs (<ncpus> makes the client act
// as if it had that many, and report them as p_ncpus).
var rcHWCCOptions = map[int]string{
	0: `<ncpus>2</ncpus>
<coproc>
    <type>` + rcHWCoproc + `</type>
    <count>1</count>
    <peak_flops>1e11</peak_flops>
    <device_nums>0</device_nums>
    <non_gpu/>
</coproc>
`,
	1: "<ncpus>4</ncpus>\n",
}

// TestRealBOINCClientHardware runs the server against two real BOINC
// clients with different hardware and checks, with the clients' own
// records, that:
//   - a coprocessor declared in cc_config.xml gets client0 the jobs of an
//     app whose only version needs it (plan class with gpu_type), which it
//     completes, while client1, without it, gets none and is told why;
//   - a multi-threaded version (avg_ncpus 2) reaches client1 as such
//     (client_state.xml) and runs with two CPUs (boinccmd --get_tasks);
//   - a host whose app fails drops to a daily quota of one job, is refused
//     work for it with the daily-quota reason, and recovers (the quota
//     grows, and it gets the app's jobs again) after valid results.
//
// It runs when TestRealBOINCClient does (TASKSERVER_REAL_CLIENT=1, or
// `boinc` on PATH).
func TestRealBOINCClientHardware(t *testing.T) {
	boinc, app := realClientPrereqs(t)
	bin := buildPrograms(t)
	rp := newRealProject(t, bin)
	rp.app = app
	rp.noUpThrottle = true
	rp.ccOptions = rcHWCCOptions
	rp.useCoprocs = map[int]bool{0: true}
	defer rp.stopAll()

	hw := &rcHWRun{rp: rp, taskRes: map[string]map[string]bool{}}
	hw.setup()
	hw.startDaemons()
	hw.start = time.Now()
	// client1 first, while the only jobs are the coprocessor's: what it is
	// told is why it gets none of them. (rp.clients is in start order.)
	rp.startClient(boinc, 1)
	hw.told = hw.firstReply(1)
	t.Logf("%4.0fs client1, asking for CPU work while only %s jobs wait, was told: %q", time.Since(hw.start).Seconds(), rcHWAppAsic, hw.told)
	rp.startClient(boinc, 0)
	hw.submitQuotaJobs()
	hw.update(1) // it backed off from CPU work fetch when it got none

	ctx, cancel := context.WithTimeout(context.Background(), rcHWTimeout)
	defer cancel()
	st, err := store.Open(ctx, rp.dsn, store.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatalf("open project database: %v", err)
	}
	defer st.Close()

	last := ""
	for {
		pg, err := hw.progress(ctx, st)
		if err != nil {
			t.Logf("%4.0fs progress unavailable: %v", time.Since(hw.start).Seconds(), err)
		} else {
			if s := pg.String(); s != last {
				t.Logf("%4.0fs %s", time.Since(hw.start).Seconds(), s)
				last = s
			}
			hw.step(pg)
			if pg.done() || pg.settled() && hw.sentAtOne != "" {
				break // done, or the quota was not kept: no need to wait
			}
		}
		hw.watchTasks(ctx)
		if p := rp.exited(); p != nil {
			rp.dumpLogs()
			t.Fatalf("%s exited during the run: %v (log %s)", p.name, p.err, p.log)
		}
		select {
		case <-ctx.Done():
			rp.dumpLogs()
			t.Fatalf("after %s: not done: %s\nproblems: %s", rcHWTimeout, last, strings.Join(pg.problems, "; "))
		case <-time.After(rcHWPoll):
		}
	}
	pg, err := hw.progress(ctx, st)
	if err != nil {
		t.Fatalf("final progress: %v", err)
	}
	if len(pg.problems) > 0 {
		rp.dumpLogs()
		t.Errorf("wrong results: %s", strings.Join(pg.problems, "; "))
	}
	hw.checkAsic(pg)
	hw.checkMT()
	hw.checkQuota(pg)
	t.Logf("real BOINC client hardware: done in %s", time.Since(hw.start).Round(time.Second))
}

// realClientPrereqs returns the BOINC client and the BOINC-API app, or
// skips the test (fails it with TASKSERVER_REAL_CLIENT=1).
func realClientPrereqs(t *testing.T) (boinc, app string) {
	required := os.Getenv("TASKSERVER_REAL_CLIENT") == "1"
	boinc, err := exec.LookPath("boinc")
	if err != nil {
		if required {
			t.Fatalf("TASKSERVER_REAL_CLIENT=1 but the BOINC client is not on PATH (%v); install it with: make test-client", err)
		}
		t.Skip("real BOINC client test skipped: `boinc` is not on PATH (run `make test-client`, which installs boinc-client, or set TASKSERVER_REAL_CLIENT=1)")
	}
	if testing.Short() && !required {
		t.Skip("real BOINC client test skipped in -short mode")
	}
	app, err = boincapp.Path()
	if err != nil {
		if required {
			t.Fatalf("TASKSERVER_REAL_CLIENT=1 but %v", err)
		}
		t.Skipf("real BOINC client test skipped: %v", err)
	}
	return boinc, app
}

// rcHWRun is the state of one real-hardware run.
type rcHWRun struct {
	rp          *realProject
	start       time.Time
	schedListen string // the scheduler's metrics address
	files       string // where the jobs' input files are written
	// taskRes is, by task name, the "resources" boinccmd --get_tasks showed
	// while the task was executing.
	taskRes map[string]map[string]bool
	// Quota phase: when the failing job had failed on client1 and the
	// late job was submitted; when client1 was last nudged.
	afterSubmitted time.Time
	lastNudge      [2]time.Time
	// quotaOne is when client1's quota for the quota app was first seen at
	// one; quotaLog the values seen, in order, without repeats.
	quotaOne time.Time
	quotaLog []int
	// refusal is the evidence that the scheduler refused client1 work
	// for the daily quota.
	refusal string
	// failNudged is set once client1 was told to report its failed task;
	// told is what the project told client1 in its first reply.
	failNudged bool
	told       []string
	// mtSubmitted is set once the multi-threaded jobs were submitted;
	// sentAtOne names the late job if it was sent while client1's quota
	// was one and none of its jobs had been valid since.
	mtSubmitted bool
	sentAtOne   string
}

func (hw *rcHWRun) setup() {
	rp, t := hw.rp, hw.rp.t
	spec := filepath.Join(rp.dir, "plan_class_spec.xml")
	if err := os.WriteFile(spec, []byte(rcHWPlanClasses), 0o644); err != nil {
		t.Fatalf("write plan classes: %v", err)
	}
	rp.addConfig("plan-class-spec", spec)
	rp.addConfig("daily-result-quota", strconv.Itoa(rcHWDailyQuota))

	offline := t.TempDir()
	rp.taskctl("keys", "generate", "--code-sign-out", offline)
	rp.taskctl("platform", "add", "--name", realClientPlatform)
	hw.files = t.TempDir()
	inT := hw.write("input_template.xml", []byte(realClientInputTemplate))
	outT := hw.write("output_template.xml", []byte(realClientOutputTemplate))
	for _, a := range []struct{ name, plan string }{{rcHWAppAsic, "asic"}, {rcHWAppMT, "mt"}, {rcHWAppQuota, "quad"}} {
		rp.taskctl("app", "add", "--name", a.name)
		rp.taskctl("app-version", "add", "--app", a.name, "--platform", realClientPlatform,
			"--version-num", strconv.Itoa(realClientVersion), "--file", rp.app, "--plan-class", a.plan,
			"--code-sign-key", filepath.Join(offline, "code_sign_private"))
		rp.taskctl("app", "templates", "--app", a.name, "--input-template", inT, "--output-template", outT)
	}
	for i := 0; i < 2; i++ {
		email := fmt.Sprintf("hwclient%d@example.org", i)
		auth := strings.TrimSpace(rp.taskctl("user", "create", "--email", email, "--name", fmt.Sprintf("hwclient%d", i)))
		rp.users = append(rp.users, realUser{email: email, auth: auth})
	}
	rp.taskctl("file", "stage", realClientShared, hw.write("shared", boincapp.Shared()))

	for i := 0; i < rcHWAsicJobs; i++ {
		hw.submit(rcHWAppAsic, fmt.Sprintf("asic_%d", i), 0, 3, false)
	}
}

// submitQuotaJobs submits the quota app's first jobs: the good ones must
// be in progress on client1 when the failing one's error brings the
// quota down, and the failing one must run at once (so the
// multi-threaded jobs, which would take client1's other CPUs, come
// later: submitMTJobs).
func (hw *rcHWRun) submitQuotaJobs() {
	for i := 0; i < rcHWSlowJobs; i++ {
		hw.submit(rcHWAppQuota, fmt.Sprintf("%s%d", rcHWSlowJob, i), 10, rcHWSlowWait, false)
	}
	hw.submit(rcHWAppQuota, rcHWFailJob, 10, 0, true)
}

// submitMTJobs submits the multi-threaded app's jobs.
func (hw *rcHWRun) submitMTJobs() {
	for i := 0; i < rcHWMTJobs; i++ {
		hw.submit(rcHWAppMT, fmt.Sprintf("mt_%d", i), 0, 10, false)
	}
}

func (hw *rcHWRun) write(name string, b []byte) string {
	path := filepath.Join(hw.files, name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		hw.rp.t.Fatalf("write %s: %v", name, err)
	}
	return path
}

// submit creates one job of app with a quorum of one and no retry; the
// app waits wait seconds after a little work; fail makes it exit 3.
func (hw *rcHWRun) submit(app, name string, priority, wait int, fail bool) {
	in := boincapp.Input(name)
	if fail {
		in = append([]byte("FAIL: this job's app exits 3\n"), in...)
	}
	hw.rp.taskctl("job", "submit", "--app", app, "--name", name,
		"--input", hw.write(name+"_in", in), "--input", "shared:"+realClientShared, "--input", hw.write(name+"_params", boincapp.Params(name)),
		"--command-line", fmt.Sprintf("--rounds 100000 --trickle-wait %d", wait),
		"--delay-bound", realClientDelay.String(), "--rsc-fpops-est", "1e9", "--rsc-fpops-bound", "1e14",
		"--min-quorum", "1", "--target-nresults", "1", "--max-error-results", "1", "--max-total-results", "1",
		"--priority", strconv.Itoa(priority))
}

// startDaemons starts what the run needs: no trickle handler (the jobs'
// wait is not cut short), one validator per app, no assimilator.
func (hw *rcHWRun) startDaemons() {
	rp := hw.rp
	listen := rp.listenAddr
	hw.schedListen = listen()
	daemons := []realDaemon{
		{name: "feeder", args: []string{"--listen", listen(), "--sleep", "200ms", "--tables-interval", "1s"}},
		{name: "scheduler", args: []string{"--addr", rp.schedAdr, "--listen", hw.schedListen, "--url-base", rp.urlBase,
			"--project-name", "Real hardware test", "--request-delay", realClientReqDelay.String()}},
		{name: "transitioner", args: []string{"--listen", listen(), "--sleep", "300ms"}},
	}
	for _, app := range []string{rcHWAppAsic, rcHWAppMT, rcHWAppQuota} {
		daemons = append(daemons, realDaemon{name: "validator_" + app, program: "validator",
			args: []string{"--listen", listen(), "--sleep", "300ms", "--app", app}})
	}
	rp.startDaemonList(daemons)
}

// rcHWResult is one task as the database has it.
type rcHWResult struct {
	WU            string `db:"wu_name"`
	App           string `db:"app_name"`
	Name          string `db:"name"`
	HostID        int64  `db:"hostid"`
	ServerState   int    `db:"server_state"`
	Outcome       int    `db:"outcome"`
	ValidateState int    `db:"validate_state"`
	ExitStatus    int    `db:"exit_status"`
}

func (r rcHWResult) valid() bool {
	return r.Outcome == int(state.OutcomeSuccess) && r.ValidateState == int(state.ValidateValid)
}

// rcHWProgress is what the database says.
type rcHWProgress struct {
	hosts   [2]int64 // host id by client, 0 before its first request
	results []rcHWResult
	// quota is client1's max_jobs_per_day for the quota app's version (-1:
	// no record yet).
	quota    int
	problems []string
	// valid jobs by app and client
	valid      map[string][2]int
	failErrors int
	afterValid bool
	refusal    bool
}

func (p rcHWProgress) String() string {
	states := map[string]int{}
	for _, r := range p.results {
		states[r.App+":"+state.ServerState(r.ServerState).String()]++
	}
	keys := make([]string, 0, len(states))
	for k := range states {
		keys = append(keys, fmt.Sprintf("%s=%d", k, states[k]))
	}
	sort.Strings(keys)
	return fmt.Sprintf("hosts %v, results %s, valid %v, quota-app errors %d, client1 quota %d, late job valid %t, refusal seen %t",
		p.hosts, strings.Join(keys, " "), p.valid, p.failErrors, p.quota, p.afterValid, p.refusal)
}

func (p rcHWProgress) done() bool {
	return p.valid[rcHWAppAsic][0] >= rcHWAsicJobs && p.valid[rcHWAppMT][1] >= rcHWMTJobs &&
		p.failErrors >= 1 && p.afterValid && p.refusal && len(p.problems) == 0
}

// sentTo counts the tasks of app sent to client c.
func (p rcHWProgress) sentTo(c int, app string) int {
	n := 0
	for _, r := range p.results {
		if r.App == app && r.HostID != 0 && r.HostID == p.hosts[c] {
			n++
		}
	}
	return n
}

// settled tells that every job but the quota app's late one reached its
// end and that one is valid.
func (p rcHWProgress) settled() bool {
	return p.valid[rcHWAppAsic][0] >= rcHWAsicJobs && p.valid[rcHWAppMT][1] >= rcHWMTJobs && p.failErrors >= 1 && p.afterValid
}

// client returns the client index of host id, or -1.
func (p rcHWProgress) client(id int64) int {
	for i, h := range p.hosts {
		if h != 0 && h == id {
			return i
		}
	}
	return -1
}

// progress reads the hosts, the tasks and client1's quota.
func (hw *rcHWRun) progress(ctx context.Context, st *store.Store) (rcHWProgress, error) {
	rp := hw.rp
	pg := rcHWProgress{quota: -1, valid: map[string][2]int{}}
	db := st.DB()
	var hosts []struct {
		ID    int64  `db:"id"`
		Email string `db:"email_addr"`
	}
	if err := db.SelectContext(ctx, &hosts, `SELECT h.id, u.email_addr FROM host h JOIN user u ON u.id = h.userid`); err != nil {
		return pg, err
	}
	for _, h := range hosts {
		for i, u := range rp.users {
			if u.email == h.Email {
				pg.hosts[i] = h.ID
			}
		}
	}
	err := db.SelectContext(ctx, &pg.results, `SELECT w.name AS wu_name, a.name AS app_name, r.name, r.hostid,
		r.server_state, r.outcome, r.validate_state, r.exit_status
		FROM result r JOIN workunit w ON w.id = r.workunitid JOIN app a ON a.id = w.appid ORDER BY r.id`)
	if err != nil {
		return pg, err
	}
	for _, r := range pg.results {
		c := -1
		if r.HostID != 0 {
			c = pg.client(r.HostID)
		}
		switch {
		case r.App == rcHWAppAsic && c == 1:
			pg.problems = append(pg.problems, fmt.Sprintf("%s (app %s, needs a %s) was sent to client1, which has none", r.Name, r.App, rcHWCoproc))
		case (r.App == rcHWAppMT || r.App == rcHWAppQuota) && c == 0:
			pg.problems = append(pg.problems, fmt.Sprintf("%s (app %s, needs 3 CPUs) was sent to client0, which has 2", r.Name, r.App))
		}
		if r.WU == rcHWFailJob {
			if r.Outcome == int(state.OutcomeClientError) && r.ExitStatus == 3 {
				pg.failErrors++
			} else if r.Outcome == int(state.OutcomeSuccess) {
				pg.problems = append(pg.problems, fmt.Sprintf("%s: outcome success, want client error", r.Name))
			}
			continue
		}
		if r.valid() && c >= 0 {
			v := pg.valid[r.App]
			v[c]++
			pg.valid[r.App] = v
			if r.WU == rcHWAfterJob && c == 1 {
				pg.afterValid = true
			}
		}
	}
	if pg.hosts[1] != 0 {
		var quota []int
		if err := db.SelectContext(ctx, &quota, `SELECT hav.max_jobs_per_day FROM host_app_version hav
			JOIN app_version av ON av.id = hav.app_version_id JOIN app a ON a.id = av.appid
			WHERE hav.host_id = ? AND a.name = ?`, pg.hosts[1], rcHWAppQuota); err != nil {
			return pg, err
		}
		if len(quota) == 1 {
			pg.quota = quota[0]
		}
	}
	pg.refusal = hw.refusal != ""
	return pg, nil
}

// step drives the quota phase from what the run shows. Once client1 has
// run the failing job (its error makes the client back off for a minute
// or two) it is told to update, which reports the error. Once its quota
// is seen at one, a job of the quota app is added: to be refused while
// the quota is one, and sent once valid results have raised it. From then
// on both clients are told to update every rcHWNudge, as a volunteer
// pressing "Update" would, which also clears their back-offs.
func (hw *rcHWRun) step(pg rcHWProgress) {
	t := hw.rp.t
	if pg.quota >= 0 && (len(hw.quotaLog) == 0 || hw.quotaLog[len(hw.quotaLog)-1] != pg.quota) {
		hw.quotaLog = append(hw.quotaLog, pg.quota)
		t.Logf("%4.0fs client1's daily quota for %s: %d", time.Since(hw.start).Seconds(), rcHWAppQuota, pg.quota)
		if pg.quota == 1 && hw.quotaOne.IsZero() {
			hw.quotaOne = time.Now()
		}
	}
	if !hw.mtSubmitted && pg.sentTo(1, rcHWAppQuota) >= rcHWSlowJobs+1 {
		hw.submitMTJobs()
		hw.mtSubmitted = true
		t.Logf("%4.0fs client1 has the quota app's jobs: submitted the multi-threaded ones", time.Since(hw.start).Seconds())
	}
	if !hw.afterSubmitted.IsZero() && hw.sentAtOne == "" && pg.quota == 1 && pg.valid[rcHWAppQuota][1] == 0 {
		for _, r := range pg.results {
			if r.WU == rcHWAfterJob && r.HostID == pg.hosts[1] {
				hw.sentAtOne = r.Name
				t.Logf("%4.0fs %s sent to client1 while its quota is one", time.Since(hw.start).Seconds(), r.Name)
			}
		}
	}
	if !hw.failNudged {
		if strings.Contains(hw.clientLog(1), "Computation for task "+rcHWFailJob) {
			hw.update(1)
			hw.failNudged = true
		}
		return
	}
	if hw.afterSubmitted.IsZero() {
		if hw.quotaOne.IsZero() {
			return
		}
		hw.submit(rcHWAppQuota, rcHWAfterJob, 0, 0, false)
		hw.afterSubmitted = time.Now()
		t.Logf("%4.0fs client1's quota is one: submitted %s", time.Since(hw.start).Seconds(), rcHWAfterJob)
		return
	}
	if hw.refusal == "" {
		hw.refusal = hw.findRefusal()
		if hw.refusal != "" {
			t.Logf("%4.0fs refusal: %s", time.Since(hw.start).Seconds(), hw.refusal)
		}
	}
	// The feeder reads new jobs within a second or two.
	if time.Since(hw.afterSubmitted) < 3*time.Second {
		return
	}
	for i := range hw.rp.users {
		if time.Since(hw.lastNudge[i]) >= rcHWNudge {
			hw.update(i)
			hw.lastNudge[i] = time.Now()
		}
	}
}

// update asks client i to contact the project now (boinccmd --project URL
// update: the Manager's "Update" button).
func (hw *rcHWRun) update(i int) {
	if _, err := hw.boinccmd(context.Background(), i, "--project", hw.rp.urlBase+"/", "update"); err != nil {
		hw.rp.t.Logf("boinccmd update on client%d: %v", i, err)
	}
}

// boinccmd runs boinccmd against client i's GUI RPC port.
func (hw *rcHWRun) boinccmd(ctx context.Context, i int, args ...string) (string, error) {
	u := hw.rp.users[i]
	auth, err := os.ReadFile(filepath.Join(u.dataDir, "gui_rpc_auth.cfg"))
	if err != nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, "boinccmd", append([]string{"--host", fmt.Sprintf("127.0.0.1:%d", u.guiPort),
		"--passwd", strings.TrimSpace(string(auth))}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("boinccmd %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// watchTasks records, for each task a client is executing, the resources
// boinccmd --get_tasks says it uses.
func (hw *rcHWRun) watchTasks(ctx context.Context) {
	for i, u := range hw.rp.users {
		if u.dataDir == "" {
			continue
		}
		out, err := hw.boinccmd(ctx, i, "--get_tasks")
		if err != nil {
			continue // not listening yet
		}
		for _, task := range parseGetTasks(out) {
			if task["active_task_state"] != "EXECUTING" {
				continue
			}
			name := task["name"]
			if hw.taskRes[name] == nil {
				hw.taskRes[name] = map[string]bool{}
				hw.rp.t.Logf("%4.0fs client%d executes %s with %s", time.Since(hw.start).Seconds(), i, name, task["resources"])
			}
			hw.taskRes[name][task["resources"]] = true
		}
	}
}

// parseGetTasks reads boinccmd --get_tasks: numbered blocks ("1)
// -----------") of "   key: value" lines.
func parseGetTasks(out string) []map[string]string {
	var tasks []map[string]string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if regexp.MustCompile(`^\d+\) -+$`).MatchString(line) {
			tasks = append(tasks, map[string]string{})
			continue
		}
		k, v, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if ok && len(tasks) > 0 {
			if _, seen := tasks[len(tasks)-1][k]; !seen {
				tasks[len(tasks)-1][k] = v
			}
		}
	}
	return tasks
}

func (hw *rcHWRun) clientLog(i int) string {
	b, _ := os.ReadFile(filepath.Join(hw.rp.dir, "logs", fmt.Sprintf("client%d.log", i)))
	return string(b)
}

// rcHWQuotaWords recognise a daily-quota refusal in a message of the
// project or in a no_work_total reason.
var rcHWQuotaWords = regexp.MustCompile(`(?i)daily|quota`)

// rcHWJobNames matches the run's task names, which contain "quota".
var rcHWJobNames = regexp.MustCompile(`\b(asic|mt|quota)_\w+`)

// projectMessages returns the messages the project sent client i as the
// client logged them ("[project] text"), without the client's own
// notes on its work.
func (hw *rcHWRun) projectMessages(i int) []string {
	var out []string
	prefix := "[Real hardware test] "
	for _, line := range strings.Split(hw.clientLog(i), "\n") {
		_, text, ok := strings.Cut(line, prefix)
		if !ok || strings.HasPrefix(text, "[") || rcHWJobNames.MatchString(text) {
			continue
		}
		switch {
		case strings.HasPrefix(text, "Sending scheduler request"), strings.HasPrefix(text, "Requesting new tasks"),
			strings.HasPrefix(text, "Scheduler request completed"), strings.HasPrefix(text, "Project requested delay"),
			strings.HasPrefix(text, "Reporting "), strings.HasPrefix(text, "Sending trickle-up"),
			strings.HasPrefix(text, "update requested by user"), strings.HasPrefix(text, "Not requesting tasks"),
			strings.HasPrefix(text, "Started download"), strings.HasPrefix(text, "Finished download"),
			strings.HasPrefix(text, "Started upload"), strings.HasPrefix(text, "Finished upload"),
			strings.HasPrefix(text, "Master file"):
			continue
		}
		out = append(out, strings.TrimSpace(text))
	}
	return out
}

// firstReply waits for client i's first scheduler reply and returns the
// messages the project sent in it.
func (hw *rcHWRun) firstReply(i int) []string {
	deadline := time.Now().Add(90 * time.Second)
	for !strings.Contains(hw.clientLog(i), "Scheduler request completed") {
		if time.Now().After(deadline) {
			hw.rp.dumpLogs()
			hw.rp.t.Fatalf("client%d: no scheduler reply after 90s", i)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // the reply's messages follow
	return hw.projectMessages(i)
}

// findRefusal returns the evidence that the scheduler refused client1
// work for the daily quota: the project's message in its event log, or
// the scheduler's no_work_total counter with such a reason (client0 is
// not refused for its quota: it has two CPUs, and the scheduler scales
// its quota of two by them, as BOINC's does for an "other" coprocessor,
// so its three jobs fit); "" if none.
func (hw *rcHWRun) findRefusal() string {
	for _, m := range hw.projectMessages(1) {
		if rcHWQuotaWords.MatchString(m) {
			return "client1's event log: " + m
		}
	}
	resp, err := http.Get("http://" + hw.schedListen + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "no_work_total{") && rcHWQuotaWords.MatchString(line) && !strings.HasSuffix(line, " 0") {
			return "scheduler metric " + line
		}
	}
	return ""
}

// checkAsic checks that client0 completed the coprocessor app's jobs with
// the coprocessor (boinccmd showed "+ 1 miner_asic"), that client1 got
// none (progress reports that as a problem), and that client1 was told
// why it got no work while such jobs were waiting.
func (hw *rcHWRun) checkAsic(pg rcHWProgress) {
	t := hw.rp.t
	if pg.valid[rcHWAppAsic][0] < rcHWAsicJobs {
		t.Errorf("client0 completed %d %s jobs validly, want %d", pg.valid[rcHWAppAsic][0], rcHWAppAsic, rcHWAsicJobs)
	}
	seen := false
	for name, res := range hw.taskRes {
		if strings.HasPrefix(name, "asic_") {
			for r := range res {
				if rcHWCoprocName.MatchString(r) {
					seen = true
				}
			}
		}
	}
	if !seen {
		t.Errorf("boinccmd --get_tasks never showed client0 running an asic task on its %s (resources seen: %v)", rcHWCoproc, hw.taskRes)
	}
	state := hw.clientState(0)
	if av := appVersionBlock(state, rcHWAppAsic); !strings.Contains(av, "<type>"+rcHWCoproc+"</type>") {
		t.Errorf("client0's client_state.xml: the %s app version has no <coproc> %s: %q", rcHWAppAsic, rcHWCoproc, av)
	}
	// client1 asked for CPU work while only the coprocessor's jobs
	// waited: it must have been told why it got none, not merely that
	// there was no work.
	specific := false
	for _, m := range hw.told {
		if !strings.HasPrefix(m, "No tasks are available at the moment") {
			specific = true
		}
	}
	if !specific {
		t.Errorf("client1's first reply, while only %s jobs (plan class needing a %s) waited, told it %q: want the reason it gets none",
			rcHWAppAsic, rcHWCoproc, hw.told)
	}
	t.Logf("client1's messages from the project over the run: %q", hw.projectMessages(1))
}

// rcHWCoprocName is how boinccmd names the coprocessor in a task's
// resources ("0.917 CPUs + 1 Miner ASIC").
var rcHWCoprocName = regexp.MustCompile(`(?i)miner[ _]asic`)

// checkMT checks that client1 holds the multi-threaded version with two
// CPUs and ran its tasks with two.
func (hw *rcHWRun) checkMT() {
	t := hw.rp.t
	av := appVersionBlock(hw.clientState(1), rcHWAppMT)
	if !strings.Contains(av, "<avg_ncpus>2.000000</avg_ncpus>") || !strings.Contains(av, "<plan_class>mt</plan_class>") {
		t.Errorf("client1's client_state.xml: the %s app version = %q, want plan class mt with avg_ncpus 2", rcHWAppMT, av)
	}
	n := 0
	for name, res := range hw.taskRes {
		if strings.HasPrefix(name, "mt_") {
			n++
			if !res["2 CPUs"] || len(res) != 1 {
				t.Errorf("boinccmd --get_tasks showed %s executing with %v, want \"2 CPUs\"", name, res)
			}
		}
	}
	if n == 0 {
		t.Errorf("boinccmd --get_tasks never showed an mt task executing")
	}
}

// checkQuota checks the quota's course on client1: down to one after the
// error, refused, then up again, and the late job sent and valid.
func (hw *rcHWRun) checkQuota(pg rcHWProgress) {
	t := hw.rp.t
	t.Logf("client1's daily quota for %s over the run: %v", rcHWAppQuota, hw.quotaLog)
	one, after := false, false
	for _, q := range hw.quotaLog {
		if q == 1 {
			one = true
		} else if one && q > 1 {
			after = true
		}
	}
	if !one || !after {
		t.Errorf("client1's max_jobs_per_day for %s went %v: want 1 after its error, then more after valid results", rcHWAppQuota, hw.quotaLog)
	}
	if hw.refusal == "" {
		t.Errorf("no sign the scheduler refused client1 for the daily quota (no message of the project to client1 nor no_work_total reason with \"daily\" or \"quota\")")
	}
	if hw.sentAtOne != "" {
		t.Errorf("%s was sent to client1 while its daily quota for %s was one and it had already had %d jobs that day", hw.sentAtOne, rcHWAppQuota, rcHWSlowJobs+1)
	}
	if !pg.afterValid {
		t.Errorf("%s (submitted after the error) was not completed validly by client1", rcHWAfterJob)
	}
}

func (hw *rcHWRun) clientState(i int) string {
	b, err := os.ReadFile(filepath.Join(hw.rp.users[i].dataDir, "client_state.xml"))
	if err != nil {
		hw.rp.t.Fatalf("read client%d's state: %v", i, err)
	}
	return string(b)
}

// appVersionBlock returns the <app_version> of app in a client_state.xml,
// or "".
func appVersionBlock(clientState, app string) string {
	for _, b := range strings.Split(clientState, "<app_version>")[1:] {
		b, _, _ = strings.Cut(b, "</app_version>")
		if strings.Contains(b, "<app_name>"+app+"</app_name>") {
			return b
		}
	}
	return ""
}
