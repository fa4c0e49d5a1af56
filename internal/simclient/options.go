package simclient

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/taskserver/taskserver/internal/clientpolicy"
	"github.com/taskserver/taskserver/internal/protocol"
)

// Project is one project every simulated host is attached to.
type Project struct {
	// Name labels the project in the run report; default the scheduler
	// URL's host (with a suffix when two projects share a host).
	Name string
	// SchedulerURL is the project's scheduler (POST target of RPCs).
	SchedulerURL string
	// SchedulerURLs are more schedulers of the project: a host tries
	// SchedulerURL and these in turn, from a random one, until one
	// answers, as the real client does with the <scheduler> links of a
	// master page.
	SchedulerURLs []string
	// MasterURL, when set, is the project's master page: a host reads its
	// scheduler URLs there (<scheduler>URL</scheduler> or <link
	// rel="boinc_scheduler" href="URL">) before its first RPC, again
	// after every masterFetchPeriod (10) consecutive failed RPCs, and
	// every Options.MasterReread. SchedulerURL may then be empty.
	MasterURL string
	// Share is the project's resource share on every host, any positive
	// number; default 100.
	Share float64
	// Authenticators are the account keys on this project; host i belongs
	// to Authenticators[i % len].
	Authenticators []string
}

// Options configures a simulation run. The zero value of every field except
// the projects (Projects, or SchedulerURL and Authenticators) means its
// documented default.
type Options struct {
	// SchedulerURL is the project's scheduler (POST target of RPCs) when
	// Projects is empty.
	SchedulerURL string
	// Authenticators are the account keys when Projects is empty; host i
	// belongs to Authenticators[i % len], so several hosts share a user.
	Authenticators []string
	// Projects attaches every host to several projects, each with its
	// resource share. When empty, SchedulerURL and Authenticators are the
	// one project, with share 100.
	Projects []Project
	// Strategy is the hosts' CPU-scheduling policy; default
	// clientpolicy.StrategyEDF.
	Strategy clientpolicy.Strategy
	// RuntimeStat is how the seed-004 strategies summarise past runtimes;
	// default clientpolicy.StatAverage.
	RuntimeStat clientpolicy.RuntimeStat
	// ConnectPeriod is T of seed 000: a host keeps between T and 2T of
	// work per CPU. Default BufferPerCPU × the host's task compute time,
	// so a host holds BufferPerCPU to 2 × BufferPerCPU tasks per CPU.
	ConnectPeriod time.Duration
	// SchedPeriod is the scheduling period, when the preemptive strategies
	// (debt, edf) reconsider every CPU. Default one task compute time of
	// the host: the real client's ratio (a 1 h period, tasks of hours),
	// so a debt of one task outweighs a period's expected pay-off.
	SchedPeriod time.Duration
	// ReportAfter is how long a finished task may wait for a report-result
	// session; 0 reports it at once (clientpolicy.ReportImmediately), which
	// keeps the server's view of the hosts current, as tests want.
	ReportAfter time.Duration
	// OnFrac is the fraction of the time each host is on (computing and
	// contacting projects); it alternates between on and off periods of
	// random (exponential) length. Default 1: always on.
	OnFrac float64
	// OnPeriod is the mean length of an on period when OnFrac < 1; the
	// mean off period is OnPeriod × (1 - OnFrac) / OnFrac. Default 20 ×
	// ComputeTime.
	OnPeriod time.Duration
	// ReportDir, when set, receives the run report at the end
	// (simreport: report.json, report.txt, shares.svg, clock "real").
	ReportDir string
	// SampleEvery is the interval of the run report's share-over-time
	// series; default Duration / 100 (at least 100ms), or 10s when the run
	// has no Duration.
	SampleEvery time.Duration
	// Hosts is the number of simulated hosts; default 20.
	Hosts int
	// NCPUs is each host's CPU count (tasks run at once); default 2.
	NCPUs int
	// MTFrac is the share of hosts that are multi-core, with MTCPUs CPUs
	// instead of NCPUs (and AVX2 in p_features). In [0, 1]; default 0.
	MTFrac float64
	// MTCPUs is a multi-core host's CPU count; default 8.
	MTCPUs int
	// GPUFrac is the share of hosts with GPUs: one or two of one model,
	// NVIDIA or AMD (see gpuModels), described in <coprocs> as the 7.x
	// client does. In [0, 1]; default 0.
	GPUFrac float64
	// GPUTypes limits the GPU hosts to these resources
	// (protocol.ResourceNVIDIA "NVIDIA", protocol.ResourceAMD "ATI");
	// empty means both.
	GPUTypes []string
	// GPUEfficiency is the fraction of a GPU's peak FLOPS a task gets; a
	// GPU task of the app takes ComputeTime × Flops / (peak × this).
	// Default 0.005, which makes the simulated GPUs 2 to 15 times as fast
	// as a CPU of the default Flops: real apps reach more of the peak, but
	// tasks must stay long enough to measure in wall time.
	GPUEfficiency float64
	// ActivityWindow is the time constant over which a host measures the
	// fraction of time it is on (clientpolicy.Activity), which it uses
	// for its work fetch and reports in <time_stats> (on_frac). A host
	// with OnFrac < 1 starts with what it measured over two windows of its
	// own on/off process before the run, as an established volunteer.
	// Default 5 × (mean on period + mean off period), a few of its on/off
	// cycles; the real client's is ten days.
	ActivityWindow time.Duration
	// MasterReread is how often a host reads a project's master page
	// again (projects with a MasterURL); default 1 day × BackoffScale.
	MasterReread time.Duration
	// Flops is the nominal per-CPU speed reported as p_fpops; each host's
	// speed is Flops × a seeded random factor in [0.5, 1.5). Default 1e10.
	Flops float64
	// FailFrac, VanishFrac, CheatFrac and LateFrac are the shares of hosts
	// that fail every task, that vanish after taking work, that return wrong
	// output, and that return correct output after the deadline. Each in
	// [0, 1], sum at most 1.
	FailFrac, VanishFrac, CheatFrac, LateFrac float64
	// TrickleFrac is the share of tasks whose app sends a trickle-up
	// message (variety "progress", its CPU time in <cpu_time>) when it
	// finishes computing, as long-running BOINC apps report progress; the
	// host sends it with its next scheduler request until a reply has
	// <message_ack/>. In [0, 1]; default 0.
	TrickleFrac float64
	// LateBy is how long after a task's report deadline a late host uploads
	// and reports it: the deadline plus LateBy × a random factor in [1, 2).
	// Default 5s.
	LateBy time.Duration
	// AckLog, when set, receives one line per result the server
	// acknowledged: "<result name> <host kind> <success|error>
	// <on_time|late>\n", where success means the host reported correct or
	// cheated output and late that it first reported the result after its
	// report deadline. Tests join it with the database. Writes are
	// serialised; Run does not close it.
	AckLog io.Writer
	// ComputeTime is the CPU time a task takes on a host of speed Flops
	// (wall time while it holds a CPU); a host's time scales with Flops /
	// its speed, and each task varies ±10%. Default 1s.
	ComputeTime time.Duration
	// BufferPerCPU sets the default ConnectPeriod: BufferPerCPU tasks' time,
	// so a host holds BufferPerCPU to 2 × BufferPerCPU tasks per CPU;
	// default 2.
	BufferPerCPU int
	// Duration stops the run after this long; 0 runs until ctx ends.
	Duration time.Duration
	// MaxRPCs stops the run once this many scheduler RPCs have been
	// started in total; 0 means no bound.
	MaxRPCs int64
	// Seed makes host speeds, kinds and jitter reproducible.
	Seed uint64
	// BackoffScale multiplies every client-side delay: the RPC back-off
	// (1 min to 4 h in the real client), the work-fetch back-off (10 min to
	// 1 day), the transfer back-off (2 min to 6 h) and the pause after an
	// unrecoverable task error (1 to 2 min). Default 1 (the real client).
	BackoffScale float64
	// BackoffMax, when positive, caps every scaled back-off.
	BackoffMax time.Duration
	// TransferAttempts bounds the tries of one download or upload before it
	// counts as a permanent failure; default 10.
	TransferAttempts int
	// HTTPTimeout bounds one HTTP exchange; default 60s.
	HTTPTimeout time.Duration
	// SummaryEvery is the period of the info-level summary line; default
	// 10s; negative turns it off.
	SummaryEvery time.Duration
	// HTTPClient, when set, is used for every request (tests, custom
	// transports); by default Run builds its own and closes its idle
	// connections when it returns.
	HTTPClient *http.Client
	// Log receives the run's log lines; default discards them.
	Log *slog.Logger
}

