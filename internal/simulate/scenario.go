package simulate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/taskserver/taskserver/internal/clientpolicy"
)

// Scenario is one simulated run: who the volunteers are, which projects they
// are attached to, how those projects' servers behave, and the client policy
// settings. Zero fields take the defaults listed on each field; Normalized
// fills them in, Validate checks the result.
type Scenario struct {
	// Name labels the report; default the file's base name (LoadScenario) or "scenario".
	Name string `yaml:"name"`
	// Seed drives every random choice of the run; default 1 (0 means the default).
	Seed uint64 `yaml:"seed"`
	// Hosts is the number of volunteer hosts; default 100.
	Hosts int `yaml:"hosts"`
	// Duration is the simulated time covered; default 48h.
	Duration Duration `yaml:"duration"`
	// SampleEvery is the interval of the report's share-over-time series; default 1h.
	SampleEvery Duration `yaml:"sample_every"`
	// Strategy is the CPU scheduling policy (debt, edf, fair-share, wrr, iwrr); default edf.
	Strategy string `yaml:"strategy"`
	// RuntimeStat is how the seed-004 strategies summarise runtimes (average, median); default average.
	RuntimeStat string `yaml:"runtime_stat"`
	// ConnectPeriod is the connection period T of seed 000: hosts keep T to 2T of work; default 12h.
	ConnectPeriod Duration `yaml:"connect_period"`
	// SchedPeriod is the CPU scheduling period; default 1h.
	SchedPeriod Duration `yaml:"sched_period"`
	// ReportAfter is how long a finished task may wait before a report session of its own;
	// default 24h (the real client); 0s reports at once.
	ReportAfter *Duration `yaml:"report_after"`
	// ReportMargin makes a finished task due for reporting once its deadline is
	// this close; default 1h (clientpolicy's; the real client uses 24h).
	ReportMargin Duration `yaml:"report_margin"`
	// RPCBackoff bounds the random exponential back-off after failed RPCs; default 1m to 4h.
	RPCBackoff DurationRange `yaml:"rpc_backoff"`
	// WorkFetchBackoff bounds the back-off after work requests that got nothing; default 10m to 24h.
	WorkFetchBackoff DurationRange `yaml:"work_fetch_backoff"`
	// Population describes the hosts.
	Population Population `yaml:"population"`
	// Projects are the projects hosts attach to; at least one.
	Projects []Project `yaml:"projects"`
}

// Population is how the scenario's hosts are drawn, each independently from
// the run's seed.
type Population struct {
	// NCPUs are the CPU counts to choose from, with their relative weights; default one choice, 2 CPUs.
	NCPUs []CPUChoice `yaml:"ncpus"`
	// Flops is the range of one CPU's speed in floating-point operations per
	// second, drawn log-uniformly; default 1e9 to 1e10.
	Flops Range `yaml:"flops"`
	// OnFrac is the range of a host's long-run fraction of time switched on,
	// drawn uniformly; default 1 to 1 (always on).
	OnFrac Range `yaml:"on_frac"`
	// MeanOn is the mean of the exponentially distributed on-periods; off-periods have
	// the mean that makes the host's on fraction come out right. Default 8h.
	MeanOn Duration `yaml:"mean_on"`
	// StartWithin spreads the hosts' first start uniformly over this much time from
	// the beginning of the run, as volunteers do not all switch on at one instant; default 0.
	StartWithin Duration `yaml:"start_within"`
	// ActivityWindow is the time constant over which each host measures
	// the fraction of time it is on, the active fraction of its work fetch
	// (clientpolicy.Activity). A host starts with what it measured over a
	// history of two windows of its own on/off process before the run, as
	// an established volunteer would; default DefaultActivityWindow, the
	// real client's ten days.
	ActivityWindow Duration `yaml:"activity_window"`
	// GPUFrac is the share of hosts with GPUs; default 0. Each has GPUs
	// of one kind, a resource of its own with its own work fetch and
	// scheduler (clientpolicy.Host), as the real client's per-resource
	// work fetch.
	GPUFrac float64 `yaml:"gpu_frac"`
	// GPUs is a GPU host's GPU count; default 1.
	GPUs int `yaml:"gpus"`
	// GPUFlops is the speed of one GPU on the projects' GPU jobs, drawn
	// log-uniformly; default 1e11 to 1e12.
	GPUFlops Range `yaml:"gpu_flops"`
}

