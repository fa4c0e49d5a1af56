// Package planclass is a stand-in for h-planclass's package of the same
// name, with its announced API, so that the scheduler can be written before
// it lands. The merge of h-planclass replaces this file.
package planclass

import (
	"errors"
	"fmt"
)

// ErrRefused means the host does not satisfy the plan class.
var ErrRefused = errors.New("plan class refused")

// ErrUnknown means no plan class has that name.
var ErrUnknown = errors.New("unknown plan class")

// Refusal is a refusal with the rule that failed.
type Refusal struct{ Rule string }

func (r *Refusal) Error() string { return "plan class refused: " + r.Rule }

// Unwrap makes a Refusal an ErrRefused.
func (r *Refusal) Unwrap() error { return ErrRefused }

// Host is what a plan class tests of a host.
type Host struct {
	PFpops float64
	NCPUs  int
	// Coprocs by type: count and peak FLOPS.
	Coprocs map[string]float64
}

// Usage is what one task of a version uses on a host.
type Usage struct {
	AvgNCPUs, MaxNCPUs float64
	Resource           string
	GPUUsage, GPURAM   float64
	ProjectedFlops     float64
	PeakFlops          float64
	Cmdline            string
}

// Specs are the project's plan classes.
type Specs struct {
	byName map[string]func(Host) (Usage, error)
}

// NewStub makes Specs from functions (stand-in only).
func NewStub(m map[string]func(Host) (Usage, error)) *Specs { return &Specs{byName: m} }

// Check decides whether the host satisfies plan class name.
func (s *Specs) Check(name string, h Host) (Usage, error) {
	if s == nil || s.byName[name] == nil {
		return Usage{}, fmt.Errorf("plan class %q: %w", name, ErrUnknown)
	}
	return s.byName[name](h)
}

// CPUUsage is the usage of a version without plan class.
func CPUUsage(h Host) Usage {
	return Usage{AvgNCPUs: 1, MaxNCPUs: 1, Resource: "CPU", ProjectedFlops: h.PFpops, PeakFlops: h.PFpops}
}
