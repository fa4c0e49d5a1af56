package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/taskserver/taskserver/internal/daemon"
	"github.com/taskserver/taskserver/internal/projectrun"
	"gopkg.in/yaml.v3"
)

// deployDir is the repository's deploy/ directory, seen from e2e/.
const deployDir = "../deploy"

// TestDeploy checks every file in deploy/ against the real programs:
//   - each systemd unit parses (systemd-analyze verify, when the machine has
//     it), names a program that exists and passes only flags that program's
//     --help lists, and listens where prometheus.yml scrapes it;
//   - the Grafana dashboard parses and every panel has a query;
//   - promtool accepts prometheus.yml and alerts.yml;
//   - a real Prometheus, given deploy's scrape config and rules with the
//     targets rewritten to a running local project's ports, scrapes every
//     daemon, reads a metric back through the query API, finds every metric
//     the alerts and the dashboard use, evaluates every dashboard query and
//     every rule without error.
func TestDeploy(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	bin := buildPrograms(t)
	exprs := map[string][]string{} // file -> PromQL expressions
	t.Run("SystemdUnits", func(t *testing.T) { checkUnits(t, bin) })
	t.Run("Dashboard", func(t *testing.T) { exprs["grafana/taskserver.json"] = checkDashboard(t) })
	exprs["prometheus/alerts.yml"] = alertExprs(t)
	t.Run("Promtool", func(t *testing.T) {
		promtool := needProm(t, "promtool")
		for _, args := range [][]string{
			{"check", "config", filepath.Join(deployDir, "prometheus", "prometheus.yml")},
			{"check", "rules", filepath.Join(deployDir, "prometheus", "alerts.yml")},
		} {
			out, err := exec.Command(promtool, args...).CombinedOutput()
			if err != nil {
				t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	})
	t.Run("PrometheusScrapes", func(t *testing.T) { checkScrape(t, bin, exprs) })
}

// needProm returns the path of a program of Debian's prometheus package. It
// skips the test when the program is missing, except under `make test` or
// CI, where scripts/prometheus-up.sh should have installed it.
func needProm(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" || os.Getenv("TASKSERVER_REAL_CLIENT") == "1" {
		t.Fatalf("%s not found (%v): run scripts/prometheus-up.sh", name, err)
	}
	t.Skipf("%s not found: run scripts/prometheus-up.sh to install Debian's prometheus package", name)
	return ""
}

// unitFile is one systemd unit of deploy/systemd.
type unitFile struct {
	name string            // file name: taskserver-validator@.service
	keys map[string]string // "Section.Key" -> value (the last one)
	body string
}

func readUnits(t *testing.T) []unitFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(deployDir, "systemd", "*"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no units in deploy/systemd: %v", err)
	}
	var units []unitFile
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		u := unitFile{name: filepath.Base(p), keys: map[string]string{}, body: string(b)}
		section := ""
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			switch {
			case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
			case strings.HasPrefix(line, "["):
				section = strings.Trim(line, "[]")
			default:
				k, v, ok := strings.Cut(line, "=")
				if !ok {
					t.Errorf("%s: line %q is not key=value", u.name, line)
					continue
				}
				u.keys[section+"."+strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
		units = append(units, u)
	}
	return units
}

// scrapeTargets reads deploy's prometheus.yml: job name -> targets.
func scrapeTargets(t *testing.T) map[string][]string {
	t.Helper()
	var cfg struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	b, err := os.ReadFile(filepath.Join(deployDir, "prometheus", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("parse prometheus.yml: %v", err)
	}
	jobs := map[string][]string{}
	for _, sc := range cfg.ScrapeConfigs {
		for _, s := range sc.StaticConfigs {
			jobs[sc.JobName] = append(jobs[sc.JobName], s.Targets...)
		}
	}
	return jobs
}

// checkUnits checks deploy/systemd against the built programs in bin.
func checkUnits(t *testing.T, bin string) {
	units := readUnits(t)
	jobs := scrapeTargets(t)
	helps := map[string]string{} // "prog cmd..." -> --help output
	help := func(prog string, path []string) string {
		key := strings.Join(append([]string{prog}, path...), " ")
		if h, ok := helps[key]; ok {
			return h
		}
		out, err := exec.Command(filepath.Join(bin, prog), append(slices.Clone(path), "--help")...).CombinedOutput()
		if err != nil {
			t.Errorf("%s --help: %v\n%s", key, err, out)
		}
		helps[key] = string(out)
		return string(out)
	}
	unitOf := map[string]bool{} // programs with a unit
	var hasTarget bool
	for _, u := range units {
		if strings.HasSuffix(u.name, ".target") {
			hasTarget = true
			continue
		}
		if !strings.HasSuffix(u.name, ".service") {
			t.Errorf("%s: not a .service or .target", u.name)
			continue
		}
		if u.keys["Install.WantedBy"] != "taskserver.target" || u.keys["Unit.PartOf"] != "taskserver.target" {
			t.Errorf("%s: WantedBy=%q PartOf=%q, want both taskserver.target (so the target starts and stops it)",
				u.name, u.keys["Install.WantedBy"], u.keys["Unit.PartOf"])
		}
		exec := u.keys["Service.ExecStart"]
		if exec == "" {
			t.Errorf("%s: no ExecStart", u.name)
			continue
		}
		template := strings.Contains(u.name, "@.")
		if template && !strings.Contains(exec, "--mod-index %i") {
			t.Errorf("%s: a template whose ExecStart %q does not pass --mod-index %%i", u.name, exec)
		}
		// Instance 0 of a template; %p is the unit's prefix.
		prefix, _, _ := strings.Cut(strings.TrimSuffix(u.name, ".service"), "@")
		words := strings.Fields(strings.NewReplacer("%i", "0", "%p", prefix).Replace(exec))
		prog := filepath.Base(words[0])
		if words[0] != "/usr/local/bin/"+prog {
			t.Errorf("%s: ExecStart runs %s, want /usr/local/bin/<program> as the README installs them", u.name, words[0])
		}
		if _, err := os.Stat(filepath.Join(bin, prog)); err != nil {
			t.Errorf("%s: ExecStart runs %s, which is no program of cmd/: %v", u.name, prog, err)
			continue
		}
		unitOf[prog] = true
		// Every flag takes a value in these units; a word that is no flag's
		// value is a subcommand, and the flags after it are its own.
		var path []string
		flags := map[string]string{}
		for i := 1; i < len(words); i++ {
			w := words[i]
			if !strings.HasPrefix(w, "-") {
				path = append(path, w)
				continue
			}
			name, val, hasVal := strings.Cut(strings.TrimLeft(w, "-"), "=")
			if !hasVal && i+1 < len(words) {
				i++
				val = words[i]
			}
			flags[name] = val
			re := regexp.MustCompile(`(?m)(^|[\s,])--` + regexp.QuoteMeta(name) + `([\s,=]|$)`)
			if !re.MatchString(help(prog, path)) {
				t.Errorf("%s: ExecStart passes --%s, which `%s --help` does not list", u.name, name, strings.Join(append([]string{prog}, path...), " "))
			}
		}
		if prog == "taskctl" {
			continue // the status page is not scraped
		}
		listen := flags["listen"]
		if listen == "" {
			t.Errorf("%s: no --listen: the metrics port would be the program's default, not the one prometheus.yml scrapes", u.name)
		} else if !slices.Contains(jobs[prog], listen) {
			t.Errorf("%s: replica 0 listens on %s, but prometheus.yml's job %q scrapes %v", u.name, listen, prog, jobs[prog])
		}
	}
	if !hasTarget {
		t.Errorf("no taskserver.target in deploy/systemd")
	}
	for job := range jobs {
		if !unitOf[job] {
			t.Errorf("prometheus.yml scrapes job %q, which no unit in deploy/systemd runs", job)
		}
	}
	for _, p := range []string{"scheduler", "feeder", "transitioner", "validator", "assimilator", "file_deleter", "db_purge", "db_dump", "work_generator", "taskctl"} {
		if !unitOf[p] {
			t.Errorf("no unit in deploy/systemd runs %s", p)
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Logf("systemd-analyze not found: units checked without it")
		return
	}
	// systemd-analyze wants the programs to exist: point the units at bin;
	// a template is verified as its instance 0.
	dir := t.TempDir()
	var files []string
	for _, u := range units {
		name := strings.Replace(u.name, "@.", "@0.", 1)
		body := strings.ReplaceAll(u.body, "/usr/local/bin/", bin+"/")
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.Join(dir, name))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, analyze, append([]string{"verify", "--man=no"}, files...)...)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0")
	out, err := cmd.CombinedOutput()
	// verify exits 0 on unknown keys and bad values, logging them: any
	// output is a finding.
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// dashPanel is the part of a Grafana panel the test reads.
type dashPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

// checkDashboard parses the Grafana dashboard and returns its queries.
func checkDashboard(t *testing.T) []string {
	b, err := os.ReadFile(filepath.Join(deployDir, "grafana", "taskserver.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title      string      `json:"title"`
		UID        string      `json:"uid"`
		Panels     []dashPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name, Type, Query string
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("parse taskserver.json: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard title %q uid %q: want both", d.Title, d.UID)
	}
	if !slices.ContainsFunc(d.Templating.List, func(v struct{ Name, Type, Query string }) bool {
		return v.Name == "DS_PROMETHEUS" && v.Type == "datasource" && v.Query == "prometheus"
	}) {
		t.Errorf("dashboard has no templated Prometheus datasource DS_PROMETHEUS: %+v", d.Templating.List)
	}
	var exprs []string
	ids := map[int]bool{}
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${DS_PROMETHEUS}" {
				t.Errorf("panel %q: datasource %+v, want uid ${DS_PROMETHEUS}", p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, q := range p.Targets {
				if strings.TrimSpace(q.Expr) == "" {
					t.Errorf("panel %q has an empty query", p.Title)
				}
				exprs = append(exprs, q.Expr)
			}
		}
	}
	walk(d.Panels)
	if len(exprs) < 20 {
		t.Errorf("dashboard has %d queries: too few to cover every daemon", len(exprs))
	}
	return exprs
}

// alertExprs returns the expressions of deploy's alerting rules.
func alertExprs(t *testing.T) []string {
	t.Helper()
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	b, err := os.ReadFile(filepath.Join(deployDir, "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("parse alerts.yml: %v", err)
	}
	var exprs []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	return exprs
}

var (
	nameRegexSelector = regexp.MustCompile(`\{__name__=~"[^"]*"[^}]*\}`)
	nameSelector      = regexp.MustCompile(`\btaskserver_[a-z0-9_]+(\{[^}]*\})?`)
)

// selectors returns the series selectors naming task-server metrics in a
// PromQL expression: `name{...}` and `{__name__=~"..."}`, with Grafana's
// variables filled in.
func selectors(expr string) []string {
	expr = strings.NewReplacer("$__rate_interval", "1m").Replace(expr)
	out := nameRegexSelector.FindAllString(expr, -1)
	// What is left names its metrics plainly.
	rest := nameRegexSelector.ReplaceAllString(expr, "")
	return append(out, nameSelector.FindAllString(rest, -1)...)
}

// checkScrape runs deploy's Prometheus configuration against a running
// local project.
func checkScrape(t *testing.T, bin string, exprs map[string][]string) {
	prom := needProm(t, "prometheus")
	p := lcParams{Jobs: 60, Hosts: 8, Users: 3, DelayBound: 30 * time.Second, ComputeTime: 100 * time.Millisecond,
		MaxError: 3, MaxTotal: 6, MaxSuccess: 3, FpopsEst: 1e10, Seed: 7}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lp := newLCProject(t, bin, p)
	lp.start(ctx, p)
	defer func() {
		if t.Failed() {
			lp.dumpLogs()
		}
	}()

	// Each running daemon's metrics address, by program (the scrape job).
	targets := map[string][]string{}
	for _, d := range lp.daemons {
		prog, _, _ := strings.Cut(d.Name(), ".")
		addr, err := d.WaitAddr(ctx, daemon.AdminListener)
		if err != nil {
			t.Fatalf("%s: %v", d.Name(), err)
		}
		targets[prog] = append(targets[prog], addr)
	}

	// deploy's prometheus.yml with each job's targets replaced, scraping
	// and evaluating every second.
	raw, err := os.ReadFile(filepath.Join(deployDir, "prometheus", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("parse prometheus.yml: %v", err)
	}
	cfg["global"] = map[string]any{"scrape_interval": "1s", "evaluation_interval": "1s"}
	scrapeConfigs, _ := cfg["scrape_configs"].([]any)
	nTargets := 0
	seen := map[string]bool{}
	for _, sc := range scrapeConfigs {
		m := sc.(map[string]any)
		job, _ := m["job_name"].(string)
		if len(targets[job]) == 0 {
			t.Errorf("prometheus.yml's job %q is no program of the running project", job)
			continue
		}
		seen[job] = true
		m["static_configs"] = []any{map[string]any{"targets": targets[job]}}
		nTargets += len(targets[job])
	}
	for prog := range targets {
		if !seen[prog] {
			t.Errorf("prometheus.yml has no job scraping %s", prog)
		}
	}
	dir := t.TempDir()
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile(filepath.Join(deployDir, "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts.yml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	port, err := freeTCPPort()
	if err != nil {
		t.Fatal(err)
	}
	api := fmt.Sprintf("http://127.0.0.1:%d", port)
	logDir := filepath.Join(lp.dir, "logs")
	pr, err := projectrun.Start(projectrun.Spec{Name: "prometheus", Bin: prom, LogDir: logDir, Args: []string{
		"--config.file=" + filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(dir, "data"), "--web.listen-address=" + fmt.Sprintf("127.0.0.1:%d", port),
		"--log.level=warn"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := pr.Stop(20 * time.Second); err != nil {
			t.Errorf("stop prometheus: %v", err)
		}
	}()
	if err := waitUntil(ctx, pr, func() bool {
		resp, err := http.Get(api + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}); err != nil {
		t.Fatalf("prometheus not ready on %s: %v", api, err)
	}

	// Every target up.
	var up []promSample
	if err := waitUntil(ctx, pr, func() bool {
		up = promQuery(t, api, "up")
		if len(up) != nTargets {
			return false
		}
		for _, s := range up {
			if s.Value != "1" {
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatalf("waiting for all %d targets up: %v; last `up`: %v", nTargets, err, up)
	}
	// Real work read back: passes and results sent, through the query API.
	for _, q := range []string{"sum(taskserver_transitioner_passes_total) > 0", "sum(taskserver_scheduler_results_sent_total) > 0"} {
		if err := waitUntil(ctx, pr, func() bool { return len(promQuery(t, api, q)) == 1 }); err != nil {
			t.Fatalf("query %q never returned a sample: %v", q, err)
		}
	}
	if err := lp.died(); err != nil {
		t.Fatalf("project: %v", err)
	}

	// Every metric the alerts and the dashboard use is among the scraped
	// series, and every dashboard query evaluates.
	names := promNames(t, api)
	var missing []string
	for _, f := range slices.Sorted(maps.Keys(exprs)) {
		for _, e := range exprs[f] {
			for _, sel := range selectors(e) {
				if !promSeriesExist(t, api, sel) {
					missing = append(missing, fmt.Sprintf("%s: %s", f, sel))
				}
			}
			if strings.HasPrefix(f, "grafana/") {
				q := strings.NewReplacer("$__rate_interval", "1m").Replace(e)
				if _, err := promQueryErr(api, q); err != nil {
					t.Errorf("%s: query %q: %v", f, q, err)
				}
			}
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		missing = slices.Compact(missing)
		t.Errorf("%d selectors in deploy/ match no scraped series:\n  %s\nscraped task-server metrics:\n  %s",
			len(missing), strings.Join(missing, "\n  "), strings.Join(names, "\n  "))
	}

	// Every rule evaluated without error.
	var bad []string
	if err := waitUntil(ctx, pr, func() bool {
		var ok bool
		ok, bad = promRulesHealthy(t, api)
		return ok
	}); err != nil {
		t.Errorf("rules not all evaluated cleanly: %v: %v", err, bad)
	}
}

// promSample is one sample of an instant vector.
type promSample struct {
	Metric map[string]string
	Value  string
}

func (s promSample) String() string { return fmt.Sprintf("%v=%s", s.Metric, s.Value) }

// promGet GETs an API path and decodes the data field of a success reply.
func promGet(api, path string, params url.Values, data any) error {
	resp, err := http.Get(api + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("GET %s: %d %q: %w", path, resp.StatusCode, body, err)
	}
	if r.Status != "success" {
		return fmt.Errorf("GET %s %v: %s: %s", path, params, r.Status, r.Error)
	}
	return json.Unmarshal(r.Data, data)
}

func promQueryErr(api, q string) ([]promSample, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     json.RawMessage
	}
	if err := promGet(api, "/api/v1/query", url.Values{"query": {q}}, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, nil
	}
	var raw []struct {
		Metric map[string]string `json:"metric"`
		Value  [2]any            `json:"value"`
	}
	if err := json.Unmarshal(data.Result, &raw); err != nil {
		return nil, err
	}
	out := make([]promSample, len(raw))
	for i, r := range raw {
		out[i] = promSample{Metric: r.Metric, Value: fmt.Sprint(r.Value[1])}
	}
	return out, nil
}

func promQuery(t *testing.T, api, q string) []promSample {
	t.Helper()
	s, err := promQueryErr(api, q)
	if err != nil {
		t.Fatalf("query %q: %v", q, err)
	}
	return s
}

// promNames lists the scraped task-server metric names.
func promNames(t *testing.T, api string) []string {
	t.Helper()
	var all []string
	if err := promGet(api, "/api/v1/label/__name__/values", url.Values{}, &all); err != nil {
		t.Fatalf("metric names: %v", err)
	}
	var out []string
	for _, n := range all {
		if strings.HasPrefix(n, "taskserver_") {
			out = append(out, n)
		}
	}
	return out
}

func promSeriesExist(t *testing.T, api, sel string) bool {
	t.Helper()
	var series []map[string]string
	if err := promGet(api, "/api/v1/series", url.Values{"match[]": {sel}}, &series); err != nil {
		t.Errorf("series %s: %v", sel, err)
		return true
	}
	return len(series) > 0
}

// promRulesHealthy reports whether every rule has been evaluated and none
// failed; it names those that are not healthy.
func promRulesHealthy(t *testing.T, api string) (bool, []string) {
	t.Helper()
	var data struct {
		Groups []struct {
			Rules []struct {
				Name      string `json:"name"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := promGet(api, "/api/v1/rules", url.Values{}, &data); err != nil {
		t.Fatalf("rules: %v", err)
	}
	var bad []string
	n := 0
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health != "ok" {
				bad = append(bad, fmt.Sprintf("%s: %s %s", r.Name, r.Health, r.LastError))
			}
		}
	}
	if n == 0 {
		return false, []string{"no rules loaded"}
	}
	return len(bad) == 0, bad
}