// Option defaults.
const (
	DefaultSchedulerURL = "http://127.0.0.1:8080/scheduler"
	DefaultHosts        = 20
	DefaultNCPUs        = 2
	DefaultFlops        = 1e10
	DefaultComputeTime  = time.Second
	DefaultLateBy       = 5 * time.Second
	DefaultMTCPUs       = 8
	// DefaultGPUEfficiency: see Options.GPUEfficiency.
	DefaultGPUEfficiency = 0.005
)

func (o Options) withDefaults() Options {
	if o.Hosts == 0 {
		o.Hosts = DefaultHosts
	}
	if o.NCPUs == 0 {
		o.NCPUs = DefaultNCPUs
	}
	if o.MTCPUs == 0 {
		o.MTCPUs = DefaultMTCPUs
	}
	if o.GPUEfficiency == 0 {
		o.GPUEfficiency = DefaultGPUEfficiency
	}
	if o.Flops == 0 {
		o.Flops = DefaultFlops
	}
	if o.ComputeTime == 0 {
		o.ComputeTime = DefaultComputeTime
	}
	if o.LateBy == 0 {
		o.LateBy = DefaultLateBy
	}
	if o.BufferPerCPU == 0 {
		o.BufferPerCPU = 2
	}
	if o.BackoffScale == 0 {
		o.BackoffScale = 1
	}
	if o.TransferAttempts == 0 {
		o.TransferAttempts = 10
	}
	if o.HTTPTimeout == 0 {
		o.HTTPTimeout = 60 * time.Second
	}
	if o.SummaryEvery == 0 {
		o.SummaryEvery = 10 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Strategy == "" {
		o.Strategy = clientpolicy.StrategyEDF
	}
	if o.RuntimeStat == "" {
		o.RuntimeStat = clientpolicy.StatAverage
	}
	if o.OnFrac == 0 {
		o.OnFrac = 1
	}
	if o.OnPeriod == 0 {
		o.OnPeriod = 20 * o.ComputeTime
	}
	if o.ActivityWindow == 0 && o.OnFrac > 0 {
		o.ActivityWindow = time.Duration(5 * float64(o.OnPeriod) / o.OnFrac)
	}
	if o.MasterReread == 0 {
		o.MasterReread = o.scaled(masterRereadDefault)
	}
	if o.SampleEvery == 0 {
		o.SampleEvery = 10 * time.Second
		if o.Duration > 0 {
			o.SampleEvery = max(o.Duration/100, 100*time.Millisecond)
		}
	}
	return o
}

// DefaultShare is the resource share of a project given without one, and
// of the single project of SchedulerURL and Authenticators.
const DefaultShare = 100

// projects returns the run's projects with defaults: Projects, or the one
// project of SchedulerURL and Authenticators; every one named and with a
// share.
func (o Options) projects() []Project {
	ps := o.Projects
	if len(ps) == 0 {
		ps = []Project{{SchedulerURL: o.SchedulerURL, Authenticators: o.Authenticators}}
	}
	out := make([]Project, len(ps))
	used := map[string]int{}
	for i, p := range ps {
		if p.Share == 0 {
			p.Share = DefaultShare
		}
		if p.Name == "" {
			p.Name = p.SchedulerURL
			if p.Name == "" {
				p.Name = p.MasterURL
			}
			if u, err := url.Parse(p.Name); err == nil && u.Host != "" {
				p.Name = u.Host
			}
		}
		if used[p.Name]++; used[p.Name] > 1 {
			p.Name = fmt.Sprintf("%s-%d", p.Name, used[p.Name])
		}
		out[i] = p
	}
	return out
}

func (o Options) validate() error {
	var errs []error
	for i, p := range o.projects() {
		what := "project " + p.Name
		if len(o.Projects) == 0 {
			what = "the project"
		}
		if p.SchedulerURL == "" && p.MasterURL == "" {
			errs = append(errs, fmt.Errorf("%s (#%d): scheduler URL is empty", what, i+1))
		}
		if len(p.Authenticators) == 0 {
			errs = append(errs, fmt.Errorf("%s (#%d): no authenticators", what, i+1))
		}
		if !(p.Share > 0) || math.IsInf(p.Share, 0) {
			errs = append(errs, fmt.Errorf("%s (#%d): share %g: want a positive number", what, i+1, p.Share))
		}
	}
	if _, err := clientpolicy.ParseStrategy(string(o.Strategy)); err != nil {
		errs = append(errs, err)
	}
	if _, err := clientpolicy.ParseRuntimeStat(string(o.RuntimeStat)); err != nil {
		errs = append(errs, err)
	}
	if !(o.OnFrac > 0 && o.OnFrac <= 1) {
		errs = append(errs, fmt.Errorf("on-frac %g: want more than 0, at most 1", o.OnFrac))
	}
	if o.ConnectPeriod < 0 || o.SchedPeriod < 0 || o.ReportAfter < 0 || o.OnPeriod < 0 {
		errs = append(errs, errors.New("connect period, scheduling period, report-after and on period must not be negative"))
	}
	if o.SampleEvery < time.Millisecond {
		errs = append(errs, fmt.Errorf("sample interval %s: want at least 1ms", o.SampleEvery))
	}
	if o.Hosts < 1 {
		errs = append(errs, fmt.Errorf("hosts %d: want at least 1", o.Hosts))
	}
	if o.NCPUs < 1 {
		errs = append(errs, fmt.Errorf("ncpus %d: want at least 1", o.NCPUs))
	}
	if o.MTCPUs < 1 {
		errs = append(errs, fmt.Errorf("mt-cpus %d: want at least 1", o.MTCPUs))
	}
	if !(o.GPUEfficiency > 0 && o.GPUEfficiency <= 1) {
		errs = append(errs, fmt.Errorf("gpu-efficiency %g: want more than 0, at most 1", o.GPUEfficiency))
	}
	for _, gt := range o.GPUTypes {
		if !slices.ContainsFunc(gpuModels, func(m gpuModel) bool { return m.Type == gt }) {
			errs = append(errs, fmt.Errorf("gpu-types %q: want %s or %s", gt, protocol.ResourceNVIDIA, protocol.ResourceAMD))
		}
	}
	if o.ActivityWindow < 0 || o.MasterReread < 0 {
		errs = append(errs, errors.New("activity window and master re-read period must not be negative"))
	}
	if !(o.Flops > 0) || math.IsInf(o.Flops, 0) {
		errs = append(errs, fmt.Errorf("flops %g: want a positive number", o.Flops))
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"fail-frac", o.FailFrac}, {"vanish-frac", o.VanishFrac}, {"cheat-frac", o.CheatFrac}, {"late-frac", o.LateFrac}, {"trickle-frac", o.TrickleFrac},
		{"gpu-frac", o.GPUFrac}, {"mt-frac", o.MTFrac}} {
		if !(f.v >= 0 && f.v <= 1) {
			errs = append(errs, fmt.Errorf("%s %g: want 0..1", f.name, f.v))
		}
	}
	if s := o.FailFrac + o.VanishFrac + o.CheatFrac + o.LateFrac; s > 1+1e-9 {
		errs = append(errs, fmt.Errorf("fail-frac + vanish-frac + cheat-frac + late-frac = %g: want at most 1", s))
	}
	if o.LateBy < 0 {
		errs = append(errs, fmt.Errorf("late-by %s: want >= 0", o.LateBy))
	}
	if o.ComputeTime < 0 {
		errs = append(errs, fmt.Errorf("compute time %s: want >= 0", o.ComputeTime))
	}
	if o.BufferPerCPU < 1 {
		errs = append(errs, fmt.Errorf("buffer per cpu %d: want at least 1", o.BufferPerCPU))
	}
	if o.Duration < 0 || o.MaxRPCs < 0 || o.BackoffMax < 0 || o.HTTPTimeout < 0 {
		errs = append(errs, errors.New("duration, max RPCs, back-off max and HTTP timeout must not be negative"))
	}
	if !(o.BackoffScale > 0) {
		errs = append(errs, fmt.Errorf("back-off scale %g: want > 0", o.BackoffScale))
	}
	if o.TransferAttempts < 1 {
		errs = append(errs, fmt.Errorf("transfer attempts %d: want at least 1", o.TransferAttempts))
	}
	return errors.Join(errs...)
}

