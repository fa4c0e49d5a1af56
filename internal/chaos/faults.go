package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/taskserver/taskserver/internal/projectrun"
)

// Fault kinds in the report (kills are "kill_<program>", both
// transitioner replicas under one kind).
const (
	FaultDBRestart = "db_restart"
	FaultDiskFull  = "disk_full"
	FaultOverload  = "scheduler_overload"
)

// ballastName is the file that fills the upload disk; nothing of the
// project is named like it.
const ballastName = ".chaos-ballast"

// injector runs the fault schedule. Its random source is the run's seed,
// so a schedule can be replayed (the moments still depend on the load).
type injector struct {
	p   *project
	rng *rand.Rand
	out func(format string, args ...any)
	// order is what is left of the current round of kills.
	order []*projectrun.Proc

	mu     sync.Mutex
	faults map[string]int
	held   map[*projectrun.Proc]bool // killed by us and not yet started again
	errs   []error
}

func newInjector(p *project, out func(string, ...any)) *injector {
	return &injector{p: p, rng: rand.New(rand.NewPCG(p.opts.Seed, 0x6368616f73)), out: out,
		faults: map[string]int{}, held: map[*projectrun.Proc]bool{}}
}

func (in *injector) count(kind string) {
	in.mu.Lock()
	in.faults[kind]++
	in.mu.Unlock()
}

func (in *injector) fail(err error) {
	in.mu.Lock()
	in.errs = append(in.errs, err)
	in.mu.Unlock()
}

// isHeld reports whether pr is down on purpose (the watcher leaves it).
func (in *injector) isHeld(pr *projectrun.Proc) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.held[pr]
}

// between is a random duration in [lo, hi).
func (in *injector) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(in.rng.Int64N(int64(hi-lo)))
}

// run injects every fault: Kills kills at random moments, and at random
// points of that sequence the scheduler overload, the database restart and
// the disk-full phase. It returns when all of them are over.
func (in *injector) run(ctx context.Context) error {
	o := in.p.opts
	k := o.Kills
	at := func(lo, span int) int { return lo + in.rng.IntN(max(span, 1)) }
	burstAt, dbAt, diskAt := at(k/10, k/10), at(k/4, k/4), at(k/2, k/4)
	var side sync.WaitGroup
	defer side.Wait()
	for i := 0; i <= k; i++ {
		if i == burstAt && o.BurstHosts > 0 {
			side.Go(func() { in.overload(ctx) })
		}
		// A cluster run kills its database nodes on a schedule of its own
		// (cluster.go).
		if i == dbAt && in.p.db != nil && !in.p.noDBRestart {
			if err := in.restartDB(ctx); err != nil {
				return err
			}
		}
		if i == diskAt {
			side.Go(func() { in.diskFull(ctx) })
		}
		if i == k {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(in.between(o.KillEvery/2, o.KillEvery*3/2)):
		}
		in.killOne(ctx, &side)
	}
	return nil
}

// killOne kills the next running daemon of a shuffled round with SIGKILL and starts it again
// after a short random delay.
func (in *injector) killOne(ctx context.Context, side *sync.WaitGroup) {
	var pr *projectrun.Proc
	for range 2 * len(in.p.daemons) {
		if len(in.order) == 0 {
			// Rounds over every daemon in a shuffled order: each is killed
			// about Kills/len(daemons) times, none is left out.
			in.order = append([]*projectrun.Proc(nil), in.p.daemons...)
			in.rng.Shuffle(len(in.order), func(i, j int) { in.order[i], in.order[j] = in.order[j], in.order[i] })
		}
		c := in.order[0]
		in.order = in.order[1:]
		if !in.isHeld(c) && c.Running() {
			pr = c
			break
		}
	}
	if pr == nil {
		return
	}
	in.mu.Lock()
	in.held[pr] = true
	in.mu.Unlock()
	pr.Kill()
	in.count("kill_" + strings.SplitN(pr.Name(), ".", 2)[0])
	delay := in.between(in.p.opts.RestartAfter/4, in.p.opts.RestartAfter)
	side.Go(func() {
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		if err := pr.Start(); err != nil {
			in.fail(err)
		}
		in.mu.Lock()
		delete(in.held, pr)
		in.mu.Unlock()
	})
}

// restartDB kills the database server with SIGKILL, leaves it down for
// DBDown, and starts it again on the same port and data directory.
func (in *injector) restartDB(ctx context.Context) error {
	in.out("fault: database server killed (down for %s)", in.p.opts.DBDown)
	in.p.db.Kill()
	in.count(FaultDBRestart)
	select {
	case <-ctx.Done():
	case <-time.After(in.p.opts.DBDown):
	}
	start := time.Now()
	if err := in.p.db.Restart(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("restart the database server: %w", err)
	}
	in.out("fault: database server back after %.1fs of recovery", time.Since(start).Seconds())
	return nil
}

// diskFull fills the upload folder's tmpfs with a ballast file, keeps it
// full for DiskFullFor, then frees it. Without the tmpfs it injects
// nothing (the report says why).
func (in *injector) diskFull(ctx context.Context) {
	if in.p.uploadMount == "" {
		in.out("fault: disk full skipped: %s", in.p.diskFullSkip)
		return
	}
	path := filepath.Join(in.p.uploadMount, ballastName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		in.fail(fmt.Errorf("disk full: %w", err))
		return
	}
	chunk := make([]byte, 1<<20)
	var n int64
	for {
		w, err := f.Write(chunk)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			f.Close()
			_ = os.Remove(path)
			in.fail(fmt.Errorf("disk full: write ballast: %w", err))
			return
		}
	}
	// The last bytes too: a page-sized remainder would still take an output.
	for _, size := range []int{4096, 512, 1} {
		for {
			if _, err := f.Write(chunk[:size]); err != nil {
				break
			}
		}
	}
	f.Close()
	in.count(FaultDiskFull)
	in.out("fault: upload disk full (%d MiB of ballast) for %s", n>>20, in.p.opts.DiskFullFor)
	select {
	case <-ctx.Done():
	case <-time.After(in.p.opts.DiskFullFor):
	}
	if err := os.Remove(path); err != nil {
		in.fail(fmt.Errorf("disk full: free ballast: %w", err))
		return
	}
	in.out("fault: upload disk freed")
}

// overload starts BurstHosts extra hosts at once, all asking for work in
// the same moment, far beyond the scheduler's database connections and
// commit lanes; they run for BurstFor and stop, leaving whatever work they
// held to time out and be sent again.
func (in *injector) overload(ctx context.Context) {
	o := in.p.opts
	pr := in.p.simclient("burst", o.BurstHosts, o.Seed+1, o.BurstFor, 0, 0)
	in.mu.Lock()
	in.p.sims = append(in.p.sims, pr)
	in.mu.Unlock()
	if err := pr.Start(); err != nil {
		in.fail(fmt.Errorf("scheduler overload: %w", err))
		return
	}
	in.count(FaultOverload)
	in.out("fault: scheduler overload: %d extra hosts for %s", o.BurstHosts, o.BurstFor)
	select {
	case <-ctx.Done():
	case <-pr.Done():
	case <-time.After(o.BurstFor + time.Minute):
	}
	if err := stopRunning(pr, 30*time.Second); err != nil {
		in.fail(fmt.Errorf("scheduler overload: %w", err))
	}
}
