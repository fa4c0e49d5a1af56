package localproject

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/keys"
)

// Run sets up the project, runs every program until the duration ends, ctx
// ends, or (UntilDone) every job is finished and purged, stops them all, and
// returns the summary with its invariant checks.
func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// waitFile waits until path exists (the feeder created its cache).
func waitFile(ctx context.Context, path string, p *proc) error {
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if !p.running() {
			return fmt.Errorf("%s exited before creating %s (see %s)", p.name, path, p.log)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// watch prints progress until the run should end: ctx done, the duration
// over, every job finished (UntilDone), or a program died.
func (p *project) watch(ctx context.Context, procs []*proc) error {
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
			if !pr.running() {
				return fmt.Errorf("%s exited unexpectedly: %v (see %s)", pr.name, pr.err, pr.log)
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

	schedPort, err := freePort()
	if err != nil {
		return Summary{}, err
	}
	urlBase := fmt.Sprintf("http://127.0.0.1:%d", schedPort)
	p.schedURL = urlBase + "/scheduler"
	p.configPath = filepath.Join(o.ProjectDir, "project.yaml")
	conf := fmt.Sprintf(`# Local project configuration, shared by every program (keys are flag names).
db-dsn: %q
project-dir: %q
download-dir: download
upload-dir: upload
shm-path: %q
log-level: info
app: demo
url-base: %q
`, p.dsn, o.ProjectDir, o.ShmPath, urlBase)
	if err := os.WriteFile(p.configPath, []byte(conf), 0o600); err != nil {
		return Summary{}, fmt.Errorf("write project config: %w", err)
	}

	logDir := filepath.Join(o.ProjectDir, "logs")
	var procs []*proc
	stopAll := func() error {
		var errs []error
		// Volunteers and job creation first, then the daemons.
		for i := len(procs) - 1; i >= 0; i-- {
			if err := procs[i].stop(20 * time.Second); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w (see %s)", procs[i].name, err, procs[i].log))
			}
		}
		return errors.Join(errs...)
	}
	launch := func(name, program string, args ...string) (*proc, error) {
		args = append([]string{"--config", p.configPath}, args...)
		pr, err := start(filepath.Join(o.BinDir, program), name, logDir, args...)
		if err != nil {
			return nil, err
		}
		procs = append(procs, pr)
		return pr, nil
	}
	// A port is free only until someone binds it, and the kernel may hand
	// the same free port out twice before any daemon has started: never
	// give two daemons one port.
	given := map[int]bool{schedPort: true}
	port := func() string {
		for range 100 {
			n, err := freePort()
			if err == nil && !given[n] {
				given[n] = true
				return "127.0.0.1:" + strconv.Itoa(n)
			}
		}
		return "127.0.0.1:0" // the daemon logs the port it got
	}
	delay := o.DelayBound.String()
	steps := []struct {
		name, program string
		args          []string
	}{
		{"feeder", "feeder", []string{"--listen", port(), "--sleep", "200ms"}},
		{"scheduler", "scheduler", []string{"--addr", fmt.Sprintf("127.0.0.1:%d", schedPort), "--listen", port(), "--url-base", urlBase,
			"--upload-key", filepath.Join(o.ProjectDir, "keys", "upload_private"),
			"--upload-cert-key", filepath.Join(o.ProjectDir, "keys", keys.Ed25519PrivateFile), "--request-delay", "1s"}},
		{"transitioner.0", "transitioner", []string{"--listen", port(), "--mod", "2", "--mod-index", "0", "--sleep", "500ms"}},
		{"transitioner.1", "transitioner", []string{"--listen", port(), "--mod", "2", "--mod-index", "1", "--sleep", "500ms"}},
		{"validator", "validator", []string{"--listen", port(), "--sleep", "500ms"}},
		{"assimilator", "assimilator", []string{"--listen", port(), "--sleep", "500ms", "--results-dir", "results"}},
		{"file_deleter", "file_deleter", []string{"--listen", port(), "--sleep", "500ms"}},
		{"db_purge", "db_purge", []string{"--listen", port(), "--sleep", "1s", "--archive-dir", "archives"}},
		{"work_generator", "work_generator", []string{"--listen", port(), "--sleep", "500ms",
			"--unsent-target", strconv.Itoa(o.UnsentTarget), "--total-jobs", strconv.Itoa(o.Jobs),
			"--delay-bound", delay, "--min-quorum", "2", "--target-nresults", "2", "--rsc-fpops-est", "1e10"}},
	}
	for _, s := range steps {
		pr, err := launch(s.name, s.program, s.args...)
		if err != nil {
			return Summary{}, errors.Join(err, stopAll())
		}
		if s.name == "feeder" {
			if err := waitFile(ctx, o.ShmPath, pr); err != nil {
				return Summary{}, errors.Join(err, stopAll())
			}
		}
		if s.name == "scheduler" {
			if err := waitTCP(ctx, fmt.Sprintf("127.0.0.1:%d", schedPort), pr); err != nil {
				return Summary{}, errors.Join(err, stopAll())
			}
		}
	}
	simArgs := []string{"--url", p.schedURL, "--authenticators", p.authPath, "--hosts", strconv.Itoa(o.Hosts),
		"--fail-frac", ftoa(o.FailFrac), "--vanish-frac", ftoa(o.VanishFrac), "--cheat-frac", ftoa(o.CheatFrac),
		"--compute-time", o.ComputeTime.String(), "--backoff-scale", "0.01", "--backoff-max", "5s",
		"--report", filepath.Join(o.ProjectDir, "simclient-report.json")}
	sim, err := start(filepath.Join(o.BinDir, "simclient"), "simclient", logDir, simArgs...)
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
	return sum, errors.Join(runErr, stopErr)
}