// ReadAuthenticators reads account keys, one per line; blank lines and
// lines starting with # are skipped.
func ReadAuthenticators(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read authenticators: %w", err)
	}
	return out, nil
}

// ReadAuthenticatorsFile is ReadAuthenticators on the file at path.
func ReadAuthenticatorsFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open authenticators file: %w", err)
	}
	defer f.Close()
	keys, err := ReadAuthenticators(f)
	if err != nil {
		return nil, fmt.Errorf("authenticators file %s: %w", path, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("authenticators file %s: no account keys", path)
	}
	return keys, nil
}

// ParseProject reads a --project value, "URL,SHARE,AUTHFILE": the
// scheduler URL, the resource share (a positive number) and a file of
// account keys (ReadAuthenticatorsFile). The last two commas split it, so
// the URL may hold commas of its own. URL may list several schedulers
// separated by spaces (tried in turn), or be "master:" and the project's
// master page (Project.MasterURL).
func ParseProject(spec string) (Project, error) {
	j := strings.LastIndexByte(spec, ',')
	i := -1
	if j > 0 {
		i = strings.LastIndexByte(spec[:j], ',')
	}
	if i <= 0 {
		return Project{}, fmt.Errorf("project %q: want URL,SHARE,AUTHFILE", spec)
	}
	url, shareText, authFile := strings.TrimSpace(spec[:i]), strings.TrimSpace(spec[i+1:j]), strings.TrimSpace(spec[j+1:])
	share, err := strconv.ParseFloat(shareText, 64)
	if err != nil || !(share > 0) || math.IsInf(share, 0) {
		return Project{}, fmt.Errorf("project %q: share %q: want a positive number", spec, shareText)
	}
	if url == "" || authFile == "" {
		return Project{}, fmt.Errorf("project %q: want URL,SHARE,AUTHFILE", spec)
	}
	keys, err := ReadAuthenticatorsFile(authFile)
	if err != nil {
		return Project{}, fmt.Errorf("project %q: %w", spec, err)
	}
	if m, ok := strings.CutPrefix(url, "master:"); ok {
		return Project{MasterURL: strings.TrimSpace(m), Share: share, Authenticators: keys}, nil
	}
	urls := strings.Fields(url)
	return Project{SchedulerURL: urls[0], SchedulerURLs: urls[1:], Share: share, Authenticators: keys}, nil
}
