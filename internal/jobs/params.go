package jobs

import (
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/row"
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
	// FixedCredit is the credit of a valid result when the app's credit
	// policy is "fixed"; 0 falls back to the FLOP estimate.
	FixedCredit float64
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
	if p.FixedCredit < 0 {
		errs = append(errs, fmt.Errorf("fixed_credit %g: want >= 0", p.FixedCredit))
	}
	if p.MaxSuccessResults < p.MinQuorum {
		errs = append(errs, fmt.Errorf("max_success_results %d: want >= min_quorum %d", p.MaxSuccessResults, p.MinQuorum))
	}
	return errors.Join(errs...)
}

// check is Validate with context for the error.
func (p Params) check() error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("job parameters: %w", err)
	}
	return nil
}

// workunit is the row of a new job of app named name with input document
// doc, created at now. Under adaptive replication a job that asks for a
// quorum of 2 or more starts with a quorum of 1 and keeps the quorum it asked
// for in replication_quorum, which the scheduler applies when it sends the job
// to a host it does not trust. A known-answer job (knownAnswerID <> 0) runs
// once: its check is against the expected output, not another host.
func (p Params) workunit(app row.App, name, doc string, now, knownAnswerID int64) row.Workunit {
	wu := row.Workunit{
		CreateTime:        now,
		AppID:             app.ID,
		Name:              name,
		XMLDoc:            doc,
		RscFpopsEst:       p.RscFpopsEst,
		RscFpopsBound:     p.FpopsBound(),
		RscMemoryBound:    p.RscMemoryBound,
		RscDiskBound:      p.RscDiskBound,
		TransitionTime:    now,
		DelayBound:        int64(p.DelayBound / time.Second),
		MinQuorum:         p.MinQuorum,
		TargetNResults:    p.TargetNResults,
		MaxErrorResults:   p.MaxErrorResults,
		MaxTotalResults:   p.MaxTotalResults,
		MaxSuccessResults: p.MaxSuccessResults,
		Priority:          p.Priority,
		ModTime:           now,
		FixedCredit:       p.FixedCredit,
		KnownAnswerID:     knownAnswerID,
	}
	switch {
	case knownAnswerID != 0:
		wu.MinQuorum, wu.TargetNResults = 1, 1
	case app.AdaptiveReplication && p.MinQuorum >= 2:
		wu.MinQuorum, wu.TargetNResults, wu.ReplicationQuorum = 1, 1, p.MinQuorum
	}
	return wu
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
	FlagFixedCredit       = "fixed-credit"
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
		&cli.Float64Flag{Name: FlagFixedCredit, Value: d.FixedCredit, Usage: "credit of a valid result for apps with credit policy \"fixed\" (0: from rsc-fpops-est)", EnvVars: env(FlagFixedCredit)},
	}
}

// ParamsFrom reads and validates the job flags.
func ParamsFrom(c *cli.Context) (Params, error) {
	p := ReadParams(c)
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("job parameters: %w", err)
	}
	return p, nil
}

// ReadParams reads the job flags, for a daemon whose Config validates them.
func ReadParams(c *cli.Context) Params {
	return Params{
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
		FixedCredit:       c.Float64(FlagFixedCredit),
	}
}
