package jobs

import (
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
)

// Params are a job's resource estimates and redundancy settings, as stored
// in the workunit row (BOINC's names).
type Params struct {
	// RscFpopsEst is the estimated floating-point operations of one run.
	RscFpopsEst float64
	// RscFpopsBound aborts a run that goes past it; 0 means 10 × RscFpopsEst.
	RscFpopsBound float64
	// RscMemoryBound is the working-set size in bytes a host must have.
	RscMemoryBound float64
	// RscDiskBound is the disk space in bytes a run may use.
	RscDiskBound float64
	// DelayBound is how long a host has to return an instance; stored in
	// seconds.
	DelayBound time.Duration
	// MinQuorum is how many valid results must agree.
	MinQuorum int
	// TargetNResults is how many instances to create at first.
	TargetNResults int
	// MaxErrorResults fails the job after this many error results.
	MaxErrorResults int
	// MaxTotalResults fails the job after this many instances.
	MaxTotalResults int
	// MaxSuccessResults fails the job after this many successful results
	// without a quorum (non-deterministic app).
	MaxSuccessResults int
	// Priority orders the job's instances in the feeder; higher goes first.
	Priority int
}

// DefaultParams are the defaults of the job flags.
func DefaultParams() Params {
	return Params{
		RscFpopsEst:       1e12,
		RscMemoryBound:    1e8,
		RscDiskBound:      1e9,
		DelayBound:        time.Hour,
		MinQuorum:         2,
		TargetNResults:    2,
		MaxErrorResults:   3,
		MaxTotalResults:   6,
		MaxSuccessResults: 3,
	}
}

// Validate checks the parameters are consistent: a job that could never
// reach its quorum is refused here rather than failing later.
func (p Params) Validate() error {
	var errs []error
	if p.RscFpopsEst <= 0 {
		errs = append(errs, fmt.Errorf("rsc_fpops_est %g: want > 0", p.RscFpopsEst))
	}
	if p.RscFpopsBound != 0 && p.RscFpopsBound < p.RscFpopsEst {
		errs = append(errs, fmt.Errorf("rsc_fpops_bound %g: want >= rsc_fpops_est %g", p.RscFpopsBound, p.RscFpopsEst))
	}
	if p.RscMemoryBound < 0 || p.RscDiskBound < 0 {
		errs = append(errs, errors.New("rsc_memory_bound and rsc_disk_bound: want >= 0"))
	}
	if p.DelayBound < time.Second {
		errs = append(errs, fmt.Errorf("delay_bound %s: want at least 1s", p.DelayBound))
	}
	if p.MinQuorum < 1 {
		errs = append(errs, fmt.Errorf("min_quorum %d: want >= 1", p.MinQuorum))
	}
	if p.TargetNResults < p.MinQuorum {
		errs = append(errs, fmt.Errorf("target_nresults %d: want >= min_quorum %d", p.TargetNResults, p.MinQuorum))
	}
	if p.MaxErrorResults < 1 {
		errs = append(errs, fmt.Errorf("max_error_results %d: want >= 1", p.MaxErrorResults))
	}
	if p.MaxTotalResults < p.TargetNResults {
		errs = append(errs, fmt.Errorf("max_total_results %d: want >= target_nresults %d", p.MaxTotalResults, p.TargetNResults))
	}
	if p.MaxSuccessResults < p.MinQuorum {
		errs = append(errs, fmt.Errorf("max_success_results %d: want >= min_quorum %d", p.MaxSuccessResults, p.MinQuorum))
	}
	return errors.Join(errs...)
}

// FpopsBound is RscFpopsBound, or its default of ten times the estimate.
func (p Params) FpopsBound() float64 {
	if p.RscFpopsBound > 0 {
		return p.RscFpopsBound
	}
	return 10 * p.RscFpopsEst
}