// CPUChoice is one CPU count of the population and how often it occurs.
type CPUChoice struct {
	CPUs int `yaml:"cpus"`
	// Weight is the choice's relative frequency; default 1.
	Weight float64 `yaml:"weight"`
}

// Range is a closed interval of numbers.
type Range struct {
	Min float64 `yaml:"min"`
	Max float64 `yaml:"max"`
}

// DurationRange is a closed interval of durations.
type DurationRange struct {
	Min Duration `yaml:"min"`
	Max Duration `yaml:"max"`
}

// Project is one project: its resource share on the hosts attached to it,
// the jobs it hands out and how its server behaves.
type Project struct {
	// Name identifies the project in the report; unique.
	Name string `yaml:"name"`
	// Share is the resource share the volunteers gave the project (any positive number).
	Share float64 `yaml:"share"`
	// Attach is the fraction of hosts attached to the project; default 1. A host
	// that draws no project at all is attached to one chosen uniformly.
	Attach float64 `yaml:"attach"`
	// Job describes the project's tasks.
	Job Job `yaml:"job"`
	// GPUJob, when set, is the project's jobs for GPUs, sent for a GPU
	// host's GPU requests; a project without one answers them with
	// <no_rsc_apps>, so its hosts stop asking.
	GPUJob *Job `yaml:"gpu_job"`
	// Server describes the project's scheduler.
	Server Server `yaml:"server"`
}

// Job is the shape of a project's tasks.
type Job struct {
	// FpopsEst is the estimated floating-point operations of one task
	// (rsc_fpops_est); a host's estimate of its CPU time is FpopsEst / its per-CPU flops.
	FpopsEst float64 `yaml:"fpops_est"`
	// RuntimeSpread is the standard deviation of the log of true/estimated
	// runtime (a lognormal factor with mean 1, clamped to [0.1, 10]); default 0: estimates are exact.
	RuntimeSpread float64 `yaml:"runtime_spread"`
	// DelayBound is the time from sending a task to its report deadline.
	DelayBound Duration `yaml:"delay_bound"`
	// NCPUs is the CPUs one task of a multi-threaded app uses (its
	// avg_ncpus; it runs that many times as fast); default 1. Not for
	// gpu_job.
	NCPUs float64 `yaml:"ncpus"`
}

// Server is the behaviour of a project's scheduler.
type Server struct {
	// RequestDelay is the <request_delay> of every reply: no RPC to this project
	// sooner than this after one; default 1m.
	RequestDelay Duration `yaml:"request_delay"`
	// MaxTasks is the most tasks one reply carries; default 50.
	MaxTasks int `yaml:"max_tasks"`
	// MaxInProgressPerCPU and MaxInProgressPerGPU are the scheduler's
	// --max-in-progress-per-cpu (0: its default, 4) and
	// --max-in-progress-per-gpu (0: no limit).
	MaxInProgressPerCPU int `yaml:"max_in_progress_per_cpu"`
	MaxInProgressPerGPU int `yaml:"max_in_progress_per_gpu"`
	// Outages are the windows during which every RPC to the project fails.
	Outages []Window `yaml:"outages"`
	// NoWork are the windows during which work requests get nothing (reports are still accepted).
	NoWork []Window `yaml:"no_work"`
	// Overloaded are the windows during which work requests get nothing
	// because the server is busy: the reply says <overloaded/>, so hosts
	// ask again after request_delay, without the no-work back-off, and
	// the project's debt keeps accumulating.
	Overloaded []Window `yaml:"overloaded"`
}

// Window is a span of simulated time since the start of the run: [Start, End).
type Window struct {
	Start Duration `yaml:"start"`
	End   Duration `yaml:"end"`
}

// contains reports whether t (seconds since the start) is in the window.
func (w Window) contains(t float64) bool {
	return t >= w.Start.Seconds() && t < w.End.Seconds()
}

// Duration is a time.Duration written in YAML as a Go duration string ("36h", "90m").
type Duration time.Duration

// Seconds is the duration in (simulated) seconds, the unit of clientpolicy and simreport.
func (d Duration) Seconds() float64 { return time.Duration(d).Seconds() }

