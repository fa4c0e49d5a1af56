package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/statuspage"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// statusArtifactsDir keeps what the browser tests saw (gitignored).
const statusArtifactsDir = "artifacts"

// TestStatusPageInChromium renders the status page that a real `taskctl
// status serve` process serves in headless Chromium, keeps a screenshot
// (e2e/artifacts/statuspage.png) and the rendered DOM, and checks every
// number on the page against counts the test reads from the database with
// its own SQL. The daemons section lists a real file_deleter (up, with the
// age of its last pass) and an address nothing listens on (down).
func TestStatusPageInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	chromium := needChromium(t)
	bin := statusBuild(t, "taskctl", "file_deleter")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	dsn := storetest.NewDatabase(t)
	st, err := store.Open(ctx, dsn, store.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	seedStatusProject(t, ctx, st, time.Now().Unix())

	// A real daemon for the page to find up: a file_deleter on a database
	// of its own, so it leaves the counted rows alone.
	fdAddr := statusFreeAddr(t)
	fd := statusStart(t, filepath.Join(bin, "file_deleter"), "--db-dsn", storetest.NewDatabase(t),
		"--project-dir", t.TempDir(), "--listen", fdAddr, "--sleep", "1s")
	statusWaitPass(t, ctx, fdAddr, fd)
	deadAddr := statusFreeAddr(t)

	cfg := filepath.Join(t.TempDir(), "project.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "db-dsn: %q\ndaemons:\n"+
		"  - program: file_deleter\n    listen: %s\n"+
		"  - program: transitioner\n    listen: %s\n", dsn, fdAddr, deadAddr), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := statusStart(t, filepath.Join(bin, "taskctl"), "--config", cfg, "status", "serve",
		"--listen", "127.0.0.1:0", "--refresh", "0", "--title", "E2E project")
	url := srv.waitLine(t, regexp.MustCompile(`serving the status page on (http://\S+)`))

	if err := os.MkdirAll(statusArtifactsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	shot, _ := filepath.Abs(filepath.Join(statusArtifactsDir, "statuspage.png"))
	_ = os.Remove(shot)
	statusChromium(t, ctx, chromium, "--screenshot="+shot, "--window-size=1280,1100", url)
	if b, err := os.ReadFile(shot); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) || len(b) < 10_000 {
		t.Errorf("screenshot %s: %d bytes, %v; want a PNG of the page", shot, len(b), err)
	}
	dom := statusChromium(t, ctx, chromium, "--dump-dom", url)
	if err := os.WriteFile(filepath.Join(statusArtifactsDir, "statuspage.html"), dom, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s, DOM %s", shot, filepath.Join(statusArtifactsDir, "statuspage.html"))

	page := map[string]int64{}
	for _, m := range regexp.MustCompile(`id="([a-z_@\-]+)">(\d+)<`).FindAllSubmatch(dom, -1) {
		n, _ := strconv.ParseInt(string(m[2]), 10, 64)
		page[string(m[1])] = n
	}
	tm := regexp.MustCompile(`id="time">([^<]+)<`).FindSubmatch(dom)
	if tm == nil {
		t.Fatalf("the rendered page has no time:\n%s", dom)
	}
	at, err := time.Parse(time.RFC3339, string(tm[1]))
	if err != nil {
		t.Fatal(err)
	}
	want := countStatus(t, ctx, st, at.Unix())
	if len(want) < 20 {
		t.Fatalf("only %d counts to compare: %v", len(want), want)
	}
	for id, n := range want {
		if got, ok := page[id]; !ok || got != n {
			t.Errorf("page %s = %d (shown: %v), database says %d", id, got, ok, n)
		}
	}
	for _, w := range []string{`id="daemon-file_deleter" class="up"`, `id="daemon-transitioner" class="down"`, "E2E project"} {
		if !bytes.Contains(dom, []byte(w)) {
			t.Errorf("rendered page lacks %q", w)
		}
	}
	if !regexp.MustCompile(`id="daemon-file_deleter" class="up">.*?<td>\d+ s ago</td>`).Match(dom) {
		t.Errorf("file_deleter row shows no age of its last pass")
	}

	// `taskctl status --json` reports the same numbers as the page.
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "taskctl"), "--config", cfg, "status", "--json").Output()
	if err != nil {
		t.Fatalf("taskctl status --json: %v", err)
	}
	var s statuspage.Status
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("decode taskctl status --json: %v\n%s", err, out)
	}
	if q := s.Queues; q.UnsentResults != want["unsent_results"] || q.InProgressResults != want["in_progress_results"] ||
		q.JobsHeld != want["jobs_held"] || s.Throughput.LastDay.ResultsReported != want["day_results_reported"] {
		t.Errorf("taskctl status --json queues %+v, throughput %+v; the database says %v", q, s.Throughput, want)
	}
	text, err := exec.CommandContext(ctx, filepath.Join(bin, "taskctl"), "--config", cfg, "status").Output()
	if err != nil || !regexp.MustCompile(`transitioner\s+\S+\s+down`).Match(text) {
		t.Errorf("taskctl status = %v:\n%s\nwant the transitioner down", err, text)
	}
}

