package simulate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// minimal is the smallest scenario that validates: one project with a job.
const minimal = `
projects:
  - name: alpha
    share: 1
    job: {fpops_est: 1e13, delay_bound: 48h}
`

func TestParseScenarioFillsDefaults(t *testing.T) {
	t.Parallel()
	sc, err := ParseScenario([]byte(minimal))
	if err != nil {
		t.Fatalf("ParseScenario(minimal) = %v, want no error", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"name", sc.Name, "scenario"},
		{"seed", sc.Seed, uint64(1)},
		{"hosts", sc.Hosts, DefaultHosts},
		{"duration", sc.Duration, DefaultDuration},
		{"sample_every", sc.SampleEvery, DefaultSampleEvery},
		{"strategy", sc.Strategy, "edf"},
		{"runtime_stat", sc.RuntimeStat, "average"},
		{"connect_period", sc.ConnectPeriod, DefaultConnectPeriod},
		{"sched_period", sc.SchedPeriod, DefaultSchedPeriod},
		{"report_after", *sc.ReportAfter, DefaultReportAfter},
		{"report_margin", sc.ReportMargin, DefaultReportMargin},
		{"rpc_backoff", sc.RPCBackoff, DurationRange{Duration(time.Minute), Duration(4 * time.Hour)}},
		{"work_fetch_backoff", sc.WorkFetchBackoff, DurationRange{Duration(10 * time.Minute), Duration(24 * time.Hour)}},
		{"population.ncpus", len(sc.Population.NCPUs), 1},
		{"population.flops", sc.Population.Flops, Range{1e9, 1e10}},
		{"population.on_frac", sc.Population.OnFrac, Range{1, 1}},
		{"population.mean_on", sc.Population.MeanOn, DefaultMeanOn},
		{"projects[0].attach", sc.Projects[0].Attach, 1.0},
		{"projects[0].server.request_delay", sc.Projects[0].Server.RequestDelay, DefaultRequestDelay},
		{"projects[0].server.max_tasks", sc.Projects[0].Server.MaxTasks, DefaultMaxTasks},
		{"projects[0].job.fpops_est", sc.Projects[0].Job.FpopsEst, 1e13},
		{"projects[0].job.delay_bound", sc.Projects[0].Job.DelayBound, Duration(48 * time.Hour)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestParseScenarioReportAfterZeroMeansAtOnce(t *testing.T) {
	t.Parallel()
	sc, err := ParseScenario([]byte("report_after: 0s\n" + minimal))
	if err != nil {
		t.Fatalf("ParseScenario = %v", err)
	}
	if *sc.ReportAfter != 0 {
		t.Fatalf("report_after = %s, want 0s kept (reports at once)", *sc.ReportAfter)
	}
	if got := policyConfig(sc).ReportAfter; got >= 0 {
		t.Fatalf("policy ReportAfter = %g, want clientpolicy.ReportImmediately", got)
	}
}

func TestParseScenarioRejects(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, yaml, want string
	}{
		{"empty", "", "empty scenario"},
		{"unknown top-level key", "hostz: 3\n" + minimal, "field hostz not found"},
		{"unknown nested key", minimal + "    server: {max_task: 3}\n", "field max_task not found"},
		{"bare number duration", "duration: 3600\n" + minimal, "want a Go duration"},
		{"bad duration", "duration: 2days\n" + minimal, `duration "2days"`},
		{"two documents", minimal + "---\nhosts: 2\n", "more than one document"},
		{"no projects", "hosts: 3\n", "projects: want at least one project"},
		{"negative hosts", "hosts: -1\n" + minimal, "hosts: want 1 to"},
		{"too many hosts", "hosts: 2000000\n" + minimal, "hosts: want 1 to"},
		{"run longer than a year", "duration: 9000h\n" + minimal, "duration: want > 0 and at most"},
		{"sample longer than run", "duration: 1h\nsample_every: 2h\n" + minimal, "sample_every: want > 0 and at most duration"},
		{"unknown strategy", "strategy: lottery\n" + minimal, "strategy:"},
		{"unknown runtime stat", "runtime_stat: mode\n" + minimal, "runtime_stat:"},
		{"negative report_after", "report_after: -1h\n" + minimal, "report_after: want >= 0"},
		{"backoff max below min", "rpc_backoff: {min: 1h, max: 1m}\n" + minimal, "rpc_backoff: want 0 < min <= max"},
		{"zero cpus", "population: {ncpus: [{cpus: 0}]}\n" + minimal, "population.ncpus[0].cpus"},
		{"negative weight", "population: {ncpus: [{cpus: 2, weight: -1}]}\n" + minimal, "population.ncpus[0].weight"},
		{"flops max below min", "population: {flops: {min: 1e10, max: 1e9}}\n" + minimal, "population.flops"},
		{"on_frac above 1", "population: {on_frac: {min: 0.5, max: 1.5}}\n" + minimal, "population.on_frac"},
		{"start_within longer than run", "duration: 1h\npopulation: {start_within: 2h}\n" + minimal, "population.start_within"},
		{"project without name", "projects: [{share: 1, job: {fpops_est: 1, delay_bound: 1h}}]\n", "projects[0].name: want a name"},
		{"duplicate name", minimal + "  - name: alpha\n    share: 1\n    job: {fpops_est: 1e13, delay_bound: 48h}\n", `projects[1].name: "alpha" is used twice`},
		{"zero share", "projects: [{name: a, job: {fpops_est: 1, delay_bound: 1h}}]\n", "projects[0].share: want > 0"},
		{"attach above 1", "projects: [{name: a, share: 1, attach: 2, job: {fpops_est: 1, delay_bound: 1h}}]\n", "projects[0].attach"},
		{"no fpops", "projects: [{name: a, share: 1, job: {delay_bound: 1h}}]\n", "projects[0].job.fpops_est"},
		{"spread too wide", "projects: [{name: a, share: 1, job: {fpops_est: 1, runtime_spread: 3, delay_bound: 1h}}]\n", "projects[0].job.runtime_spread"},
		{"no delay bound", "projects: [{name: a, share: 1, job: {fpops_est: 1}}]\n", "projects[0].job.delay_bound"},
		{"negative max tasks", "projects: [{name: a, share: 1, job: {fpops_est: 1, delay_bound: 1h}, server: {max_tasks: -2}}]\n", "projects[0].server.max_tasks"},
		{"outage ends before it starts", "projects: [{name: a, share: 1, job: {fpops_est: 1, delay_bound: 1h}, server: {outages: [{start: 2h, end: 1h}]}}]\n", "projects[0].server.outages[0]"},
		{"no_work without end", "projects: [{name: a, share: 1, job: {fpops_est: 1, delay_bound: 1h}, server: {no_work: [{start: 2h}]}}]\n", "projects[0].server.no_work[0]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseScenario([]byte(c.yaml))
			if err == nil {
				t.Fatalf("ParseScenario(%q) = nil error, want one containing %q", c.yaml, c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ParseScenario(%q) = %q, want it to contain %q", c.yaml, err, c.want)
			}
		})
	}
}

func TestParseScenarioReportsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := ParseScenario([]byte("hosts: -1\nstrategy: lottery\nprojects: [{name: a}]\n"))
	if err == nil {
		t.Fatal("ParseScenario of a scenario with five problems = nil error")
	}
	for _, want := range []string{"hosts:", "strategy:", "projects[0].share", "projects[0].job.fpops_est", "projects[0].job.delay_bound"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// TestScenarioFilesLoad keeps the shipped scenarios valid.
func TestScenarioFilesLoad(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob("../../scenarios/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("glob scenarios = %v, %v; want the shipped scenario files", paths, err)
	}
	for _, path := range paths {
		sc, err := LoadScenario(path)
		if err != nil {
			t.Errorf("LoadScenario(%s) = %v", path, err)
			continue
		}
		base := strings.TrimSuffix(filepath.Base(path), ".yaml")
		if sc.Name != base {
			t.Errorf("%s: name %q, want the file's base name %q (so reports say which file ran)", path, sc.Name, base)
		}
	}
}

func TestLoadScenarioNamesAfterFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "my-run.yaml")
	if err := os.WriteFile(path, []byte(minimal), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := LoadScenario(path)
	if err != nil {
		t.Fatalf("LoadScenario = %v", err)
	}
	if sc.Name != "my-run" {
		t.Fatalf("name = %q, want %q", sc.Name, "my-run")
	}
	if _, err := LoadScenario(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("LoadScenario(missing file) = nil error")
	}
}

func TestScenarioRoundTripsThroughYAML(t *testing.T) {
	t.Parallel()
	sc, err := LoadScenario("../../scenarios/reference.yaml")
	if err != nil {
		t.Fatal(err)
	}
	body, err := yaml.Marshal(sc)
	if err != nil {
		t.Fatalf("yaml.Marshal = %v", err)
	}
	again, err := ParseScenario(body)
	if err != nil {
		t.Fatalf("ParseScenario(marshalled reference) = %v\n%s", err, body)
	}
	b1, _ := yaml.Marshal(again)
	if string(b1) != string(body) {
		t.Fatalf("round trip changed the scenario:\n%s\nvs\n%s", body, b1)
	}
}

func FuzzParseScenario(f *testing.F) {
	f.Add([]byte(minimal))
	if body, err := os.ReadFile("../../scenarios/reference.yaml"); err == nil {
		f.Add(body)
	}
	f.Add([]byte("hosts: 3\nduration: 1h\n" + minimal))
	f.Fuzz(func(t *testing.T, body []byte) {
		sc, err := ParseScenario(body)
		if err != nil {
			return
		}
		if err := sc.Validate(); err != nil {
			t.Fatalf("ParseScenario accepted a scenario that does not validate: %v", err)
		}
	})
}