// Flag names of the job parameters.
const (
	FlagRscFpopsEst       = "rsc-fpops-est"
	FlagRscFpopsBound     = "rsc-fpops-bound"
	FlagRscMemoryBound    = "rsc-memory-bound"
	FlagRscDiskBound      = "rsc-disk-bound"
	FlagDelayBound        = "delay-bound"
	FlagMinQuorum         = "min-quorum"
	FlagTargetNResults    = "target-nresults"
	FlagMaxErrorResults   = "max-error-results"
	FlagMaxTotalResults   = "max-total-results"
	FlagMaxSuccessResults = "max-success-results"
	FlagPriority          = "priority"
)

// Flags are the job-parameter options shared by the work generator and the
// operator tool's "job submit", with DefaultParams as defaults.
func Flags() []cli.Flag {
	d := DefaultParams()
	env := func(n string) []string { return []string{config.EnvName(n)} }
	return []cli.Flag{
		&cli.Float64Flag{Name: FlagRscFpopsEst, Value: d.RscFpopsEst, Usage: "estimated floating-point operations per job run", EnvVars: env(FlagRscFpopsEst)},
		&cli.Float64Flag{Name: FlagRscFpopsBound, Value: 0, Usage: "operations after which a run is aborted (0: 10 × rsc-fpops-est)", EnvVars: env(FlagRscFpopsBound)},
		&cli.Float64Flag{Name: FlagRscMemoryBound, Value: d.RscMemoryBound, Usage: "memory a run needs, in bytes", EnvVars: env(FlagRscMemoryBound)},
		&cli.Float64Flag{Name: FlagRscDiskBound, Value: d.RscDiskBound, Usage: "disk space a run may use, in bytes", EnvVars: env(FlagRscDiskBound)},
		&cli.DurationFlag{Name: FlagDelayBound, Value: d.DelayBound, Usage: "time a host has to return an instance (stored in whole seconds)", EnvVars: env(FlagDelayBound)},
		&cli.IntFlag{Name: FlagMinQuorum, Value: d.MinQuorum, Usage: "valid results that must agree", EnvVars: env(FlagMinQuorum)},
		&cli.IntFlag{Name: FlagTargetNResults, Value: d.TargetNResults, Usage: "instances created at first", EnvVars: env(FlagTargetNResults)},
		&cli.IntFlag{Name: FlagMaxErrorResults, Value: d.MaxErrorResults, Usage: "error results after which the job fails", EnvVars: env(FlagMaxErrorResults)},
		&cli.IntFlag{Name: FlagMaxTotalResults, Value: d.MaxTotalResults, Usage: "instances after which the job fails", EnvVars: env(FlagMaxTotalResults)},
		&cli.IntFlag{Name: FlagMaxSuccessResults, Value: d.MaxSuccessResults, Usage: "successful results without a quorum after which the job fails", EnvVars: env(FlagMaxSuccessResults)},
		&cli.IntFlag{Name: FlagPriority, Value: d.Priority, Usage: "job priority; higher is sent first", EnvVars: env(FlagPriority)},
	}
}

// ParamsFrom reads and validates the job flags.
func ParamsFrom(c *cli.Context) (Params, error) {
	p := Params{
		RscFpopsEst:       c.Float64(FlagRscFpopsEst),
		RscFpopsBound:     c.Float64(FlagRscFpopsBound),
		RscMemoryBound:    c.Float64(FlagRscMemoryBound),
		RscDiskBound:      c.Float64(FlagRscDiskBound),
		DelayBound:        c.Duration(FlagDelayBound),
		MinQuorum:         c.Int(FlagMinQuorum),
		TargetNResults:    c.Int(FlagTargetNResults),
		MaxErrorResults:   c.Int(FlagMaxErrorResults),
		MaxTotalResults:   c.Int(FlagMaxTotalResults),
		MaxSuccessResults: c.Int(FlagMaxSuccessResults),
		Priority:          c.Int(FlagPriority),
	}
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("job parameters: %w", err)
	}
	return p, nil
}