// needChromium returns the path of Debian's chromium. It skips the test when
// chromium is missing, except under `make test` or CI, where
// scripts/chromium-up.sh should have installed it.
func needChromium(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("chromium")
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" || os.Getenv("TASKSERVER_REAL_CLIENT") == "1" {
		t.Fatalf("chromium not found (%v): run scripts/chromium-up.sh", err)
	}
	t.Skip("chromium not found: run scripts/chromium-up.sh to install Debian's chromium")
	return ""
}

// statusBuild builds the named programs of cmd/ (faster than buildPrograms).
func statusBuild(t *testing.T, programs ...string) string {
	t.Helper()
	dir := t.TempDir()
	args := []string{"build", "-o", dir + "/"}
	for _, p := range programs {
		args = append(args, "./cmd/"+p)
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), args...)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return dir
}

// statusFreeAddr returns a loopback address nothing listens on at the moment.
func statusFreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// statusProcess is a program the test started; its output lines arrive on lines.
type statusProcess struct {
	cmd   *exec.Cmd
	lines chan string
}

// statusStart starts a program, stopped (SIGINT, then kill) at the end of
// the test.
func statusStart(t *testing.T, path string, args ...string) *statusProcess {
	t.Helper()
	cmd := exec.Command(path, args...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	p := &statusProcess{cmd: cmd, lines: make(chan string, 1000)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("%s %s after SIGINT: %v", filepath.Base(path), strings.Join(args, " "), err)
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("%s did not stop within 15 s of SIGINT", filepath.Base(path))
		}
		pw.Close()
		<-done
	})
	return p
}

// waitLine returns the first submatch of the first output line matching re.
func (p *statusProcess) waitLine(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	timeout := time.After(60 * time.Second)
	var seen []string
	for {
		select {
		case l := <-p.lines:
			if m := re.FindStringSubmatch(l); m != nil {
				return m[1]
			}
			seen = append(seen, l)
		case <-timeout:
			t.Fatalf("%s printed no line matching %s within 60 s:\n%s", p.cmd.Path, re, strings.Join(seen, "\n"))
		}
	}
}

