package localproject

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/planclass"
	"github.com/taskserver/taskserver/internal/projectrun"
	"github.com/taskserver/taskserver/internal/simclient"
)

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// watch prints progress until the run should end: ctx done, the duration
// over, every job finished (UntilDone), or a program died.
func (p *project) watch(ctx context.Context, procs []*projectrun.Proc) error {
	o := p.opts
	start := time.Now()
	tick := time.NewTicker(o.ProgressEvery)
	defer tick.Stop()
	var deadline <-chan time.Time
	if o.Duration > 0 {
		t := time.NewTimer(o.Duration)
		defer t.Stop()
		deadline = t.C
	}
	var timeout <-chan time.Time
	if o.UntilDone {
		t := time.NewTimer(o.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-deadline:
			return nil
		case <-timeout:
			return fmt.Errorf("jobs not all finished after %s", o.Timeout)
		case <-tick.C:
		}
		for _, pr := range procs {
			if !pr.Running() {
				return fmt.Errorf("%s exited unexpectedly: %v (see %s)", pr.Name(), pr.Err(), pr.LogPath())
			}
		}
		pg, err := p.progress(context.Background())
		if err != nil {
			fmt.Fprintf(o.Out, "%6.0fs  progress unavailable: %v\n", time.Since(start).Seconds(), err)
			continue
		}
		fmt.Fprintf(o.Out, "%6.0fs  %s\n", time.Since(start).Seconds(), pg)
		if o.UntilDone && o.Jobs > 0 && pg.JobsLive == 0 && pg.Assimilated >= o.Jobs {
			return nil
		}
	}
}

