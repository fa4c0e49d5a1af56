package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"path/filepath"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/internal/projectrun"
)

// Run sets up the project, runs the jobs under faults until every job is
// finished and purged (or Timeout), stops everything and checks the
// outcome. The report is returned whenever the checks could run, with an
// error too when the run did not finish.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	started := time.Now()
	// The driver's own log lines about connections the database restart
	// broke would only interleave with the progress lines.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	out := func(format string, args ...any) {
		fmt.Fprintf(o.Out, "%6.0fs  %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(o.Out, "chaos: %d jobs, %d kills, seed %d, output in %s\n", o.Jobs, o.Kills, o.Seed, o.OutDir)
	p, err := setup(ctx, o)
	if p != nil {
		defer p.close()
	}
	if err != nil {
		return nil, fmt.Errorf("set up project: %w", err)
	}
	p.mountUpload(ctx)
	if p.diskFullSkip != "" {
		out("note: the disk-full fault will be skipped: %s", p.diskFullSkip)
	}
	if err := p.writeConfig(p.dsn); err != nil {
		return nil, err
	}

	runCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := p.startDaemons(runCtx); err != nil {
		return nil, err
	}
	sim := p.simclient("hosts", o.Hosts, o.Seed, 0, o.FailFrac, o.CheatFrac)
	p.sims = append(p.sims, sim)
	if err := sim.Start(); err != nil {
		return nil, errors.Join(err, p.stopAll())
	}
	out("project running: scheduler %s, logs in %s", p.urlBase, filepath.Join(p.dir, "logs"))

	in := newInjector(p, out)
	faultsDone := make(chan error, 1)
	go func() { faultsDone <- in.run(runCtx) }()
	runErr := p.watch(runCtx, in, faultsDone, out)
	cancel()
	stopErr := p.stopAll()

	// Everything stopped: check what is left.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer ccancel()
	r, err := p.check(cctx)
	if err != nil {
		return nil, errors.Join(runErr, stopErr, err)
	}
	r.Seed = o.Seed
	r.Finished = runErr == nil
	r.ElapsedSeconds = time.Since(started).Seconds()
	in.mu.Lock()
	r.Faults = in.faults
	r.FaultErrors = len(in.errs)
	faultErrs := errors.Join(in.errs...)
	in.mu.Unlock()
	for _, d := range p.daemons {
		r.UnexpectedExits += d.Crashes()
	}
	for _, k := range []string{FaultDBRestart, FaultDiskFull, FaultOverload} {
		if _, ok := r.Faults[k]; !ok {
			r.Faults[k] = 0
		}
	}
	r.DiskFullSkipped = p.diskFullSkip
	if stopErr != nil {
		r.Notes = append(r.Notes, "stop: "+stopErr.Error())
	}
	return r, errors.Join(runErr, faultErrs)
}

// watch restarts daemons that died on their own, prints progress and
// returns when the faults are over and every job is finished and purged,
// or on the timeout.
func (p *project) watch(ctx context.Context, in *injector, faultsDone <-chan error, out func(string, ...any)) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	faultsOver := false
	lastPrint := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("run did not finish: %w", ctx.Err())
		case err := <-faultsDone:
			if err != nil {
				return fmt.Errorf("inject faults: %w", err)
			}
			faultsOver = true
			out("faults over: %v", in.snapshot())
		case <-tick.C:
		}
		if err := p.restartExited(in.isHeld, out); err != nil {
			return err
		}
		pg, err := p.progress(ctx)
		if err != nil {
			continue // the database may be down on purpose
		}
		if time.Since(lastPrint) >= 5*time.Second {
			out("%s", pg)
			lastPrint = time.Now()
		}
		if faultsOver && pg.live == 0 && pg.created >= p.opts.Jobs {
			pg, err := p.progress(ctx)
			if err == nil && pg.live == 0 && pg.purged >= p.opts.Jobs {
				out("%s: done", pg)
				return nil
			}
		}
	}
}

// snapshot copies the fault counts.
func (in *injector) snapshot() map[string]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	m := make(map[string]int, len(in.faults))
	for k, v := range in.faults {
		m[k] = v
	}
	return m
}

// startDaemons starts every daemon in order, waiting for the feeder's
// cache and the scheduler's port before the next; on an error it stops
// what it started.
func (p *project) startDaemons(ctx context.Context) error {
	p.daemons = p.programs()
	for _, d := range p.daemons {
		err := d.Start()
		if err == nil {
			switch d.Name() {
			case "feeder":
				err = d.WaitFile(ctx, p.shmPath)
			case "scheduler":
				err = p.schedulerListens(ctx, d)
			}
		}
		if err != nil {
			return errors.Join(err, p.stopAll())
		}
	}
	return nil
}

// stopAll stops the hosts, then the daemons, each in reverse start order.
func (p *project) stopAll() error {
	var errs []error
	for i := len(p.sims) - 1; i >= 0; i-- {
		errs = append(errs, stopRunning(p.sims[i], 30*time.Second))
	}
	for i := len(p.daemons) - 1; i >= 0; i-- {
		errs = append(errs, stopRunning(p.daemons[i], 30*time.Second))
	}
	return errors.Join(errs...)
}

// stopRunning stops pr if it runs. A run that already ended is no error
// here: killed on purpose, or counted as an unexpected exit.
func stopRunning(pr *projectrun.Proc, grace time.Duration) error {
	if !pr.Running() {
		return nil
	}
	return pr.Stop(grace)
}

// restartExited starts again the daemons that exited on their own (not
// those held down on purpose), and fails when the steady hosts exited: the
// run cannot go on without them.
func (p *project) restartExited(held func(*projectrun.Proc) bool, out func(string, ...any)) error {
	for _, d := range p.daemons {
		if !d.Running() && !held(d) {
			out("%s exited on its own (%v), started again (see %s)", d.Name(), d.Err(), d.LogPath())
			if err := d.Start(); err != nil {
				return err
			}
		}
	}
	if !p.sims[0].Running() {
		return fmt.Errorf("simclient exited: %v (see %s)", p.sims[0].Err(), p.sims[0].LogPath())
	}
	return nil
}

// daemon is the daemon called name; nil if there is none.
func (p *project) daemon(name string) *projectrun.Proc {
	for _, d := range p.daemons {
		if d.Name() == name {
			return d
		}
	}
	return nil
}
