package chaos

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// DefaultFailFrac is the share of hosts failing every task when none is
// given: enough to exercise the error paths, few enough that jobs finish.
const DefaultFailFrac = 0.05

// Options configures a chaos run. Zero values mean the documented defaults.
type Options struct {
	// BinDir holds the built programs, this one included (the assimilator
	// runs its record command).
	BinDir string
	// OutDir receives report.json, the handled log, the hosts' ack logs and
	// the project (logs/ of every program); default chaos-report.
	OutDir string
	// Jobs is the number of jobs to run (two instances each); default 5000.
	Jobs int
	// Seed makes the fault schedule and the hosts reproducible; 0 picks one
	// from the clock (printed, and in the report).
	Seed uint64
	// Kills is how many SIGKILLs of daemons to inject in total; default 100.
	Kills int
	// KillEvery is the mean time between two kills; default 1s.
	KillEvery time.Duration
	// RestartAfter bounds how long a killed daemon stays down (random in
	// [RestartAfter/4, RestartAfter]); default 1s.
	RestartAfter time.Duration
	// DBDown is how long the database server stays down after its kill;
	// default 3s.
	DBDown time.Duration
	// DiskFullFor is how long the upload folder's disk stays full; default
	// 10s.
	DiskFullFor time.Duration
	// BurstHosts is the number of extra hosts of the scheduler overload,
	// all starting at once; default 200. BurstFor is how long they run;
	// default 15s.
	BurstHosts int
	BurstFor   time.Duration
	// Hosts and Users are the steady volunteers; default 40 hosts of 10
	// users.
	Hosts int
	Users int
	// FailFrac is the share of hosts that fail every task; 0 means the
	// default 0.05 unless FailFracSet says it was given.
	FailFrac float64
	// FailFracSet makes FailFrac count as given, so 0 asks for no failing
	// hosts (the command sets it: its flag has the default itself).
	FailFracSet bool
	// CheatFrac is the share of hosts returning wrong output; default 0.
	CheatFrac float64
	// ComputeTime is one task's CPU time on a host; default 1s.
	ComputeTime time.Duration
	// DelayBound is each job's deadline: instances sent in a reply that was
	// lost to a kill are replaced after it; default 30s.
	DelayBound time.Duration
	// Timeout bounds the whole run; default 40m.
	Timeout time.Duration
	// Out receives progress lines; default stdout.
	Out io.Writer
}

func (o *Options) defaults() error {
	if o.OutDir == "" {
		o.OutDir = "chaos-report"
	}
	if o.Jobs == 0 {
		o.Jobs = 5000
	}
	if o.Kills == 0 {
		o.Kills = 100
	}
	if o.KillEvery == 0 {
		o.KillEvery = time.Second
	}
	if o.RestartAfter == 0 {
		o.RestartAfter = time.Second
	}
	if o.DBDown == 0 {
		o.DBDown = 3 * time.Second
	}
	if o.DiskFullFor == 0 {
		o.DiskFullFor = 10 * time.Second
	}
	if o.BurstHosts == 0 {
		o.BurstHosts = 200
	}
	if o.BurstFor == 0 {
		o.BurstFor = 15 * time.Second
	}
	if o.Hosts == 0 {
		o.Hosts = 40
	}
	if o.Users == 0 {
		o.Users = 10
	}
	if o.FailFrac == 0 && !o.FailFracSet {
		o.FailFrac = DefaultFailFrac
	}
	if o.ComputeTime == 0 {
		o.ComputeTime = time.Second
	}
	if o.DelayBound == 0 {
		o.DelayBound = 30 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 40 * time.Minute
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	var errs []error
	if o.BinDir == "" {
		errs = append(errs, errors.New("bin dir is empty"))
	}
	if o.Jobs < 1 {
		errs = append(errs, fmt.Errorf("jobs %d: want at least 1", o.Jobs))
	}
	if o.Kills < 0 || o.BurstHosts < 0 {
		errs = append(errs, fmt.Errorf("kills %d, burst hosts %d: want 0 or more", o.Kills, o.BurstHosts))
	}
	for _, d := range []time.Duration{o.KillEvery, o.RestartAfter, o.DBDown, o.DiskFullFor, o.BurstFor, o.ComputeTime, o.DelayBound, o.Timeout} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("duration %s: want a positive one", d))
		}
	}
	if o.FailFrac < 0 || o.CheatFrac < 0 || o.FailFrac+o.CheatFrac > 1 {
		errs = append(errs, fmt.Errorf("fail fraction %v, cheat fraction %v: want shares in [0, 1] summing to at most 1", o.FailFrac, o.CheatFrac))
	}
	return errors.Join(errs...)
}