// String is the Go duration syntax.
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML reads a Go duration string; a bare number is refused because
// its unit would be a guess.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a duration like 36h or 90m", n.Line)
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: duration %q: want a Go duration like 36h or 90m", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the Go duration string, so a scenario round-trips.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// Defaults of a scenario's fields (see the field comments).
const (
	DefaultHosts          = 100
	DefaultDuration       = Duration(48 * time.Hour)
	DefaultSampleEvery    = Duration(time.Hour)
	DefaultConnectPeriod  = Duration(12 * time.Hour)
	DefaultSchedPeriod    = Duration(time.Hour)
	DefaultReportAfter    = Duration(24 * time.Hour)
	DefaultReportMargin   = Duration(time.Hour)
	DefaultMeanOn         = Duration(8 * time.Hour)
	DefaultActivityWindow = Duration(240 * time.Hour)
	DefaultRequestDelay   = Duration(time.Minute)
	DefaultMaxTasks       = 50
)

// maxHosts and maxDuration bound a scenario so a typo cannot exhaust
// memory (the servers count RPCs per minute of the run).
const (
	maxHosts    = 1_000_000
	maxDuration = Duration(366 * 24 * time.Hour)
)

// LoadScenario reads, fills in and validates a scenario file.
func LoadScenario(path string) (Scenario, error) {
	body, err := os.ReadFile(path)
	if err != nil {
		return Scenario{}, fmt.Errorf("read scenario: %w", err)
	}
	sc, err := ParseScenario(body)
	if err != nil {
		return Scenario{}, fmt.Errorf("scenario %s: %w", path, err)
	}
	if sc.Name == "scenario" {
		sc.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	return sc, nil
}

// ParseScenario decodes a scenario from YAML, refusing unknown keys, then fills
// in the defaults and validates it.
func ParseScenario(body []byte) (Scenario, error) {
	dec := yaml.NewDecoder(bytes.NewReader(body))
	dec.KnownFields(true)
	var sc Scenario
	if err := dec.Decode(&sc); err != nil {
		if errors.Is(err, io.EOF) {
			return Scenario{}, errors.New("empty scenario")
		}
		return Scenario{}, fmt.Errorf("parse YAML: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Scenario{}, errors.New("parse YAML: more than one document")
	}
	sc = sc.Normalized()
	if err := sc.Validate(); err != nil {
		return Scenario{}, err
	}
	return sc, nil
}

// Normalized returns the scenario with every zero field set to its default.
func (sc Scenario) Normalized() Scenario {
	if sc.Name == "" {
		sc.Name = "scenario"
	}
	if sc.Seed == 0 {
		sc.Seed = 1
	}
	if sc.Hosts == 0 {
		sc.Hosts = DefaultHosts
	}
	setDuration(&sc.Duration, DefaultDuration)
	setDuration(&sc.SampleEvery, DefaultSampleEvery)
	if sc.Strategy == "" {
		sc.Strategy = string(clientpolicy.StrategyEDF)
	}
	if sc.RuntimeStat == "" {
		sc.RuntimeStat = string(clientpolicy.StatAverage)
	}
	setDuration(&sc.ConnectPeriod, DefaultConnectPeriod)
	setDuration(&sc.SchedPeriod, DefaultSchedPeriod)
	if sc.ReportAfter == nil {
		d := DefaultReportAfter
		sc.ReportAfter = &d
	}
	setDuration(&sc.ReportMargin, DefaultReportMargin)
	setDuration(&sc.RPCBackoff.Min, Duration(time.Minute))
	setDuration(&sc.RPCBackoff.Max, Duration(4*time.Hour))
	setDuration(&sc.WorkFetchBackoff.Min, Duration(10*time.Minute))
	setDuration(&sc.WorkFetchBackoff.Max, Duration(24*time.Hour))

	pop := &sc.Population
	choices := make([]CPUChoice, 0, len(pop.NCPUs))
	for _, c := range pop.NCPUs {
		if c.Weight == 0 {
			c.Weight = 1
		}
		choices = append(choices, c)
	}
	if len(choices) == 0 {
		choices = []CPUChoice{{CPUs: 2, Weight: 1}}
	}
	pop.NCPUs = choices
	if pop.Flops == (Range{}) {
		pop.Flops = Range{Min: 1e9, Max: 1e10}
	}
	if pop.OnFrac == (Range{}) {
		pop.OnFrac = Range{Min: 1, Max: 1}
	}
	setDuration(&pop.MeanOn, DefaultMeanOn)
	setDuration(&pop.ActivityWindow, DefaultActivityWindow)
	if pop.GPUs == 0 {
		pop.GPUs = 1
	}
	if pop.GPUFlops == (Range{}) {
		pop.GPUFlops = Range{Min: 1e11, Max: 1e12}
	}

	projects := make([]Project, len(sc.Projects))
	for i, p := range sc.Projects {
		if p.Attach == 0 {
			p.Attach = 1
		}
		setDuration(&p.Server.RequestDelay, DefaultRequestDelay)
		if p.Job.NCPUs == 0 {
			p.Job.NCPUs = 1
		}
		if p.GPUJob != nil {
			j := *p.GPUJob
			j.NCPUs = 1
			p.GPUJob = &j
		}
		if p.Server.MaxTasks == 0 {
			p.Server.MaxTasks = DefaultMaxTasks
		}
		projects[i] = p
	}
	sc.Projects = projects
	return sc
}

func setDuration(d *Duration, def Duration) {
	if *d == 0 {
		*d = def
	}
}

// Validate checks a normalized scenario and reports every problem it finds,
// each naming the field the way the YAML file spells it.
func (sc Scenario) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{field}, args...)...))
	}
	if sc.Hosts < 1 || sc.Hosts > maxHosts {
		bad("hosts", "want 1 to %d, got %d", maxHosts, sc.Hosts)
	}
	if sc.Duration <= 0 || sc.Duration > maxDuration {
		bad("duration", "want > 0 and at most %s, got %s", maxDuration, sc.Duration)
	}
	if sc.SampleEvery <= 0 || sc.SampleEvery > sc.Duration {
		bad("sample_every", "want > 0 and at most duration (%s), got %s", sc.Duration, sc.SampleEvery)
	} else if sc.Duration.Seconds()/sc.SampleEvery.Seconds() > 100_000 {
		bad("sample_every", "%s makes more than 100000 samples over %s", sc.SampleEvery, sc.Duration)
	}
	if _, err := clientpolicy.ParseStrategy(sc.Strategy); err != nil {
		bad("strategy", "%v", err)
	}
	if _, err := clientpolicy.ParseRuntimeStat(sc.RuntimeStat); err != nil {
		bad("runtime_stat", "%v", err)
	}
	if sc.ConnectPeriod <= 0 {
		bad("connect_period", "want > 0, got %s", sc.ConnectPeriod)
	}
	if sc.SchedPeriod <= 0 {
		bad("sched_period", "want > 0, got %s", sc.SchedPeriod)
	}
	if sc.ReportAfter != nil && *sc.ReportAfter < 0 {
		bad("report_after", "want >= 0, got %s", *sc.ReportAfter)
	}
	if sc.ReportMargin < 0 {
		bad("report_margin", "want >= 0, got %s", sc.ReportMargin)
	}
	checkDurationRange(bad, "rpc_backoff", sc.RPCBackoff)
	checkDurationRange(bad, "work_fetch_backoff", sc.WorkFetchBackoff)

	pop := sc.Population
	for i, c := range pop.NCPUs {
		if c.CPUs < 1 || c.CPUs > 1024 {
			bad(fmt.Sprintf("population.ncpus[%d].cpus", i), "want 1 to 1024, got %d", c.CPUs)
		}
		if !(c.Weight > 0) {
			bad(fmt.Sprintf("population.ncpus[%d].weight", i), "want > 0, got %g", c.Weight)
		}
	}
	if !(pop.Flops.Min > 0) || !(pop.Flops.Max >= pop.Flops.Min) {
		bad("population.flops", "want 0 < min <= max, got min %g max %g", pop.Flops.Min, pop.Flops.Max)
	}
	if !(pop.OnFrac.Min > 0) || !(pop.OnFrac.Max >= pop.OnFrac.Min) || pop.OnFrac.Max > 1 {
		bad("population.on_frac", "want 0 < min <= max <= 1, got min %g max %g", pop.OnFrac.Min, pop.OnFrac.Max)
	}
	if pop.MeanOn <= 0 {
		bad("population.mean_on", "want > 0, got %s", pop.MeanOn)
	}
	if !(pop.GPUFrac >= 0 && pop.GPUFrac <= 1) {
		bad("population.gpu_frac", "want 0 to 1, got %g", pop.GPUFrac)
	}
	if pop.GPUs < 1 || pop.GPUs > 64 {
		bad("population.gpus", "want 1 to 64, got %d", pop.GPUs)
	}
	if !(pop.GPUFlops.Min > 0) || !(pop.GPUFlops.Max >= pop.GPUFlops.Min) {
		bad("population.gpu_flops", "want 0 < min <= max, got min %g max %g", pop.GPUFlops.Min, pop.GPUFlops.Max)
	}
	if pop.StartWithin < 0 || pop.StartWithin > sc.Duration {
		bad("population.start_within", "want 0 to duration (%s), got %s", sc.Duration, pop.StartWithin)
	}

	if len(sc.Projects) == 0 {
		bad("projects", "want at least one project")
	}
	names := map[string]bool{}
	for i, p := range sc.Projects {
		field := fmt.Sprintf("projects[%d]", i)
		switch {
		case p.Name == "":
			bad(field+".name", "want a name")
		case names[p.Name]:
			bad(field+".name", "%q is used twice", p.Name)
		}
		names[p.Name] = true
		if !(p.Share > 0) {
			bad(field+".share", "want > 0, got %g", p.Share)
		}
		if !(p.Attach > 0) || p.Attach > 1 {
			bad(field+".attach", "want a fraction in (0, 1], got %g", p.Attach)
		}
		if !(p.Job.FpopsEst > 0) {
			bad(field+".job.fpops_est", "want > 0, got %g", p.Job.FpopsEst)
		}
		if !(p.Job.RuntimeSpread >= 0) || p.Job.RuntimeSpread > 2 {
			bad(field+".job.runtime_spread", "want 0 to 2, got %g", p.Job.RuntimeSpread)
		}
		if p.Job.DelayBound <= 0 {
			bad(field+".job.delay_bound", "want > 0, got %s", p.Job.DelayBound)
		}
		if !(p.Job.NCPUs >= 1) || p.Job.NCPUs > 1024 {
			bad(field+".job.ncpus", "want 1 to 1024, got %g", p.Job.NCPUs)
		}
		if g := p.GPUJob; g != nil {
			if !(g.FpopsEst > 0) {
				bad(field+".gpu_job.fpops_est", "want > 0, got %g", g.FpopsEst)
			}
			if !(g.RuntimeSpread >= 0) || g.RuntimeSpread > 2 {
				bad(field+".gpu_job.runtime_spread", "want 0 to 2, got %g", g.RuntimeSpread)
			}
			if g.DelayBound <= 0 {
				bad(field+".gpu_job.delay_bound", "want > 0, got %s", g.DelayBound)
			}
		}
		if p.Server.RequestDelay < 0 {
			bad(field+".server.request_delay", "want >= 0, got %s", p.Server.RequestDelay)
		}
		if p.Server.MaxInProgressPerCPU < 0 || p.Server.MaxInProgressPerGPU < 0 {
			bad(field+".server.max_in_progress_per_cpu", "want >= 0 (and max_in_progress_per_gpu)")
		}
		if p.Server.MaxTasks < 1 {
			bad(field+".server.max_tasks", "want >= 1, got %d", p.Server.MaxTasks)
		}
		checkWindows(bad, field+".server.outages", p.Server.Outages)
		checkWindows(bad, field+".server.no_work", p.Server.NoWork)
		checkWindows(bad, field+".server.overloaded", p.Server.Overloaded)
	}
	return errors.Join(errs...)
}

func checkDurationRange(bad func(string, string, ...any), field string, r DurationRange) {
	if r.Min <= 0 || r.Max < r.Min {
		bad(field, "want 0 < min <= max, got min %s max %s", r.Min, r.Max)
	}
}

func checkWindows(bad func(string, string, ...any), field string, ws []Window) {
	for i, w := range ws {
		if w.Start < 0 || w.End <= w.Start {
			bad(fmt.Sprintf("%s[%d]", field, i), "want 0 <= start < end, got start %s end %s", w.Start, w.End)
		}
	}
}