// statusWaitPass waits until the daemon at addr is healthy and has
// finished a pass.
func statusWaitPass(t *testing.T, ctx context.Context, addr string, p *statusProcess) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := statusGet(ctx, "http://"+addr+"/metrics"); err == nil &&
			regexp.MustCompile(`(?m)^taskserver_file_deleter_last_success_timestamp_seconds [1-9]`).Match(b) {
			if _, err := statusGet(ctx, "http://"+addr+"/healthz"); err == nil {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	var out []string
	for len(p.lines) > 0 {
		out = append(out, <-p.lines)
	}
	t.Fatalf("file_deleter at %s finished no pass within 60 s:\n%s", addr, strings.Join(out, "\n"))
}

func statusGet(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return b, err
}

// statusChromium runs headless Chromium once on url and returns its standard
// output. The profile lives in a temporary directory; --no-sandbox because
// tests may run as root.
func statusChromium(t *testing.T, ctx context.Context, chromium string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	full := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--hide-scrollbars", "--user-data-dir=" + t.TempDir()}, args...)
	cmd := exec.CommandContext(ctx, chromium, full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

// seedStatusProject inserts two apps, jobs and results in known states,
// their times relative to now and far from the windows' edges.
func seedStatusProject(t *testing.T, ctx context.Context, st *store.Store, now int64) {
	t.Helper()
	var apps []int64
	for _, name := range []string{"einstein", "rosetta"} {
		id := storetest.App(t, st, storetest.AppOptions{CreateTime: now, Name: name, UserFriendlyName: name, CreditPolicy: "fpops"}).ID
		apps = append(apps, id)
	}
	never := now + 10_000_000
	var wus []int64
	for i, wu := range []storetest.JobOptions{
		{App: apps[0], TransitionTime: now - 300, NeedValidate: true},
		{App: apps[0], TransitionTime: now - 30, AssimilateState: state.AssimilateReady},
		{App: apps[0], TransitionTime: never, NeedValidate: true},
		{App: apps[1], TransitionTime: never, AssimilateState: state.AssimilateDone, FileDeleteState: state.FileDeleteReady, ModTime: now - 900},
		{App: apps[1], TransitionTime: never, AssimilateState: state.AssimilateDone, ModTime: now - 20_000, HoldReason: state.ErrTooManyErrorResults},
		{App: apps[1], TransitionTime: never, AssimilateState: state.AssimilateDone, ModTime: now - 200_000, ErrorMask: state.ErrTooManyTotalResults},
	} {
		wu.CreateTime, wu.Name = now-300_000, fmt.Sprintf("status_job_%d", i)
		id := storetest.Job(t, st, wu).ID
		wus = append(wus, id)
	}
	type rs struct {
		n   int
		app int
		r   storetest.InstanceOptions
	}
	i := 0
	for _, g := range []rs{
		{7, 0, storetest.InstanceOptions{ServerState: state.ServerUnsent}},
		{5, 0, storetest.InstanceOptions{ServerState: state.ServerInProgress}},
		{3, 1, storetest.InstanceOptions{ServerState: state.ServerInProgress}},
		{4, 0, storetest.InstanceOptions{ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ReceivedTime: now - 600,
			ValidateState: state.ValidateValid, ModTime: now - 500, FileDeleteState: state.FileDeleteReady}},
		{2, 1, storetest.InstanceOptions{ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ReceivedTime: now - 30_000,
			ValidateState: state.ValidateInvalid, ModTime: now - 30_000}},
		{1, 1, storetest.InstanceOptions{ServerState: state.ServerOver, Outcome: state.OutcomeClientError, ReceivedTime: now - 900, ModTime: now - 900}},
		{3, 1, storetest.InstanceOptions{ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ReceivedTime: now - 500_000,
			ValidateState: state.ValidateValid, ModTime: now - 500_000}},
	} {
		for range g.n {
			r := g.r
			r.CreateTime, r.App, r.Job, r.Name = now-300_000, apps[g.app], wus[0], fmt.Sprintf("status_result_%d", i)
			storetest.Instance(t, st, r)
			i++
		}
	}
	// What the scheduler, validator and assimilator would have counted as
	// they wrote those rows, a minute at a time.
	for _, q := range []string{
		`INSERT INTO throughput (minute, kind, shard, n) SELECT received_time DIV 60, 1, 0, COUNT(*) FROM result
WHERE received_time > 0 GROUP BY received_time DIV 60`,
		`INSERT INTO throughput (minute, kind, shard, n) SELECT mod_time DIV 60, 2, 0, COUNT(*) FROM result
WHERE validate_state IN (1, 2) GROUP BY mod_time DIV 60`,
		`INSERT INTO throughput (minute, kind, shard, n) SELECT mod_time DIV 60, 3, 0, COUNT(*) FROM workunit
WHERE assimilate_state = 2 GROUP BY mod_time DIV 60`,
	} {
		storetest.Exec(t, st, q)
	}
}

// countStatus reads, with the test's own SQL, what each number on the page
// must be at Unix time now, keyed by the element id the page gives it.
func countStatus(t *testing.T, ctx context.Context, st *store.Store, now int64) map[string]int64 {
	t.Helper()
	queries := map[string]string{
		"unsent_results":                    `SELECT COUNT(*) FROM result WHERE server_state = 2`,
		"in_progress_results":               `SELECT COUNT(*) FROM result WHERE server_state = 4`,
		"jobs_due_transition":               `SELECT COUNT(*) FROM workunit WHERE transition_time <= :now`,
		"oldest_due_transition_age_seconds": `SELECT COALESCE(:now - MIN(transition_time), 0) FROM workunit WHERE transition_time <= :now`,
		"jobs_awaiting_validation":          `SELECT COUNT(*) FROM workunit WHERE need_validate = 1`,
		"jobs_awaiting_assimilation":        `SELECT COUNT(*) FROM workunit WHERE assimilate_state = 1`,
		"job_files_awaiting_deletion":       `SELECT COUNT(*) FROM workunit WHERE file_delete_state = 1`,
		"result_files_awaiting_deletion":    `SELECT COUNT(*) FROM result WHERE file_delete_state = 1`,
		"jobs_failed":                       `SELECT COUNT(*) FROM workunit WHERE error_mask <> 0`,
		"jobs_held":                         `SELECT COUNT(*) FROM workunit WHERE hold_reason <> 0`,
		"in_progress-einstein":              `SELECT COUNT(*) FROM result r JOIN app a ON a.id = r.appid WHERE r.server_state = 4 AND a.name = 'einstein'`,
		"in_progress-rosetta":               `SELECT COUNT(*) FROM result r JOIN app a ON a.id = r.appid WHERE r.server_state = 4 AND a.name = 'rosetta'`,
		"hour_results_reported":             `SELECT COALESCE(SUM(n), 0) FROM throughput WHERE kind = 1 AND minute * 60 >= :now - 3600`,
		"day_results_reported":              `SELECT COALESCE(SUM(n), 0) FROM throughput WHERE kind = 1 AND minute * 60 >= :now - 86400`,
		"hour_results_validated":            `SELECT COALESCE(SUM(n), 0) FROM throughput WHERE kind = 2 AND minute * 60 >= :now - 3600`,
		"day_results_validated":             `SELECT COALESCE(SUM(n), 0) FROM throughput WHERE kind = 2 AND minute * 60 >= :now - 86400`,
		"hour_jobs_assimilated":             `SELECT COALESCE(SUM(n), 0) FROM throughput WHERE kind = 3 AND minute * 60 >= :now - 3600`,
		"day_jobs_assimilated":              `SELECT COALESCE(SUM(n), 0) FROM throughput WHERE kind = 3 AND minute * 60 >= :now - 86400`,
		"jobs_total":                        `SELECT COUNT(*) FROM workunit`,
		"results_total":                     `SELECT COUNT(*) FROM result`,
		"results-unsent-init":               `SELECT COUNT(*) FROM result WHERE server_state = 2 AND outcome = 0`,
		"results-over-success":              `SELECT COUNT(*) FROM result WHERE server_state = 5 AND outcome = 1`,
		"results-over-client_error":         `SELECT COUNT(*) FROM result WHERE server_state = 5 AND outcome = 3`,
	}
	out := map[string]int64{}
	for id, q := range queries {
		var n int64
		if err := st.DB().GetContext(ctx, &n, strings.ReplaceAll(q, ":now", strconv.FormatInt(now, 10))); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		out[id] = n
	}
	return out
}