// Run sets up the project, runs every program until the duration ends, ctx
// ends, or (UntilDone) every job is finished and purged, stops them all, and
// returns the summary with its invariant checks.
func Run(ctx context.Context, o Options) (Summary, error) {
	o.defaults()
	absDir, err := filepath.Abs(o.ProjectDir)
	if err != nil {
		return Summary{}, err
	}
	o.ProjectDir = absDir
	if o.ShmPath == "" {
		// The daemons' own default for this project directory, which the
		// configuration file then names for every program.
		if o.ShmPath, err = config.DefaultShmPath(o.ProjectDir); err != nil {
			return Summary{}, err
		}
	}
	p, err := setup(ctx, o)
	if err != nil {
		return Summary{}, fmt.Errorf("set up project: %w", err)
	}
	defer p.st.Close()

	p.configPath = filepath.Join(o.ProjectDir, "project.yaml")
	// No url-base: the scheduler starts on port 0 and makes its URL base
	// of the address it got.
	conf := fmt.Sprintf(`# Local project configuration, shared by every program (keys are flag names).
db-dsn: %q
project-dir: %q
download-dir: download
upload-dir: upload
shm-path: %q
plan-class-spec: %s
log-level: info
app: demo
`, p.dsn, o.ProjectDir, o.ShmPath, planclass.DefaultFile)
	if err := os.WriteFile(p.configPath, []byte(conf), 0o600); err != nil {
		return Summary{}, fmt.Errorf("write project config: %w", err)
	}

	logDir := filepath.Join(o.ProjectDir, "logs")
	var procs []*projectrun.Proc
	stopAll := func() error {
		var errs []error
		// Volunteers and job creation first, then the daemons.
		for i := len(procs) - 1; i >= 0; i-- {
			errs = append(errs, procs[i].Stop(20*time.Second))
		}
		return errors.Join(errs...)
	}
	// Every daemon listens on port 0 and reports the port it got in
	// logs/<name>.addr.
	const anyPort = "127.0.0.1:0"
	delay := o.DelayBound.String()
	steps := []struct {
		name, program string
		args          []string
	}{
		{"feeder", "feeder", []string{"--listen", anyPort, "--sleep", "200ms"}},
		{"scheduler", "scheduler", []string{"--addr", anyPort, "--listen", anyPort, "--url-base", "",
			"--upload-key", filepath.Join(o.ProjectDir, "keys", "upload_private"),
			"--upload-cert-key", filepath.Join(o.ProjectDir, "keys", keys.Ed25519PrivateFile), "--request-delay", "1s"}},
		{"transitioner.0", "transitioner", []string{"--listen", anyPort, "--mod", "2", "--mod-index", "0", "--sleep", "500ms"}},
		{"transitioner.1", "transitioner", []string{"--listen", anyPort, "--mod", "2", "--mod-index", "1", "--sleep", "500ms"}},
		{"validator", "validator", []string{"--listen", anyPort, "--sleep", "500ms"}},
		{"assimilator", "assimilator", []string{"--listen", anyPort, "--sleep", "500ms", "--results-dir", "results"}},
		{"file_deleter", "file_deleter", []string{"--listen", anyPort, "--sleep", "500ms"}},
		{"db_purge", "db_purge", []string{"--listen", anyPort, "--sleep", "1s", "--archive-dir", "archives"}},
		// The statistics export, into html/stats, once at start and then daily.
		{"db_dump", "db_dump", []string{"--listen", anyPort, "--interval", "24h"}},
		// A task that reports progress keeps its deadline a bound ahead.
		{"trickle_handler", "trickle_handler", []string{"--listen", anyPort, "--sleep", "500ms", "--extend-deadline", delay}},
		{"work_generator", "work_generator", []string{"--listen", anyPort, "--sleep", "500ms",
			"--unsent-target", strconv.Itoa(o.UnsentTarget), "--total-jobs", strconv.Itoa(o.Jobs),
			"--delay-bound", delay, "--min-quorum", "2", "--target-nresults", "2", "--rsc-fpops-est", "1e10"}},
	}
	for _, s := range steps {
		pr, err := projectrun.Start(projectrun.Spec{Name: s.name, Bin: filepath.Join(o.BinDir, s.program), LogDir: logDir,
			Args: append([]string{"--config", p.configPath}, s.args...), ReportsAddrs: true})
		if err != nil {
			return Summary{}, errors.Join(err, stopAll())
		}
		procs = append(procs, pr)
		switch s.name {
		case "feeder":
			err = pr.WaitFile(ctx, o.ShmPath)
		case "scheduler":
			var addr string
			addr, err = pr.WaitAddr(ctx, "addr")
			p.schedURL = "http://" + addr + "/scheduler"
		}
		if err != nil {
			return Summary{}, errors.Join(err, stopAll())
		}
	}
	simArgs := []string{"--url", p.schedURL, "--authenticators", p.authPath, "--hosts", strconv.Itoa(o.Hosts),
		"--fail-frac", ftoa(o.FailFrac), "--vanish-frac", ftoa(o.VanishFrac), "--cheat-frac", ftoa(o.CheatFrac),
		"--trickle-frac", ftoa(o.TrickleFrac),
		// A fifth of the hosts have GPUs and a fifth are multi-core, so
		// GPU and multi-threaded versions (SeedHardwareVersions) run too.
		"--gpu-frac", ftoa(hostGPUFrac), "--mt-frac", ftoa(hostMTFrac),
		"--compute-time", o.ComputeTime.String(), "--backoff-scale", "0.01", "--backoff-max", "5s",
		"--report", filepath.Join(o.ProjectDir, "simclient-report.json")}
	sim, err := projectrun.Start(projectrun.Spec{Name: "simclient", Bin: filepath.Join(o.BinDir, "simclient"), LogDir: logDir, Args: simArgs})
	if err != nil {
		return Summary{}, errors.Join(err, stopAll())
	}
	procs = append(procs, sim)
	fmt.Fprintf(o.Out, "project %s running: scheduler %s, database %s, logs in %s\n", o.ProjectDir, p.schedURL, o.Database, logDir)

	runErr := p.watch(ctx, procs)
	stopErr := stopAll()
	sum, err := p.summarize(context.Background())
	if err != nil {
		return sum, errors.Join(runErr, stopErr, err)
	}
	// The simulated client writes its report when it stops.
	if b, err := os.ReadFile(filepath.Join(o.ProjectDir, "simclient-report.json")); err == nil {
		var st simclient.Stats
		if err := json.Unmarshal(b, &st); err != nil {
			return sum, errors.Join(runErr, stopErr, fmt.Errorf("read the simulated client's report: %w", err))
		}
		sum.FilesDownloaded, sum.GzippedDownloads, sum.StickyReused, sum.FilesUploaded = st.FilesDownloaded, st.GzippedDownloads, st.StickyReused, st.FilesUploaded
		sum.TricklesSent = st.TricklesSent
		sum.Hardware = st.Hardware.Hardware
	}
	return sum, errors.Join(runErr, stopErr)
}

// The shares of simulated hosts with GPUs and with many cores.
const (
	hostGPUFrac = 0.2
	hostMTFrac  = 0.2
)
